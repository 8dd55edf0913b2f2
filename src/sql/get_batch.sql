-- One batch with its live `processing` count. INDEXED BY pins the partial index of
-- leased items, so the count reads only items in flight, never the whole batch.
SELECT b.id, b.key, b.status, b.total, b.completed, b.failed, b.cancelled, b.created_at,
       b.finished_at, b.schedule_id,
       (SELECT count(*) FROM cron_queue AS q INDEXED BY cron_queue_leased
        WHERE q.status = 'processing' AND q.batch_id = b.id) AS processing
FROM batches AS b
WHERE b.id = ?1;
