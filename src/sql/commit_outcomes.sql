-- Group commit: apply many outcomes in one statement. ?1 is a JSON array of
-- {"id", "token", "status", "run_after", "completed_at", "error", "attempt"}
-- ("attempt" is set only for an item released unrun: its unused attempt is given
-- back; otherwise the claim's count stands).
-- Each row is fenced by (id, lease_token, status = 'processing') (invariant 2): a
-- row whose lease was lost (reaped, re-claimed) matches nothing and is never
-- overwritten. RETURNING tells the caller which outcomes were applied.
-- The token stays on the row: until the reaper clears it or a claim replaces it,
-- "not processing and still my token" means "my commit applied it", which a retry
-- after a lost answer reads back (committed_outcomes.sql). It costs no written row.
UPDATE cron_queue
SET status = o.value ->> 'status',
    run_after = coalesce(o.value ->> 'run_after', cron_queue.run_after),
    completed_at = o.value ->> 'completed_at',
    last_error = o.value ->> 'error',
    attempt = coalesce(o.value ->> 'attempt', cron_queue.attempt),
    lease_expires_at = NULL
FROM json_each(?1) AS o
WHERE cron_queue.id = o.value ->> 'id'
  AND cron_queue.lease_token = o.value ->> 'token'
  AND cron_queue.status = 'processing'
RETURNING cron_queue.id;
