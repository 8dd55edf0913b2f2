-- Count a group commit's terminal outcomes into their batches' counters: one
-- written row per batch per flush, instead of a trigger's row per item
-- (invariant 10: completed and failed equal the real counts). Runs in the same
-- batch() right BEFORE commit_outcomes.sql, so it sees exactly the rows that
-- statement will apply: those still processing under the outcome's lease token
-- (invariant 2). A retried commit counts only what its failed attempt did not
-- apply (those rows are no longer processing), so nothing is counted twice. A
-- completion callback is no item of its batch: never counted.
-- The same write moves each batch's claim cursor (migration 0014) up to the
-- largest id the flush settles: a cursor claim takes a batch's cursor items in id
-- order, so every cursor item below a claimed one was claimed too, and those the
-- cursor passes need not be read again. A batch whose flush holds only retries or
-- releases gets that write too (it would anyway with a terminal outcome).
-- It also moves the batch's lease window (migration 0015) up to just before its
-- first cursor item still on its first attempt (pending or in flight, run_after
-- = 0), or to the end of its range: the rows from the old mark to there are read
-- once. This flush's own items are still in flight here, so the window trails by
-- one flush (the batch's next flush, or its end, moves it on); excluding them
-- read about 2 rows more per item on local D1 than the rows they save.
-- ?1 the same JSON array as commit_outcomes.sql ("id", "token", "status" are read).
UPDATE batches
SET completed = batches.completed + d.done,
    failed = batches.failed + d.failures,
    claim_after = max(batches.claim_after, d.last_id),
    lease_after = coalesce((SELECT q.id - 1 FROM cron_queue AS q NOT INDEXED
                            WHERE q.id > batches.lease_after AND q.id <= batches.cursor_end
                              AND q.batch_id = batches.id AND q.run_after = 0
                              AND q.status IN ('pending', 'processing')
                            ORDER BY q.id LIMIT 1),
                           batches.cursor_end)
FROM (
  SELECT q.batch_id,
         sum(o.value ->> 'status' = 'completed') AS done,
         sum(o.value ->> 'status' = 'failed') AS failures,
         max(q.id) AS last_id
  FROM json_each(?1) AS o
  JOIN cron_queue AS q ON q.id = o.value ->> 'id'
  WHERE q.lease_token = o.value ->> 'token'
    AND q.status = 'processing'
    AND q.kind <> 'callback'
  GROUP BY q.batch_id
) AS d
WHERE batches.id = d.batch_id;
