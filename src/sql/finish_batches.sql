-- End batches with nothing pending or in flight, each returned exactly once per end
-- (invariant 6; a replay reopens a finished batch, which then ends again):
-- running ones become finished, cancelled ones keep their status and get their
-- finished_at (a cancelled batch "ends cancelled" once its in-flight items have
-- committed and its pending ones were swept). One compare-and-set on (status,
-- finished_at); the counters are exact (commits, reaps and bulk moves), so no item is
-- counted. Paused batches are left alone: they end after a resume. A batch still
-- being filled from subjects (fill_after set, migration 0011) is not ended either:
-- its items so far may all have ended while more are still to be enqueued.
-- Setting finished_at fires the trigger batches_enqueue_callback (migration 0007):
-- a batch with on_finish gets its completion callback enqueued (or re-armed) in
-- this very statement, so an end and its callback commit together or not at all.
-- Nothing of an ended batch is in flight, so its lease window (migration 0015)
-- closes at its cursor's end: a count of its items in flight reads no row.
-- ?1 now.
UPDATE batches
SET status = CASE status WHEN 'running' THEN 'finished' ELSE status END,
    finished_at = ?1,
    lease_after = cursor_end
WHERE id IN (
  SELECT id FROM batches INDEXED BY batches_status
  WHERE status IN ('running', 'cancelled') AND finished_at IS NULL
    AND completed + failed + cancelled >= total
    AND fill_after IS NULL
)
RETURNING id, key, status, total, completed, failed, cancelled, created_at, finished_at;
