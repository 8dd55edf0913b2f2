-- Record how many items a just-created batch holds (uses the UNIQUE index).
UPDATE batches
SET total = (SELECT count(*) FROM cron_queue WHERE batch_id = ?1)
WHERE id = ?1;
