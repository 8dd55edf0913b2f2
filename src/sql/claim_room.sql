-- The claim's selection, after the keys' rules and their state
-- (claim_selection.sql, key_rules.sql, key_state.sql): what each governed key
-- has room for now and ahead, and which candidates that leaves held
-- (`blocked`), taken (`next`, `taken`) and passed.
room AS MATERIALIZED (
  SELECT key,
         CASE WHEN paused THEN 0 ELSE min(slots, tokens) END AS room,
         CASE WHEN paused THEN 0 WHEN slotted THEN min(slots, tokens_ahead)
              ELSE min(slots, tokens) END AS ahead
  FROM (SELECT g.key, g.paused_until IS NOT NULL AS paused,
               -- A slot rounded up to the ms stays within its token's interval
               -- (core::limits::Gcra::claims_ahead): else no claim ahead.
               coalesce((g.burst - 1) * g.per_seconds * 1000 >= g.rate - 1, 0) AS slotted,
               CASE WHEN g.concurrency IS NULL THEN 1000000000
                    ELSE g.concurrency - coalesce((SELECT f.n FROM in_flight AS f WHERE f.key = g.key), 0)
               END AS slots,
               CASE WHEN g.rate IS NULL THEN 1000000000
                    WHEN ?6 = 0 THEN 0
                    ELSE (g.burst * g.per_seconds * 1000
                          - max(0, coalesce(s.tat, 0) - CAST(?1 AS INTEGER) * g.rate))
                         / (g.per_seconds * 1000)
               END AS tokens,
               -- Starts whose slot comes by now + 1 s (core::limits::LOOK_AHEAD_MS).
               CASE WHEN g.rate IS NULL THEN 1000000000
                    WHEN ?6 = 0 THEN 0
                    ELSE (g.burst * g.per_seconds * 1000 + (CAST(?1 AS INTEGER) + 1000) * g.rate
                          - max(coalesce(s.tat, 0), CAST(?1 AS INTEGER) * g.rate))
                         / (g.per_seconds * 1000)
               END AS tokens_ahead
        FROM governed AS g LEFT JOIN state AS s ON s.key = g.key)
),
-- Candidates holding two rate keys or more: they start at the claim, never at a
-- slot ahead (a start put off by one key would bunch with the other's slots).
multi AS MATERIALIZED (
  SELECT h.id FROM held AS h JOIN governed AS g ON g.key = h.key AND g.rate IS NOT NULL
  GROUP BY h.id HAVING count(*) > 1
),
-- Each held (candidate, key) with its key's room, read once: `blocked` names it
-- once, so SQLite expands the keys' rules once per name of `blocked` (every name
-- of a CTE copies its whole text, and local D1 plans every call).
spent AS MATERIALIZED (
  SELECT id, key, ord, multi, room, ahead,
         max(ahead <= 0 OR (room <= 0 AND multi)) OVER (PARTITION BY id) AS spent
  FROM (SELECT h.id, h.key, h.ord, r.room, r.ahead, m.id IS NOT NULL AS multi
        FROM held AS h JOIN room AS r ON r.key = h.key
        LEFT JOIN multi AS m ON m.id = h.id)
),
-- Held: a candidate one of whose keys has no room (`spent`), else one past its
-- key's room among the candidates not spent, in claim order.
blocked AS (
  SELECT DISTINCT id
  FROM (SELECT id, spent, multi, room, ahead,
               row_number() OVER (PARTITION BY key, spent ORDER BY ord) AS n
        FROM spent)
  WHERE spent OR n > CASE WHEN multi THEN room ELSE ahead END
),
next AS (
  SELECT id FROM ordered
  WHERE id NOT IN (SELECT id FROM blocked)
  ORDER BY ord
  LIMIT ?2
),
taken AS (
  SELECT k.value AS key, count(*) AS n
  FROM next AS x JOIN ordered AS o ON o.id = x.id, json_each(o.limits) AS k
  WHERE o.limits IS NOT NULL
  GROUP BY k.value
),
-- Cursor items held below a cursor item of their batch that is not held: the
-- claim (claim_due_items.sql) gives each its batch's due instant as a real
-- run_after (at least 1: the due index holds run_after > 0), its same place in
-- the order, so it waits in the due index and no longer keeps its batch's
-- cursor and lease window below it (else every claim and commit would read again
-- each item completed behind it). One window over the candidates, `blocked` read
-- once: naming the selection's parts again made SQLite plan the claim twice as
-- long, and local D1 prepares every call.
passed AS (
  SELECT id, run_after
  FROM (SELECT o.id, max(o.run_after, 1) AS run_after, b.id IS NOT NULL AS held,
               max(CASE WHEN b.id IS NULL THEN o.id END) OVER (PARTITION BY o.batch_id) AS top
        FROM ordered AS o LEFT JOIN blocked AS b ON b.id = o.id
        WHERE o.at_cursor)
  WHERE held AND id < top
  -- A bound the planner can see: it then reads the claim's rows by id, never
  -- the queue (a pass left for the next claim is only a little later).
  LIMIT 1000
)
