-- A page of a batch's failed items in subject_id order after ?2: the same rows and
-- columns as list_batch_items.sql with status 'failed', read from the partial index
-- of failed items (migration 0003), so a big batch with few failures costs only
-- those rows. INDEXED BY makes a plan change an error instead of a batch scan.
-- A failed completion callback (subject_id '') is never listed: '' is not after ?2.
-- ?1 batch id, ?2 subject_id to page after ('' for the first page), ?3 page size.
SELECT id, subject_id, kind, status, attempt, max_attempts, last_error,
       run_after, started_at, completed_at, receipts, limits
FROM cron_queue INDEXED BY cron_queue_failed
WHERE batch_id = ?1 AND subject_id > ?2 AND status = 'failed'
ORDER BY subject_id
LIMIT ?3;
