-- Batch ?1's items ended per time bucket of ?4 ms, oldest first, at most ?5
-- buckets: the invocations that ended at or after ?2 (ms) and started by ?3 (the
-- batch's end, or now), each counted in the bucket of its end. ?6 is how long an
-- invocation can run (ms): the invocations_started index is on the start, so the
-- range starts that much earlier. One summary per invocation, never an item, so
-- a refresh that asks only for the last bucket reads only the last summaries.
-- D1 binds JS numbers as REAL, so the division is truncated explicitly (else
-- the "bucket" would be the end time itself).
SELECT CAST((i.started_at + i.elapsed_ms) / ?4 AS INTEGER) * CAST(?4 AS INTEGER) AS bucket,
       sum(b.value ->> 'completed') AS completed,
       sum(b.value ->> 'failed') AS failed
FROM invocations AS i INDEXED BY invocations_started,
     json_each(i.per_batch) AS b
WHERE i.started_at BETWEEN ?2 - ?6 AND ?3
  AND i.started_at + i.elapsed_ms >= ?2
  AND b.key = ?1
GROUP BY bucket
ORDER BY bucket
LIMIT ?5;
