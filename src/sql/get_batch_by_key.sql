-- One batch by its key, with its live `processing` count (see get_batch.sql).
SELECT b.id, b.key, b.status, b.total, b.completed, b.failed, b.cancelled, b.created_at,
       b.finished_at, b.schedule_id, b.on_finish, b.fill_after IS NOT NULL AS filling, b.priority,
       b.processing,
       c.status AS callback_status, c.attempt AS callback_attempts, c.last_error AS callback_error
FROM batches_live AS b
LEFT JOIN cron_queue AS c INDEXED BY cron_queue_callback ON c.batch_id = b.id AND c.kind = 'callback'
WHERE b.key = ?1;
