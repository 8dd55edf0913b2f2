-- Claim up to ?2 due items in one atomic statement (invariant 1: no item is handed
-- out twice). The attempt is counted here, at claim, so a run that crashes still
-- uses up an attempt (invariant 3). Each row gets its own lease token, ?3 (random
-- per claim) joined with the row id, which fences every later write about it.
--
-- What may be claimed is defined here, in one place:
-- - `claimable`: the batches whose items may be claimed: running ones, read from
--   their partial index. Paused and cancelled batches are not in it, so their items
--   are never read: the claim seeks each claimable batch in the due index (keyed by
--   batch, then run_after; callback rows are not in it) and reads at most ?2
--   entries of each.
-- - `callbacks`: due completion callbacks (migration 0007) of batches that have
--   ended (finished_at set), whatever their status. A callback of an earlier end
--   whose batch a replay reopened is held: what it reports is no longer the
--   batch's state, and the batch's next end replaces it with the new summary
--   (trigger batches_enqueue_callback). At most ?2 entries of their own partial
--   index, which holds only callbacks waiting for a delivery, each with one
--   lookup of its batch by primary key; held ones are skipped, not counted
--   (as many as batches reopened with an undelivered callback).
-- The first ?2 of both by (run_after, id) are claimed: the same order as a single
-- global index. Cost: at most ?2 index entries per claimable batch with due items
-- and ?2 of the callbacks index, one seek per claimable batch without.
-- The claim returns each item's receipts (multi-channel items, core::receipts):
-- the run sends only the channels not yet delivered.
-- ?1 now, ?2 limit, ?3 token prefix, ?4 lease expiry.
WITH claimable AS (
  SELECT id FROM batches INDEXED BY batches_running WHERE status = 'running'
),
callbacks AS (
  SELECT c.id, c.run_after FROM cron_queue AS c INDEXED BY cron_queue_callbacks
  WHERE c.status = 'pending' AND c.kind = 'callback' AND c.run_after <= ?1
    AND c.attempt < c.max_attempts
    AND (SELECT b.finished_at FROM batches AS b WHERE b.id = c.batch_id) IS NOT NULL
  ORDER BY c.run_after, c.id
  LIMIT ?2
),
next AS (
  SELECT q.id, q.run_after
  FROM claimable AS b, cron_queue AS q
  WHERE q.id IN (
    SELECT d.id FROM cron_queue AS d INDEXED BY cron_queue_due
    WHERE d.batch_id = b.id AND d.status = 'pending' AND d.kind <> 'callback'
      AND d.run_after <= ?1 AND d.attempt < d.max_attempts
    ORDER BY d.run_after, d.id
    LIMIT ?2
  )
  UNION ALL
  SELECT id, run_after FROM callbacks
  ORDER BY 2, 1
  LIMIT ?2
)
UPDATE cron_queue
SET status = 'processing',
    attempt = attempt + 1,
    lease_token = ?3 || '.' || id,
    lease_expires_at = ?4,
    started_at = ?1
WHERE id IN (SELECT id FROM next) AND status = 'pending'
RETURNING id AS item_id, lease_token, batch_id, subject_id, attempt, max_attempts, kind, payload,
          receipts;
