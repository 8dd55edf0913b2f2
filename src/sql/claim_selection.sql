-- The claim's selection: which due items a claim takes, in which order, and what
-- each limit key lets through. Not a statement of its own, and in three files:
-- this one (the candidates and their order, up to `held`), key_rules.sql (each
-- key's limit, pause, learned rate and items in flight, which waiting_keys.sql
-- reads too) and claim_room.sql (room, held, taken, passed).
-- charge_rate_limits.sql and claim_due_items.sql both start with them (src/sql/mod.rs joins them), so the
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
-- (`<per minute>/60 learned`): from one learned rate to the next (a step, a
-- halving) and to or from a set rate, the state carries over (its instant, in
-- the new rate's units, at most a second and a full bucket ahead); only a
-- changed set limit starts from a full burst.
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
