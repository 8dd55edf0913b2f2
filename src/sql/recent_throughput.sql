-- Items each batch ended in the invocations that ended at or after ?1 (ms): the
-- numerator of a batch's rate (core::throughput). Only batches in ?2 (a JSON
-- array of ids: the running ones the caller shows). ?3 is how long an invocation
-- can run (ms): the invocations_started index is on the start, so the range
-- starts that much earlier. It reads the last few minutes' summaries (about one
-- per minute in production), never the queue.
SELECT b.key AS batch_id,
       sum(b.value ->> 'completed') AS completed,
       sum(b.value ->> 'failed') AS failed
FROM invocations AS i INDEXED BY invocations_started,
     json_each(i.per_batch) AS b
WHERE i.started_at >= ?1 - ?3
  AND i.started_at + i.elapsed_ms >= ?1
  AND b.key IN (SELECT value FROM json_each(?2))
GROUP BY b.key;
