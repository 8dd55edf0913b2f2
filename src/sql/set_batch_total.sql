-- Record how many items a just-created batch holds (uses the UNIQUE index), and
-- the end of its cursor range (migration 0014): its items are all due at once
-- (enqueue_items.sql) and were the last insert of this batch() (ids ascending),
-- so the table's largest id, one seek, is its last item's unless it has none.
UPDATE batches
SET total = (SELECT count(*) FROM cron_queue WHERE batch_id = ?1),
    cursor_end = coalesce((SELECT id FROM cron_queue
                           WHERE id = (SELECT max(id) FROM cron_queue) AND batch_id = ?1), 0)
WHERE id = ?1;
