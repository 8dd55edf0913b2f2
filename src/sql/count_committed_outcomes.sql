-- Count a group commit's terminal outcomes into their batches' counters: one
-- written row per batch per flush, instead of a trigger's row per item
-- (invariant 10: completed and failed equal the real counts). Runs in the same
-- batch() right BEFORE commit_outcomes.sql, so it sees exactly the rows that
-- statement will apply: those still processing under the outcome's lease token
-- (invariant 2). A retried commit counts only what its failed attempt did not
-- apply (those rows are no longer processing), so nothing is counted twice. A
-- completion callback is no item of its batch: never counted.
-- ?1 the same JSON array as commit_outcomes.sql ("id", "token", "status" are read).
UPDATE batches
SET completed = batches.completed + d.done,
    failed = batches.failed + d.failures
FROM (
  SELECT q.batch_id,
         sum(o.value ->> 'status' = 'completed') AS done,
         sum(o.value ->> 'status' = 'failed') AS failures
  FROM json_each(?1) AS o
  JOIN cron_queue AS q ON q.id = o.value ->> 'id'
  WHERE q.lease_token = o.value ->> 'token'
    AND q.status = 'processing'
    AND q.kind <> 'callback'
    AND o.value ->> 'status' IN ('completed', 'failed')
  GROUP BY q.batch_id
) AS d
WHERE batches.id = d.batch_id;
