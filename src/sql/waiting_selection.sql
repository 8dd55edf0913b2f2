-- What holds each pending item of one batch now (GET /batches/{id}/items'
-- `waiting_on`, GET /batches/{id}'s counts): read only, nothing written. Not a
-- statement of its own: waiting_on_items.sql and waiting_on_counts.sql start with
-- it (src/sql/mod.rs joins them), so the page and the counts apply one rule.
--
-- The rules are the claim's: `governed` and `in_flight` are key_rules.sql, the
-- very text the claim reads (src/sql/mod.rs joins it after `held`), so a key is governed by its own limit, else the longest
-- partitioned `prefix:*` one; a pause is limit_state.paused_until after now; a
-- learned rate lowers the set one; items in flight are counted from the items.
-- The first reason that holds an item wins, in this order (what the claim tests
-- first holds it first):
--   batch_paused  its batch is paused (a paused batch is not claimable at all)
--   backoff       its run_after is after now (a retry's backoff, a deferred start)
--   paused        a key it holds is paused (the latest pause's end)
--   concurrency   a governed key has as many in flight as its concurrency
--   rate          a governed key has no token now, nor within the claim's
--                 look-ahead (core::limits::LOOK_AHEAD_MS) for an item holding
--                 one rate key (the claim takes those a second ahead)
--   turn          batches of a higher priority have at least a claim's worth
--                 (?5) of items due: the next claim takes theirs first
--   due           nothing else: the next claim may take it
-- Not read: equal priorities take turns within each claim (another batch delays
-- an item by at most a claim), and a key with room for fewer items than wait on
-- it lets the first through in the claim's order: reading that order would read
-- every item waiting on the key, so the items past its room still say `due`.
-- Items read: ?3's ids (a page's pending items, by primary key), or with ?3 NULL
-- the batch's own head, at most ?4 entries of its due index (backoff included,
-- by run_after) and its cursor items among the ?4 ids above its claim cursor.
-- Cost in rows read: the items, their distinct keys' limits and states (the
-- partitioned limits once per key), the items in flight while a key on the page
-- has a concurrency (as a claim reads them), and at most ?5 due items of higher
-- priority batches.
-- ?1 now (ms), ?2 batch id, ?3 JSON array of item ids or NULL, ?4 most entries of
-- each part of the batch's head (with ?3 NULL), ?5 a claim's size (CLAIM_CHUNK).
WITH batch AS MATERIALIZED (
  SELECT id, status, priority, claim_after, cursor_end,
         coalesce(fill ->> 'fire_at', created_at) AS due_at
  FROM batches WHERE id = ?2
),
waiting AS MATERIALIZED (
  SELECT q.id, CASE q.run_after WHEN 0 THEN this.due_at ELSE q.run_after END AS run_after,
         q.limits, q.last_error
  FROM json_each(?3) AS j
  CROSS JOIN cron_queue AS q ON q.id = j.value
  JOIN batch AS this ON this.id = q.batch_id
  WHERE q.status = 'pending' AND q.kind <> 'callback'
  UNION ALL
  SELECT * FROM (
    SELECT q.id, q.run_after, q.limits, q.last_error
    FROM batch AS this CROSS JOIN cron_queue AS q INDEXED BY cron_queue_due ON q.batch_id = this.id
    WHERE ?3 IS NULL AND q.status = 'pending' AND q.kind <> 'callback' AND q.run_after > 0
    ORDER BY q.run_after
    LIMIT ?4
  )
  UNION ALL
  -- A range of ids, not of matches: items in flight or ended between pending
  -- ones are read too, so the range bounds the rows read.
  SELECT q.id, this.due_at, q.limits, q.last_error
  FROM batch AS this CROSS JOIN cron_queue AS q NOT INDEXED
    ON q.id > this.claim_after AND q.id <= min(this.cursor_end, this.claim_after + ?4)
  WHERE ?3 IS NULL AND q.batch_id = this.id AND q.status = 'pending' AND q.run_after = 0
),
force AS MATERIALIZED (
  SELECT EXISTS (SELECT 1 FROM limits)
         OR EXISTS (SELECT 1 FROM limit_state WHERE paused_until IS NOT NULL) AS kept
),
held AS MATERIALIZED (
  SELECT w.id, k.value AS key
  FROM waiting AS w, json_each(w.limits) AS k
  WHERE w.limits IS NOT NULL AND (SELECT kept FROM force)
),
