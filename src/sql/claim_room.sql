-- The claim's selection, after the keys' rules (claim_selection.sql, then
-- key_rules.sql): what each governed key has room for now and ahead, and which
-- candidates that leaves held (`blocked`), taken (`next`, `taken`) and passed.
state AS MATERIALIZED (
  SELECT g.key, CASE WHEN s.claim = ?3 THEN s.tat_before
                     WHEN s.basis = g.basis THEN s.tat
                     -- One learned rate to the next (a step, a halving): the
                     -- same instant in the new rate's units, not a fresh burst.
                     WHEN s.basis LIKE '% learned' AND g.basis LIKE '% learned'
                     THEN s.tat / CAST(substr(s.basis, 1, instr(s.basis, '/') - 1) AS INTEGER)
                          * g.rate END AS tat
  FROM governed AS g LEFT JOIN limit_state AS s ON s.key = g.key
  WHERE g.rate IS NOT NULL
),
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
spent AS (
  SELECT h.id FROM held AS h JOIN room AS r ON r.key = h.key
  WHERE r.ahead <= 0 OR (r.room <= 0 AND h.id IN (SELECT id FROM multi))
),
blocked AS (
  SELECT id FROM spent
  UNION
  SELECT h.id
  FROM (SELECT id, key, row_number() OVER (PARTITION BY key ORDER BY ord) AS n
        FROM held WHERE id NOT IN (SELECT id FROM spent)) AS h
  JOIN room AS r ON r.key = h.key
  WHERE h.n > CASE WHEN h.id IN (SELECT id FROM multi) THEN r.room ELSE r.ahead END
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
-- Cursor items held while a later cursor item of their batch is taken: the claim
-- (claim_due_items.sql) gives each its batch's due instant as a real run_after
-- (at least 1: the due index holds run_after > 0), the same place in the order, so it waits in the due index and no longer keeps
-- its batch's cursor and lease window below it. Else every claim and commit
-- would read again each item completed behind it (the cost grew with the batch).
passed AS (
  SELECT o.id, max(o.run_after, 1) AS run_after
  FROM ordered AS o
  JOIN (SELECT y.batch_id, max(y.id) AS top
        FROM next AS x JOIN ordered AS y ON y.id = x.id
        WHERE y.at_cursor
        GROUP BY y.batch_id) AS t ON t.batch_id = o.batch_id
  WHERE o.at_cursor AND o.id < t.top AND o.id IN (SELECT id FROM blocked)
)
