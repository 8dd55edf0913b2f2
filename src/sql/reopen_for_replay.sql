-- Before requeue_failed_page.sql moves a page of batch ?1's failed items back to
-- pending (same batch(), same ?1..?4, so both select the same items): take them off
-- batches.failed (the commit and the reaper count only moves out of processing), and when the
-- page is not empty reopen a finished batch (running again, finished_at cleared,
-- so it ends, and is reported, once more). Only running, paused and finished
-- batches are replayed into; for any other the page statement moves nothing either.
-- The page reads the partial index of failed items, never the whole batch, and
-- never the batch's failed completion callback (subject_id '' is not after ?2).
-- ?1 batch id, ?2 subject_id to page after ('' for the first page),
-- ?3 substring last_error must contain (NULL: any), ?4 page size.
UPDATE batches
SET failed = failed - p.n,
    status = CASE status WHEN 'finished' THEN 'running' ELSE status END,
    finished_at = NULL
FROM (
  SELECT count(*) AS n FROM (
    SELECT 1 FROM cron_queue INDEXED BY cron_queue_failed
    WHERE batch_id = ?1 AND status = 'failed' AND subject_id > ?2
      AND (?3 IS NULL OR instr(last_error, ?3) > 0)
    ORDER BY subject_id
    LIMIT ?4
  )
) AS p
WHERE batches.id = ?1 AND batches.status IN ('running', 'paused', 'finished') AND p.n > 0;
