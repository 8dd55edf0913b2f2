-- One batch with its live `processing` count (view batches_live, migration 0016:
-- read from the items in flight only, never the whole batch). With its `on_finish` and
-- the state of its callback row (subject_id '', migration 0007): one seek on the
-- callback index (migration 0017), NULL until the batch ended with one.
-- Its cost (migration 0026) as one JSON object in the form of core::cost::Cost.
-- ?1 batch id.
SELECT b.id, b.key, b.status, b.total, b.completed, b.failed, b.cancelled, b.created_at,
       b.finished_at, b.schedule_id, b.on_finish, b.fill_after IS NOT NULL AS filling, b.priority,
       b.processing,
       json_object('d1_rows_written', b.cost_d1_rows_written, 'd1_rows_read', b.cost_d1_rows_read,
                   'd1_statements', b.cost_d1_statements, 'subrequests', b.cost_subrequests,
                   'queue_operations', b.cost_queue_operations,
                   'worker_requests', b.cost_worker_requests) AS cost,
       c.status AS callback_status, c.attempt AS callback_attempts, c.last_error AS callback_error
FROM batches_live AS b
LEFT JOIN cron_queue AS c INDEXED BY cron_queue_callback ON c.batch_id = b.id AND c.kind = 'callback'
WHERE b.id = ?1;
