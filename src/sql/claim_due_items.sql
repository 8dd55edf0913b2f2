-- Claim up to ?2 due items in one atomic statement (invariant 1: no item is handed
-- out twice). The attempt is counted here, at claim, so a run that crashes still
-- uses up an attempt (invariant 3). Each row gets its own lease token, ?3 (random
-- per claim) joined with the row id, which fences every later write about it.
--
-- What may be claimed is defined here, in one place:
-- - `claimable`: the batches whose items may be claimed: running ones, read from
--   their partial index. Paused and cancelled batches are not in it, so their items
--   are never read.
-- - `cursor`: each claimable batch's first attempts due at once (run_after = 0,
--   migration 0014), in no index: read by primary key from the batch's cursor
--   (claim_after, cursor_end], at most ?2 of them, skipping what is in flight or
--   ended (the cursor moves up with the commits, count_committed_outcomes.sql).
--   A claimer that names the largest id it claimed in a batch (?5) starts there
--   when that is higher: every cursor item below it was claimed (store::Claimed).
--   They count as due since their batch's fire instant (`fill`'s fire_at, the
--   run_after they were stored with before migration 0014), or its creation for
--   explicit items. The batch's ?2-th such item bounds the range (a scalar seek
--   and walk: no ephemeral list of ids), which is then read by primary key: each
--   row twice, the least the per-batch limit costs (D1 counts an ephemeral list's
--   rows as read too).
-- - the first arm of `next`: items with a real run_after (retries, reaps,
--   replays, deferred first attempts): each claimable batch is sought in the due
--   index (keyed by batch, then run_after; callback rows are not in it), at most
--   ?2 entries.
-- - `callbacks`: due completion callbacks (migration 0007) of batches that have
--   ended (finished_at set), whatever their status. A callback of an earlier end
--   whose batch a replay reopened is held: what it reports is no longer the
--   batch's state, and the batch's next end replaces it with the new summary
--   (trigger batches_enqueue_callback). At most ?2 entries of their own partial
--   index, which holds only callbacks waiting for a delivery, each with one
--   lookup of its batch by primary key; held ones are skipped, not counted
--   (as many as batches reopened with an undelivered callback).
-- The first ?2 of all three by (run_after, id) are claimed: the same order as a
-- single global index. Cost: per claimable batch, the rows from its cursor to its
-- ?2-th cursor item (those in flight are read and skipped) and at most ?2 due
-- index entries, and ?2 of the callbacks index. A cursor item claimed keeps
-- run_after = 0 (migration 0015): it enters no index, not even cron_queue_leased;
-- the reaper finds it in its batch's lease window, and its commit, a release or a
-- reap gives it a real run_after, so it never goes back to pending without one.
-- The claim returns each item's receipts (multi-channel items, core::receipts):
-- the run sends only the channels not yet delivered.
-- ?1 now, ?2 limit, ?3 token prefix, ?4 lease expiry, ?5 JSON object batch id →
-- largest id this claimer claimed there (may be empty).
WITH claimable AS (
  SELECT id, coalesce(fill ->> 'fire_at', created_at) AS due_at, claim_after, cursor_end
  FROM batches INDEXED BY batches_running WHERE status = 'running'
),
callbacks AS (
  SELECT c.id, c.run_after FROM cron_queue AS c INDEXED BY cron_queue_callbacks
  WHERE c.status = 'pending' AND c.kind = 'callback' AND c.run_after <= ?1
    AND c.attempt < c.max_attempts
    AND (SELECT b.finished_at FROM batches AS b WHERE b.id = c.batch_id) IS NOT NULL
  ORDER BY c.run_after, c.id
  LIMIT ?2
),
cursor AS (
  SELECT q.id, b.due_at AS run_after
  FROM (SELECT id, due_at, cursor_end,
               max(claim_after, coalesce(json_extract(?5, '$."' || id || '"'), 0)) AS after
        FROM claimable) AS b
  JOIN cron_queue AS q NOT INDEXED
    ON q.id > b.after
   AND q.id <= coalesce((SELECT c.id FROM cron_queue AS c NOT INDEXED
                         WHERE c.id > b.after AND c.id <= b.cursor_end
                           AND c.batch_id = b.id AND c.status = 'pending' AND c.run_after = 0
                           AND c.attempt < c.max_attempts
                         ORDER BY c.id
                         LIMIT 1 OFFSET ?2 - 1),
                        b.cursor_end)
  WHERE q.batch_id = b.id AND q.status = 'pending' AND q.run_after = 0
    AND q.attempt < q.max_attempts
),
next AS (
  SELECT q.id, q.run_after
  FROM claimable AS b, cron_queue AS q
  WHERE q.id IN (
    SELECT d.id FROM cron_queue AS d INDEXED BY cron_queue_due
    WHERE d.batch_id = b.id AND d.status = 'pending' AND d.kind <> 'callback'
      AND d.run_after > 0 AND d.run_after <= ?1 AND d.attempt < d.max_attempts
    ORDER BY d.run_after, d.id
    LIMIT ?2
  )
  UNION ALL
  SELECT id, run_after FROM cursor
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
