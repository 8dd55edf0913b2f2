-- One batch with its live `processing` count, read from the items in flight only,
-- never the whole batch: INDEXED BY pins the partial index of leased items (those
-- with a real run_after), and the batch's first attempts claimed by its cursor are
-- read by primary key in its lease window (view lease_windows, migration 0015)
-- unless it has ended (then nothing of it is in flight and nothing is read). A
-- completion callback in flight is no item of the batch. With its `on_finish` and
-- the state of its callback row (subject_id '', migration 0007): one seek on the
-- UNIQUE (batch_id, subject_id) index, NULL until the batch ended with one.
-- ?1 batch id.
SELECT b.id, b.key, b.status, b.total, b.completed, b.failed, b.cancelled, b.created_at,
       b.finished_at, b.schedule_id, b.on_finish, b.fill_after IS NOT NULL AS filling,
       (SELECT count(*) FROM cron_queue AS q INDEXED BY cron_queue_leased
        WHERE q.status = 'processing' AND q.run_after > 0 AND q.batch_id = b.id
          AND q.kind <> 'callback') +
       CASE WHEN b.finished_at IS NULL
            THEN (SELECT count(*) FROM lease_windows AS w
                  JOIN cron_queue AS q NOT INDEXED ON q.id > w.lease_after AND q.id < w.unclaimed
                  WHERE w.batch_id = b.id AND q.batch_id = b.id
                    AND q.status = 'processing' AND q.run_after = 0)
            ELSE 0 END AS processing,
       c.status AS callback_status, c.attempt AS callback_attempts, c.last_error AS callback_error
FROM batches AS b
LEFT JOIN cron_queue AS c ON c.batch_id = b.id AND c.subject_id = '' AND c.kind = 'callback'
WHERE b.id = ?1;
