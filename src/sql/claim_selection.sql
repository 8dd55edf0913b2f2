-- The claim's selection: which due items a claim takes, in which order, and what
-- each limit key lets through. Not a statement of its own: charge_rate_limits.sql
-- and claim_due_items.sql both start with it (src/sql/mod.rs joins them), so the
-- charge and the claim, run in that order in one batch() (one transaction), select
-- the very same items: the same text over the same rows, with the rate state the
-- charge wrote read back as it was before it (limit_state.claim = ?3 →
-- tat_before). Exact across any number of claimers: D1 runs one writer at a time.
--
-- Candidates (what may be claimed is defined here, in one place):
-- - `claimable`: the running batches (their partial index). Paused and cancelled
--   batches are not in it, so their items are never read.
-- - `cursor`: each claimable batch's first attempts due at once (run_after = 0,
--   migration 0014), in no index: read by primary key from the batch's cursor
--   (claim_after, cursor_end], up to the batch's ?5-th such item (a scalar seek
--   and walk, no ephemeral list), skipping what is in flight or ended. A claimer
--   that names the largest id it claimed in a batch (?4) starts there when that is
--   higher: every cursor item below it was claimed (store::Claimed; the store sends
--   none while limits are defined, since a held item below it is still pending).
--   They count as due since their batch's fire instant (`fill`'s fire_at), or its
--   creation for explicit items.
-- - `due`: items with a real run_after (retries, reaps, replays, deferred first
--   attempts): each claimable batch is sought in the due index (batch, run_after;
--   callback rows are not in it), at most ?5 entries.
-- - `callbacks`: due completion callbacks of batches that have ended (finished_at
--   set), whatever their status; a callback of an earlier end whose batch a replay
--   reopened is held (trigger batches_enqueue_callback replaces it at the next
--   end). At most ?5 entries of their own partial index (a window, as a batch's
--   candidates: callbacks a limit holds do not hide the others'), those holding
--   a paused key skipped as they are read.
-- Order: `priority DESC`, then turns (each batch's k-th candidate by (run_after,
-- id) before any batch's (k+1)-th), then (run_after, id). So a small batch starts
-- at the next claim whatever a big one has waiting, and a higher priority goes
-- first.
-- Limits (core::limits has the same rules in Rust): each key a candidate holds is
-- governed by its own limit, else the longest partitioned limit (`prefix:*`)
-- that matches it, else by none (it holds nothing back). The partitions are
-- found by one primary-key probe per colon of the key (`tenant:*` for
-- `tenant:acme`): a claim reads the limits that match, never all of them. A governed key has room
-- for min(concurrency − its items in flight, the rate's tokens) more; its
-- candidates, in claim order, are taken while they fit, and a candidate is taken
-- only if every governed key it holds has room for it. A candidate holding a key
-- with no room at all is set aside first; among the rest, one held by a key
-- still counts against the others' room (a claim may take fewer than it could,
-- never more). Items in flight are counted from the items themselves (the
-- leased index and the lease windows of unfinished batches, paused ones
-- included): a commit, a release or the reaper gives a slot back by moving the
-- item, with no write of its own. Tokens are GCRA in integer units of ms × rate
-- (core::limits::Gcra): room = (burst × cost − max(0, tat − now × rate)) / cost,
-- cost = per_seconds × 1000; a state counted under another rate or window
-- (`basis`) is a full burst. With ?6 = 0 (no charge statement before this one),
-- every rate-limited key has no room.
-- Claim ahead: a rate lets through the starts whose slot comes within a second
-- (core::limits::LOOK_AHEAD_MS), `ahead` = (burst × cost + (now + 1 s) × rate −
-- max(tat, now × rate)) / cost, and each such item starts at its slot
-- (claim_due_items.sql), so a held claimer claims about once a second per key,
-- not once per token. A candidate holding two rate keys or more (`multi`) is
-- taken only within `room`, at once: a start put off by one key past its slot in
-- another would bunch with that key's later slots. A rate whose slots, rounded
-- up to the ms, could land past the next token's (a burst of 1 not dividing the
-- ms) is not claimed ahead: its starts then stay exact GCRA arrivals.
-- A paused key (limit_state.paused_until after ?1: its receiver asked to slow
-- down, pause_limit_keys.sql) has no room, with a limit or without.
-- A learned rate (limit_state.learned, learn_limit_keys.sql) is in force for an
-- hour after its key's last refusal, raised one step per 5 s window since it was
-- learned (core::learn::at, its Rust twin): the key's rate is min(its set rate,
-- the learned one), a key without a set rate has the learned one, a burst of a
-- second of it (core::learn::burst). It is counted in its own basis
-- (`<per minute>/60 learned`): a change to or from a set rate starts from a full
-- burst, as a changed limit does; from one learned rate to the next (a step, a
-- halving) the state carries over (its instant, in the new rate's units).
-- Keys are read at all only while a limit or a pause is kept (`force`): an item's implicit
-- key (host:, service:) costs a claim nothing else.
-- A held candidate stays pending: no write, no attempt. Head of line: a batch's
-- items wait behind at most ?5 − 1 held items of their own batch.
-- `taken`: what the claim takes of each key (the charge's and the hold's count).
-- ?1 now, ?2 limit, ?3 token prefix (unique per claim), ?4 JSON object batch id →
-- largest id this claimer claimed there (may be empty), ?5 candidates per batch
-- (>= ?2), ?6 1 when charge_rate_limits.sql runs before in the same batch().
-- D1 binds ?1 as a REAL (a JavaScript number): ms × rate is computed from
-- CAST(?1 AS INTEGER) so that it stays an exact INTEGER (beyond 2^53).
WITH claimable AS (
  SELECT id, coalesce(fill ->> 'fire_at', created_at) AS due_at, claim_after, cursor_end,
         priority
  FROM batches INDEXED BY batches_running WHERE status = 'running'
),
force AS MATERIALIZED (
  SELECT EXISTS (SELECT 1 FROM limits)
         OR EXISTS (SELECT 1 FROM limit_state WHERE paused_until IS NOT NULL) AS kept
),
-- Candidates per batch: ?5, at most 128 (core::limits::HELD_WINDOW) while
-- limits or pauses are kept, as claims then ask: so a count of the drain's work
-- (count_drain_work.sql, ?5 its whole cap) sees what claims will see, not items
-- deep in a batch behind ones held at its head.
per_batch AS MATERIALIZED (
  SELECT CASE WHEN kept THEN min(?5, 128) ELSE ?5 END AS n FROM force
),
callbacks AS (
  SELECT c.id, c.batch_id, c.run_after, c.limits,
         (SELECT b.priority FROM batches AS b WHERE b.id = c.batch_id) AS priority,
         0 AS at_cursor
  FROM cron_queue AS c INDEXED BY cron_queue_callbacks
  WHERE c.status = 'pending' AND c.kind = 'callback' AND c.run_after <= ?1
    AND c.attempt < c.max_attempts
    AND (SELECT b.finished_at FROM batches AS b WHERE b.id = c.batch_id) IS NOT NULL
    -- A callback whose receiver paused its host has no room: skipped here, so
    -- callbacks to one paused host never fill the window other batches' need.
    AND NOT EXISTS (SELECT 1 FROM json_each(c.limits) AS k
                    JOIN limit_state AS s ON s.key = k.value
                    WHERE s.paused_until > CAST(?1 AS INTEGER))
  ORDER BY c.run_after, c.id
  LIMIT (SELECT n FROM per_batch)
),
cursor AS (
  SELECT q.id, b.id AS batch_id, b.due_at AS run_after, q.limits, b.priority, 1 AS at_cursor
  FROM (SELECT id, due_at, cursor_end, priority,
               max(claim_after, coalesce(json_extract(?4, '$."' || id || '"'), 0)) AS after
        FROM claimable) AS b
  -- CROSS JOIN keeps the batches outside: each reads its own id range, never the queue.
  CROSS JOIN cron_queue AS q NOT INDEXED
    ON q.id > b.after
   AND q.id <= coalesce((SELECT c.id FROM cron_queue AS c NOT INDEXED
                         WHERE c.id > b.after AND c.id <= b.cursor_end
                           AND c.batch_id = b.id AND c.status = 'pending' AND c.run_after = 0
                           AND c.attempt < c.max_attempts
                         ORDER BY c.id
                         LIMIT 1 OFFSET (SELECT n FROM per_batch) - 1),
                        b.cursor_end)
  WHERE q.batch_id = b.id AND q.status = 'pending' AND q.run_after = 0
    AND q.attempt < q.max_attempts
),
due AS (
  SELECT q.id, q.batch_id, q.run_after, q.limits, b.priority, 0 AS at_cursor
  FROM claimable AS b, cron_queue AS q
  WHERE q.id IN (
    SELECT d.id FROM cron_queue AS d INDEXED BY cron_queue_due
    WHERE d.batch_id = b.id AND d.status = 'pending' AND d.kind <> 'callback'
      AND d.run_after > 0 AND d.run_after <= ?1 AND d.attempt < d.max_attempts
    ORDER BY d.run_after, d.id
    LIMIT (SELECT n FROM per_batch)
  )
),
ordered AS MATERIALIZED (
  SELECT id, limits, batch_id, run_after, at_cursor,
         row_number() OVER (ORDER BY priority DESC, turn, run_after, id) AS ord
  FROM (SELECT u.*, row_number() OVER (PARTITION BY batch_id ORDER BY run_after, id) AS turn
        FROM (SELECT * FROM due UNION ALL SELECT * FROM cursor UNION ALL SELECT * FROM callbacks)
             AS u)
),
held AS MATERIALIZED (
  SELECT o.id, o.ord, k.value AS key
  FROM ordered AS o, json_each(o.limits) AS k
  WHERE o.limits IS NOT NULL AND (SELECT kept FROM force)
),
governed AS MATERIALIZED (
  SELECT key, concurrency, paused_until,
         CASE WHEN by_learned THEN learned ELSE rate END AS rate,
         CASE WHEN by_learned THEN 60 ELSE per_seconds END AS per_seconds,
         CASE WHEN by_learned THEN max(1, learned / 60) ELSE burst END AS burst,
         CASE WHEN by_learned THEN learned || '/60 learned' ELSE rate || '/' || per_seconds END
           AS basis
  FROM (SELECT *, learned IS NOT NULL AND (rate IS NULL OR learned * per_seconds < rate * 60)
                    AS by_learned
        FROM (SELECT k.key, l.key AS limit_key, l.rate, l.per_seconds, l.burst, l.concurrency,
                     (SELECT s.paused_until FROM limit_state AS s
                      WHERE s.key = k.key AND s.paused_until > CAST(?1 AS INTEGER))
                       AS paused_until,
                     -- max(0, …): a claimer's clock behind the writer's never
                     -- lowers the rate below what was learned (core::learn::at).
                     (SELECT s.learned + max(0, CAST(?1 AS INTEGER) - s.learned_at) / 5000
                                         * max(1, min(60, s.learned / 4))
                      FROM limit_state AS s
                      WHERE s.key = k.key AND s.learned IS NOT NULL
                        AND s.refused_at > CAST(?1 AS INTEGER) - 3600000) AS learned
              FROM (SELECT DISTINCT key FROM held) AS k
              LEFT JOIN limits AS l ON l.key = coalesce(
                (SELECT o.key FROM limits AS o WHERE o.key = k.key),
                (WITH colon (at) AS (SELECT instr(k.key, ':')
                                 UNION ALL
                                 SELECT at + instr(substr(k.key, at + 1), ':') FROM colon
                                 WHERE instr(substr(k.key, at + 1), ':') > 0)
                 SELECT p.key FROM colon JOIN limits AS p ON p.key = substr(k.key, 1, colon.at) || '*'
                 WHERE colon.at > 0 AND colon.at < length(k.key)
                 ORDER BY colon.at DESC
                 LIMIT 1))))
  WHERE limit_key IS NOT NULL OR paused_until IS NOT NULL OR learned IS NOT NULL
),
in_flight AS MATERIALIZED (
  SELECT k.value AS key, count(*) AS n
  FROM (SELECT l.limits FROM cron_queue AS l INDEXED BY cron_queue_leased
        WHERE EXISTS (SELECT 1 FROM governed WHERE concurrency IS NOT NULL)
          AND l.status = 'processing' AND l.run_after > 0 AND l.limits IS NOT NULL
        UNION ALL
        SELECT f.limits FROM batches AS b INDEXED BY batches_status
        JOIN first_attempts_in_flight AS f ON f.batch_id = b.id
        WHERE EXISTS (SELECT 1 FROM governed WHERE concurrency IS NOT NULL)
          AND b.status IN ('running', 'paused', 'cancelled') AND b.finished_at IS NULL
          AND f.limits IS NOT NULL) AS w,
       json_each(w.limits) AS k
  WHERE k.value IN (SELECT key FROM governed WHERE concurrency IS NOT NULL)
  GROUP BY k.value
),
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
