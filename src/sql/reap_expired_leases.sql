-- Requeue items whose lease expired (their runner died or lost track), or fail them
-- when they have used every attempt (invariant 3). Only expired leases match, so a
-- live lease is never touched (invariant 2). Clearing the token ends the lease for
-- good: a late commit under it matches nothing, and its retry does not read the
-- row back as applied (committed_outcomes.sql). Returns each row's kind: a
-- completion callback's expired lease counts in no batch's timeline. An item with
-- receipts (multi-channel) that fails here fails its channels not delivered, as a
-- failed run would (core::receipts::settle); delivered ones stay delivered.
-- Its failures are counted by count_reaped_failures.sql, run just before in the
-- same batch() over the same page (same order, ties broken by id).
-- Expired leases are found in two places (migration 0015): the leased index,
-- which holds the items in flight with a real run_after, and the first attempts
-- in flight (run_after = 0, claimed by a cursor; view first_attempts_in_flight:
-- the lease window, read by primary key) of each running or cancelled batch not
-- ended. A paused batch's are not read: a tick would pay a few rows for every
-- paused batch kept, for leases that expire only when a drain died around the
-- pause; they are reaped once it is resumed or cancelled. The reaper gives them a real run_after,
-- so a requeued one is claimed from the due index.
-- Paged by ?2. ?1 now.
UPDATE cron_queue
SET status = CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'pending' END,
    completed_at = CASE WHEN attempt >= max_attempts THEN ?1 END,
    last_error = CASE WHEN attempt >= max_attempts
                      THEN 'lease expired after ' || attempt || ' attempts'
                      ELSE 'lease expired during attempt ' || attempt END,
    run_after = ?1,
    lease_token = NULL,
    lease_expires_at = NULL,
    receipts = CASE WHEN attempt >= max_attempts AND receipts IS NOT NULL THEN (
      SELECT json_group_object(r.key, CASE WHEN r.value ->> 'status' = 'pending'
                                           THEN json_set(r.value, '$.status', 'failed')
                                           ELSE json(r.value) END)
      FROM json_each(cron_queue.receipts) AS r
    ) ELSE receipts END
WHERE id IN (
  SELECT id FROM (
    SELECT * FROM (SELECT id, lease_expires_at FROM cron_queue INDEXED BY cron_queue_leased
                   WHERE status = 'processing' AND run_after > 0 AND lease_expires_at <= ?1
                   ORDER BY lease_expires_at, id LIMIT ?2)
    UNION ALL
    SELECT * FROM (SELECT f.id, f.lease_expires_at
                   FROM batches AS b INDEXED BY batches_status
                   JOIN first_attempts_in_flight AS f ON f.batch_id = b.id
                   WHERE b.status IN ('running', 'cancelled') AND b.finished_at IS NULL
                     AND f.lease_expires_at <= ?1
                   ORDER BY f.lease_expires_at, f.id LIMIT ?2)
    ORDER BY 2, 1
    LIMIT ?2
  )
)
RETURNING id, batch_id, status, kind;
