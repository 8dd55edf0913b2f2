-- Count the next page of each cancelled batch's pending items into
-- batches.cancelled. Runs in the same batch() right before cancel_pending_page.sql,
-- which moves that page: both take min(?2, pending items) of the same batches, so
-- the counter stays exact without the per-item trigger write a cancel would
-- otherwise cost (the trigger counts only moves out of processing). Batches with
-- nothing pending are not written. Reads ?2 due-index entries per batch at most.
-- ?1 batch id, or NULL for every cancelled batch that has not ended; ?2 page size
-- per batch.
UPDATE batches
SET cancelled = cancelled + (
  SELECT count(*) FROM (
    SELECT 1 FROM cron_queue AS q INDEXED BY cron_queue_due
    WHERE q.batch_id = batches.id AND q.status = 'pending' AND q.kind <> 'callback'
    LIMIT ?2
  )
)
WHERE id IN (
  SELECT b.id FROM batches AS b INDEXED BY batches_status
  WHERE b.status = 'cancelled' AND b.finished_at IS NULL AND (?1 IS NULL OR b.id = ?1)
    AND EXISTS (SELECT 1 FROM cron_queue AS q INDEXED BY cron_queue_due
                WHERE q.batch_id = b.id AND q.status = 'pending'
                  AND q.kind <> 'callback')
);
