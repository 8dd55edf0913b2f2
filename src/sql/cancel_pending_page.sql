-- Move a page of each cancelled batch's pending items to the terminal status
-- `cancelled` (retries and expired leases of a cancelled batch come back as
-- pending and are swept here too, so nothing loops). Bounded: at most ?2 items per
-- batch per statement, read from the due index by batch, so a million-item cancel
-- never holds D1 for long. Counted by count_cancelled_page.sql, which runs right
-- before it in the same batch() with the same ?1 and ?2. last_error keeps any
-- earlier error and says why the item ended.
-- ?1 batch id, or NULL for every cancelled batch that has not ended; ?2 page size
-- per batch; ?3 now.
UPDATE cron_queue
SET status = 'cancelled',
    completed_at = ?3,
    last_error = CASE WHEN last_error IS NULL THEN 'batch cancelled'
                      ELSE last_error || '; batch cancelled' END
WHERE id IN (
  SELECT q.id
  FROM batches AS b INDEXED BY batches_status, cron_queue AS q
  WHERE b.status = 'cancelled' AND b.finished_at IS NULL AND (?1 IS NULL OR b.id = ?1)
    AND q.id IN (
      SELECT d.id FROM cron_queue AS d INDEXED BY cron_queue_due
      WHERE d.batch_id = b.id AND d.status = 'pending' AND d.kind <> 'callback'
      LIMIT ?2
    )
);
