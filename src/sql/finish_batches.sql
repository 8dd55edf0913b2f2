-- Mark running batches with no pending or processing item as finished. One
-- compare-and-set on status: a batch is returned here exactly once (invariant 6).
-- The counters are exact (trigger), so no item is counted.
UPDATE batches
SET status = 'finished', finished_at = ?1
WHERE status = 'running' AND completed + failed >= total
RETURNING id, key, total, completed, failed, created_at, finished_at;
