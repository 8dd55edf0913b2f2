-- Batch ?1's items ended per time bucket of ?4 ms, oldest first: the newest ?5
-- buckets with anything in them (older ones are dropped: a client refreshing a
-- chart wants its right edge). Counted: the invocations that ended at or after
-- ?2 (ms) and started by ?3 (the batch's end, or now), each in the bucket of its
-- end. ?6 is how long an invocation can run (ms): the invocations_started index
-- is on the start, so the range starts that much earlier. One summary per
-- invocation, never an item; every summary in the range is read, whatever ?5.
-- D1 binds JS numbers as REAL, so the division is truncated explicitly (else
-- the "bucket" would be the end time itself).
SELECT bucket, completed, failed
FROM (SELECT CAST((i.started_at + i.elapsed_ms) / ?4 AS INTEGER) * CAST(?4 AS INTEGER) AS bucket,
             sum(b.value ->> 'completed') AS completed,
             sum(b.value ->> 'failed') AS failed
      FROM invocations AS i INDEXED BY invocations_started,
           json_each(i.per_batch) AS b
      WHERE i.started_at BETWEEN ?2 - ?6 AND ?3
        AND i.started_at + i.elapsed_ms >= ?2
        AND b.key = ?1
      GROUP BY bucket
      ORDER BY bucket DESC
      LIMIT ?5)
ORDER BY bucket;
