-- Newest batches first, each with its live `processing` count (see get_batch.sql).
SELECT b.id, b.key, b.status, b.total, b.completed, b.failed, b.cancelled, b.created_at,
       b.finished_at, b.schedule_id,
       (SELECT count(*) FROM cron_queue AS q INDEXED BY cron_queue_leased
        WHERE q.status = 'processing' AND q.batch_id = b.id) AS processing
FROM batches AS b
ORDER BY b.created_at DESC, b.id DESC
LIMIT ?1;
