-- Retention, step 2: delete up to ?2 batches that ended before ?1 and have no
-- items left (step 1 deletes them first; D1 enforces the items' foreign key, so a
-- batch with items is never deleted). Their keys become free again.
-- ?1 cutoff, ?2 most rows per statement.
DELETE FROM batches
WHERE id IN (
  SELECT b.id FROM batches AS b INDEXED BY batches_status
  WHERE b.status IN ('finished', 'cancelled') AND b.finished_at < ?1
    AND NOT EXISTS (SELECT 1 FROM cron_queue AS q WHERE q.batch_id = b.id)
  LIMIT ?2
);
