-- Claim up to ?2 due items in one atomic statement (invariant 1: no item is handed
-- out twice). The attempt is counted here, at claim, so a run that crashes still
-- uses up an attempt (invariant 3). Each row gets its own lease token, ?3 (random
-- per claim) joined with the row id, which fences every later write about it.
-- ?1 now, ?2 limit, ?3 token prefix, ?4 lease expiry.
WITH next AS (
  SELECT id FROM cron_queue INDEXED BY cron_queue_due
  WHERE status = 'pending' AND run_after <= ?1 AND attempt < max_attempts
  ORDER BY run_after, id
  LIMIT ?2
)
UPDATE cron_queue
SET status = 'processing',
    attempt = attempt + 1,
    lease_token = ?3 || '.' || id,
    lease_expires_at = ?4,
    started_at = ?1
WHERE id IN (SELECT id FROM next) AND status = 'pending'
RETURNING id AS item_id, lease_token, batch_id, subject_id, attempt, max_attempts, kind, payload;
