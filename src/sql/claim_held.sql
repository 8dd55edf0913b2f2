-- What a claim leaves held, for its claimer: run first in the claim's batch()
-- (before charge_rate_limits.sql and claim_due_items.sql, so it reads the state
-- they start from) over the same selection (claim_selection.sql, which this
-- statement starts with). One row, whatever was claimed: how many candidates the
-- limits held back, the earliest instant one of them may go after this claim's
-- charge — the latest of its keys' instants (a rate's token, a pause's end) —
-- (NULL when each waits on a slot: a key at its concurrency, or a concurrency
-- its only limit; a slot frees only when an item in flight ends), and whether limits,
-- and rate limits (a learned rate in force is one), are defined now. So a claimer
-- whose claim came back short knows
-- whether to claim again and when, and learns of limits even from an empty claim.
-- Sent only while limits are defined or not known not to be (store::Claimed).
-- Wake instant of a rate key: the smallest t with room ≥ k after the charge, i.e.
-- t × rate ≥ tat' − (burst − k) × cost, tat' = max(tat, now × rate) + taken × cost,
-- k = max(1, min(waiting, rate / per_seconds)) with `waiting` the held candidates
-- holding the key, a second (LOOK_AHEAD_MS) earlier while one of them holds no
-- other rate key (it may be claimed ahead, claim_selection.sql): a held claimer
-- claims a second's starts at once, not one per token. Held candidates that all
-- hold other rate keys start only at the claim: k is then at most half the burst
-- (the other half absorbs the claim's lateness)
-- (core::limits::Gcra::wake_at, the Rust twin). A paused key wakes it when the
-- pause ends (at the rate's instant if later). `limits_defined` is also set while
-- a pause is kept: its claims work as under a limit (store::Claimed).
-- ?1 to ?6 as in claim_selection.sql.
SELECT (SELECT count(*) FROM blocked) AS held,
       -- Each held item's wake (core::limits::claim_wake): none while one of its
       -- keys is at its concurrency after this claim (a slot frees only when an
       -- item in flight ends: the claimer's own commit wakes it, else it polls),
       -- else the latest instant its timed keys give (a rate's token, a pause's
       -- end), none when no key of it is timed (a concurrency alone). The
       -- claim's: the earliest item's.
       -- Each key's wake computed once (MATERIALIZED), not once per held item.
       (WITH k AS MATERIALIZED (
               SELECT g.key,
                           coalesce(g.concurrency
                                    - coalesce((SELECT f.n FROM in_flight AS f WHERE f.key = g.key), 0)
                                    - coalesce((SELECT t.n FROM taken AS t WHERE t.key = g.key), 0)
                                    <= 0, 0) AS full,
                           CASE WHEN g.rate IS NULL AND g.paused_until IS NULL THEN NULL
                                ELSE max(CASE WHEN g.rate IS NULL THEN 0 ELSE
                     (max(coalesce(s.tat, 0), CAST(?1 AS INTEGER) * g.rate)
                      + coalesce((SELECT t.n FROM taken AS t WHERE t.key = g.key), 0)
                        * g.per_seconds * 1000
                      - (g.burst - max(1, min(w.n, g.rate / g.per_seconds,
                                              CASE WHEN w.ahead THEN w.n ELSE g.burst / 2 END)))
                        * g.per_seconds * 1000
                      + g.rate - 1) / g.rate - CASE WHEN w.ahead THEN 1000 ELSE 0 END END,
                                         coalesce(g.paused_until, 0))
                           END AS wake
                    FROM governed AS g LEFT JOIN state AS s ON s.key = g.key
                    -- `ahead`: a held item may start at a slot (it holds no other rate key,
                    -- and the rate's slots stay whole: core::limits::Gcra::claims_ahead).
                    JOIN (SELECT h.key, count(*) AS n,
                                 sum(h.id NOT IN (SELECT id FROM multi)) > 0
                                 AND (x.burst - 1) * x.per_seconds * 1000 >= x.rate - 1 AS ahead
                          FROM held AS h JOIN governed AS x ON x.key = h.key
                          WHERE h.id IN (SELECT id FROM blocked) GROUP BY h.key) AS w
                      ON w.key = g.key)
        SELECT min(item_wake)
        FROM (SELECT h.id,
                     CASE WHEN max(k.full) THEN NULL ELSE max(k.wake) END AS item_wake
              FROM held AS h JOIN k ON k.key = h.key
              WHERE h.id IN (SELECT id FROM blocked)
              GROUP BY h.id))
         AS wake_at,
       (SELECT kept FROM force) AS limits_defined,
       (SELECT EXISTS (SELECT 1 FROM limits WHERE rate IS NOT NULL)
                  OR EXISTS (SELECT 1 FROM limit_state INDEXED BY limit_state_learned
                             WHERE refused_at > CAST(?1 AS INTEGER) - 3600000)) AS rates_defined;
