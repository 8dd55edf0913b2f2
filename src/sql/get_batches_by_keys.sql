-- The batches named by a tick's fire keys, read right after the fire's batch() so
-- the log can say, per fire, whether it created its batch (the id it planned),
-- found the key taken (invariant 5: re-firing creates nothing) or was superseded
-- (no batch). One statement for the whole page of fires; each key is a lookup on
-- the UNIQUE key index. ?1 JSON array of keys.
SELECT b.id, b.key, b.status, b.total, b.completed, b.failed, b.cancelled, b.created_at,
       b.finished_at, b.schedule_id, b.on_finish, b.fill_after IS NOT NULL AS filling, b.priority,
       b.processing,
       c.status AS callback_status, c.attempt AS callback_attempts, c.last_error AS callback_error
FROM batches_live AS b
LEFT JOIN cron_queue AS c INDEXED BY cron_queue_callback ON c.batch_id = b.id AND c.kind = 'callback'
WHERE b.key IN (SELECT value FROM json_each(?1));
