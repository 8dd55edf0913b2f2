-- Count a group commit's terminal outcomes into their batches' counters: one
-- written row per batch per flush, instead of a trigger's row per item
-- (invariant 10: completed and failed equal the real counts). Runs in the same
-- batch() right BEFORE commit_outcomes.sql, so it sees exactly the rows that
-- statement will apply: those still processing under the outcome's lease token
-- (invariant 2). A retried commit counts only what its failed attempt did not
-- apply (those rows are no longer processing), so nothing is counted twice. A
-- completion callback is no item of its batch: never counted.
-- It also tells which outcomes that statement will NOT apply (lost leases, a
-- callback's included): `commit_lost`, the JSON array of their ids (NULL when
-- none), is set on the batch row only so that RETURNING can hand it back
-- (RETURNING reads only the updated table), so commit_outcomes.sql returns
-- nothing: a RETURNING row per item costs a row read per item on D1, the batch's
-- row is written here anyway (also for a flush of its completion callback alone:
-- one row per delivery). Every batch of the flush returns its row, so an outcome
-- of a batch that returned none (deleted) counts as refused, never as applied. (A
-- retried commit reads back what was applied instead, committed_outcomes.sql: its
-- failed attempt's rows are not processing any more.)
-- The outcomes come grouped by batch (?1: batch id → its outcomes), so each
-- batch's are read once by primary key, without a sort to group them.
-- The same write moves each batch's claim cursor (migration 0014) up to the
-- largest id the flush settles: without limits a cursor claim takes a batch's
-- cursor items in id order, so every cursor item below a claimed one was claimed
-- too, and those the cursor passes need not be read again. While limits are
-- defined a held item may stay pending below a claimed one (migration 0020): the
-- cursor then stops just before the first pending cursor item; so it does while
-- a pause is kept (migration 0021). (The claim that passes a held item gives it a
-- real run_after, claim_selection.sql's `passed`: the next flush moves on.) A batch whose flush holds only retries or
-- releases gets that write too (it would anyway with a terminal outcome).
-- It also moves the batch's lease window (migration 0015) up to just before its
-- first cursor item still on its first attempt (pending or in flight, run_after
-- = 0), or to the end of its range: the rows from the old mark to there are read
-- once. This flush's own items are still in flight here, so the window trails by
-- one flush (the batch's next flush, or its end, moves it on); excluding them
-- read about 2 rows more per item on local D1 than the rows they save.
-- ?1 JSON object: batch id → array of the commit_outcomes.sql objects ("id",
-- "token", "status" are read).
-- Each batch's tally is computed once (MATERIALIZED: SQLite would otherwise
-- evaluate it again for every column that reads it).
WITH x AS MATERIALIZED (
  SELECT g.key AS batch_id,
         (SELECT json_object(
                   'done', coalesce(sum(q.kind <> 'callback' AND o.value ->> 'status' = 'completed'), 0),
                   'failures', coalesce(sum(q.kind <> 'callback' AND o.value ->> 'status' = 'failed'), 0),
                   'counted', coalesce(sum(q.kind <> 'callback'), 0),
                   'last_id', max(CASE WHEN q.kind <> 'callback' THEN q.id END),
                   'lost', CASE WHEN count(*) > count(q.id)
                                THEN json_group_array(o.value ->> 'id') FILTER (WHERE q.id IS NULL)
                           END)
          FROM json_each(g.value) AS o
          LEFT JOIN cron_queue AS q
            ON q.id = o.value ->> 'id'
           AND q.lease_token = o.value ->> 'token'
           AND q.status = 'processing') AS d
  FROM json_each(?1) AS g
)
UPDATE batches
SET completed = batches.completed + (x.d ->> 'done'),
    failed = batches.failed + (x.d ->> 'failures'),
    claim_after = max(batches.claim_after,
                      CASE WHEN NOT EXISTS (SELECT 1 FROM limits)
                            AND NOT EXISTS (SELECT 1 FROM limit_state
                                            WHERE paused_until IS NOT NULL) THEN coalesce(x.d ->> 'last_id', 0)
                      ELSE min(coalesce(x.d ->> 'last_id', 0),
                               coalesce((SELECT q.id - 1 FROM cron_queue AS q NOT INDEXED
                                         WHERE q.id > batches.claim_after
                                           AND q.id <= batches.cursor_end
                                           AND q.batch_id = batches.id AND q.run_after = 0
                                           AND q.status = 'pending'
                                         ORDER BY q.id LIMIT 1),
                                        batches.cursor_end))
                      END),
    lease_after = CASE WHEN x.d ->> 'counted' = 0 THEN batches.lease_after ELSE
                    coalesce((SELECT q.id - 1 FROM cron_queue AS q NOT INDEXED
                              WHERE q.id > batches.lease_after AND q.id <= batches.cursor_end
                                AND q.batch_id = batches.id AND q.run_after = 0
                                AND q.status IN ('pending', 'processing')
                              ORDER BY q.id LIMIT 1),
                             batches.cursor_end)
                  END,
    commit_lost = x.d ->> 'lost'
FROM x
WHERE batches.id = x.batch_id
RETURNING batches.id AS batch_id, batches.commit_lost AS lost;
