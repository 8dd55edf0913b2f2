-- What holds pending items, per key: the state of each governed key asked about
-- (after waiting_held_keys.sql, key_rules.sql and key_state.sql, whose rules and
-- state are the claim's), with the batch's status and the due items of higher
-- priorities ahead of it.
-- One row per governed key, each carrying the batch's columns (one row with no
-- key when none is governed); no row for an unknown batch. Which reason holds an
-- item, from its run_after and its keys' rows, is core::flow::waiting's: the
-- items are the caller's (a listed page, or waiting_head.sql), never read here,
-- so a page costs its keys' rows, not its items'. Read only.
-- ?1 to ?4 as in waiting_held_keys.sql.
-- Per governed key: in flight, tokens now and within the look-ahead (the
-- claim's `room`), and the next token's instant (core::limits::Gcra::next_start).
key_wait AS MATERIALIZED (
  SELECT g.key, g.paused_until, g.concurrency, g.rate, g.basis LIKE '% learned' AS learned,
         -- A pause's word (migration 0028): read for a paused key only.
         CASE WHEN g.paused_until IS NOT NULL
              THEN (SELECT w.paused_word FROM limit_state AS w WHERE w.key = g.key) END AS word,
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
batch AS MATERIALIZED (
  SELECT id, status, priority FROM batches WHERE id = ?2
),
-- Due items of running batches of a higher priority, at most a claim's worth
-- (an item nothing else holds waits its turn behind as many): a seek on the
-- running batches, and nothing more unless one of a higher priority runs.
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
    LIMIT ?4
  )
)
SELECT this.status, a.items AS ahead_items, a.batches AS ahead_batches,
       a.priority AS ahead_priority, k.key, k.paused_until, k.concurrency, k.in_flight,
       k.rate, k.learned, k.tokens, k.tokens_ahead, k.next_token_at, k.word
FROM batch AS this CROSS JOIN ahead AS a
LEFT JOIN key_wait AS k ON 1
ORDER BY k.key;
