-- Why each item read waits, after the keys' rules (waiting_selection.sql, then
-- key_rules.sql, whose rules are the claim's): each key's state and the first
-- reason that holds each item.
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
  SELECT w.id, w.run_after, w.last_error, h.key, h.class, h.concurrency, h.in_flight,
         h.learned, h.until,
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
