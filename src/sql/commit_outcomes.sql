-- Group commit: apply many outcomes in one statement. ?1 is a JSON array of
-- {"id", "token", "status", "run_after", "completed_at", "error", "attempt",
-- "receipts", "given_back", "refused_since"} ("attempt" is set only for an item
-- released unrun or refused by its receiver: its
-- unused attempt is given back; otherwise the claim's count stands. "given_back",
-- the throws of its dispatch running, only for an item given back after a
-- refusal; any other outcome stores 0. "receipts", only for items
-- with channels, is the JSON text of the receipts this outcome settles,
-- core::receipts::settle). "refused_since", the start of the item's streak of
-- refusals (migration 0025), only for a refusal or a release; any other outcome
-- clears it.
-- Each row is fenced by (id, lease_token, status = 'processing') (invariant 2): a
-- row whose lease was lost (reaped, re-claimed) matches nothing and is never
-- overwritten. Which outcomes it will not apply, count_committed_outcomes.sql
-- (the statement before, same fence) returns; this one returns nothing (a
-- RETURNING row per item costs a row read per item on D1).
-- The token stays on the row: until the reaper clears it or a claim replaces it,
-- "not processing and still my token" means "my commit applied it", which a retry
-- after a lost answer reads back (committed_outcomes.sql). It costs no written row.
-- Receipts merge into the stored ones in the same write (no extra row): a channel
-- the commit names takes its new receipt unless it is stored `delivered`, which
-- is never replaced; channels it does not name keep theirs. So a delivered
-- channel stays delivered whatever a commit carries. Rows without "receipts" keep
-- theirs untouched (the CASE reads nothing more for them).
-- The batches' counters are added by count_committed_outcomes.sql, run just
-- before in the same batch() (one row per batch per flush, not per item).
-- last_error keeps at most 1,000 characters: the drain cuts every reason to
-- 1,000 bytes (core::model::MAX_REASON_BYTES); this is the backstop for any
-- writer that did not.
-- A first attempt claimed by its batch's cursor (run_after = 0, migration 0015)
-- leaves it here: an outcome without a run_after (a release) gives it its claim's
-- instant, so nothing goes back to pending without a real run_after.
UPDATE cron_queue
SET status = o.value ->> 'status',
    run_after = coalesce(o.value ->> 'run_after', nullif(cron_queue.run_after, 0),
                         max(cron_queue.started_at, 1)),
    completed_at = o.value ->> 'completed_at',
    last_error = substr(o.value ->> 'error', 1, 1000),
    attempt = coalesce(o.value ->> 'attempt', cron_queue.attempt),
    given_back = coalesce(o.value ->> 'given_back', 0),
    refused_since = o.value ->> 'refused_since',
    lease_expires_at = NULL,
    receipts = CASE
      WHEN o.value ->> 'receipts' IS NULL THEN cron_queue.receipts
      ELSE (
        SELECT json_group_object(m.key, json(m.value))
        FROM (
          SELECT prev.key, prev.value FROM json_each(cron_queue.receipts) AS prev
          WHERE prev.value ->> 'status' = 'delivered'
             OR prev.key NOT IN (SELECT key FROM json_each(o.value ->> 'receipts'))
          UNION ALL
          SELECT incoming.key, incoming.value FROM json_each(o.value ->> 'receipts') AS incoming
          WHERE incoming.key NOT IN (SELECT prev.key FROM json_each(cron_queue.receipts) AS prev
                                     WHERE prev.value ->> 'status' = 'delivered')
        ) AS m
      )
    END
FROM json_each(?1) AS o
WHERE cron_queue.id = o.value ->> 'id'
  AND cron_queue.lease_token = o.value ->> 'token'
  AND cron_queue.status = 'processing';
