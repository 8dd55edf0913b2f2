-- Before requeue_failed_item.sql moves item ?1 back to pending (same batch()):
-- when it is failed, take it off its batch's failed counter and reopen the batch
-- if it had finished (see reopen_for_replay.sql). A cancelled batch is left alone,
-- and the item statement then moves nothing; so is a completion callback (no item).
-- ?1 item id.
UPDATE batches
SET failed = failed - 1,
    status = CASE status WHEN 'finished' THEN 'running' ELSE status END,
    finished_at = NULL
WHERE id = (SELECT batch_id FROM cron_queue
            WHERE id = ?1 AND status = 'failed' AND kind <> 'callback')
  AND status IN ('running', 'paused', 'finished');
