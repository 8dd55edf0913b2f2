-- What holds each pending item of one batch now (GET /batches/{id}/items'
-- `waiting_on`, GET /batches/{id}'s counts): read only, nothing written. Not a
-- statement of its own: waiting_on_items.sql and waiting_on_counts.sql start with
-- it (src/sql/mod.rs joins them), so the page and the counts apply one rule.
--
-- The rules are the claim's (claim_selection.sql): `force`, `governed` and
-- `in_flight` are its text, word for word (tests/waiting_on_conformance.rs
-- checks they stay so), so a key is governed by its own limit, else the longest
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
                (SELECT p.key FROM limits AS p
                 WHERE substr(p.key, -2) = ':*' AND length(p.key) <= length(k.key)
                   AND substr(k.key, 1, length(p.key) - 1) = substr(p.key, 1, length(p.key) - 1)
                 ORDER BY length(p.key) DESC
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
-- The rate state as the claim reads it outside a claim (claim_selection.sql's
-- `state` without its own claim's token).
state AS MATERIALIZED (
  SELECT g.key, CASE WHEN s.basis = g.basis THEN s.tat
                     WHEN s.basis LIKE '% learned' AND g.basis LIKE '% learned'
                     THEN s.tat / CAST(substr(s.basis, 1, instr(s.basis, '/') - 1) AS INTEGER)
                          * g.rate END AS tat
  FROM governed AS g LEFT JOIN limit_state AS s ON s.key = g.key
  WHERE g.rate IS NOT NULL
),
-- Per governed key: in flight, tokens now and within the look-ahead (the
-- claim's `room`), and the next token's instant (core::limits::Gcra::next_start).
key_wait AS MATERIALIZED (
  SELECT g.key, g.paused_until, g.concurrency, g.rate, g.basis LIKE '% learned' AS learned,
         coalesce((SELECT f.n FROM in_flight AS f WHERE f.key = g.key), 0) AS in_flight,
         (g.burst * g.per_seconds * 1000
          - max(0, coalesce(s.tat, 0) - CAST(?1 AS INTEGER) * g.rate))
           / (g.per_seconds * 1000) AS tokens,
         CASE WHEN (g.burst - 1) * g.per_seconds * 1000 >= g.rate - 1
              THEN (g.burst * g.per_seconds * 1000 + (CAST(?1 AS INTEGER) + 1000) * g.rate
                    - max(coalesce(s.tat, 0), CAST(?1 AS INTEGER) * g.rate))
                   / (g.per_seconds * 1000)
              ELSE (g.burst * g.per_seconds * 1000
                    - max(0, coalesce(s.tat, 0) - CAST(?1 AS INTEGER) * g.rate))
                   / (g.per_seconds * 1000) END AS tokens_ahead,
         (max(coalesce(s.tat, 0), CAST(?1 AS INTEGER) * g.rate)
          - (g.burst - 1) * g.per_seconds * 1000 + g.rate - 1) / g.rate AS next_token_at
  FROM governed AS g LEFT JOIN state AS s ON s.key = g.key
),
-- Items holding two rate keys or more start only at the claim (no look-ahead).
multi AS MATERIALIZED (
  SELECT h.id FROM held AS h JOIN key_wait AS k ON k.key = h.key AND k.rate IS NOT NULL
  GROUP BY h.id HAVING count(*) > 1
),
-- Each item's holding keys by class (1 paused, 2 concurrency, 3 rate), the
-- first class first, then the latest instant.
holds AS MATERIALIZED (
  SELECT *, row_number() OVER (PARTITION BY id ORDER BY class, until DESC, key) AS n
  FROM (SELECT h.id, h.key, k.concurrency, k.in_flight, k.learned,
               CASE WHEN k.paused_until IS NOT NULL THEN 1
                    WHEN k.in_flight >= k.concurrency THEN 2
                    WHEN k.rate IS NOT NULL
                         AND CASE WHEN h.id IN (SELECT id FROM multi) THEN k.tokens
                                  ELSE k.tokens_ahead END <= 0 THEN 3 END AS class,
               CASE WHEN k.paused_until IS NOT NULL THEN k.paused_until
                    WHEN k.in_flight >= k.concurrency THEN NULL
                    ELSE k.next_token_at END AS until
        FROM held AS h JOIN key_wait AS k ON k.key = h.key)
  WHERE class IS NOT NULL
),
-- Due items of running batches of a higher priority, at most a claim's worth:
-- read only when some item is due but for its turn.
ahead AS MATERIALIZED (
  SELECT count(*) AS items, count(DISTINCT batch_id) AS batches, max(priority) AS priority
  FROM (
    SELECT o.id AS batch_id, o.priority
    FROM batch AS this CROSS JOIN batches AS o INDEXED BY batches_running
    CROSS JOIN cron_queue AS d INDEXED BY cron_queue_due ON d.batch_id = o.id
    WHERE this.status = 'running' AND o.status = 'running' AND o.priority > this.priority
      AND d.status = 'pending' AND d.kind <> 'callback'
      AND d.run_after > 0 AND d.run_after <= ?1 AND d.attempt < d.max_attempts
    UNION ALL
    SELECT o.id, o.priority
    FROM batch AS this CROSS JOIN batches AS o INDEXED BY batches_running
    CROSS JOIN cron_queue AS q NOT INDEXED ON q.id > o.claim_after AND q.id <= o.cursor_end
    WHERE this.status = 'running' AND o.status = 'running' AND o.priority > this.priority
      AND q.batch_id = o.id AND q.status = 'pending' AND q.run_after = 0
      AND q.attempt < q.max_attempts
    LIMIT ?5
  )
),
reasons AS (
  SELECT w.id, w.run_after, w.last_error, h.key, h.concurrency, h.in_flight, h.learned,
         h.until,
         CASE WHEN this.status = 'paused' THEN 'batch_paused'
              WHEN w.run_after > CAST(?1 AS INTEGER) THEN 'backoff'
              WHEN h.class = 1 THEN 'paused'
              WHEN h.class = 2 THEN 'concurrency'
              WHEN h.class = 3 THEN 'rate'
              WHEN (SELECT items FROM ahead) >= ?5 THEN 'turn'
              ELSE 'due' END AS reason
  FROM waiting AS w CROSS JOIN batch AS this
  LEFT JOIN holds AS h ON h.id = w.id AND h.n = 1
)
