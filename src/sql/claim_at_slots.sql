-- A claim's start when the rates are charged (charge_rate_limits.sql ran first;
-- claim_due_items.sql follows): each item's start (`started_at`, returned as
-- `start_at`) is now, or for an item a rate let through ahead its slot: the j-th
-- start of a key in this claim (by `ord`) may go once the state before the
-- charge, max(tat, now × rate), plus j − 1 costs has room for one,
-- ⌈(max(tat, now × rate) + (j − burst) × cost) / rate⌉ (core::limits::Gcra::start_of,
-- the Rust twin); the drain dispatches it then.
, starts AS MATERIALIZED (
  SELECT h.id,
         max((max(coalesce(s.tat, 0), CAST(?1 AS INTEGER) * g.rate)
              + (h.j - g.burst) * g.per_seconds * 1000 + g.rate - 1) / g.rate) AS at
  FROM (SELECT id, key, row_number() OVER (PARTITION BY key ORDER BY ord) AS j
        FROM held WHERE id IN (SELECT id FROM next)) AS h
  JOIN governed AS g ON g.key = h.key AND g.rate IS NOT NULL
  LEFT JOIN state AS s ON s.key = g.key
  GROUP BY h.id
)
UPDATE cron_queue
SET started_at = CASE WHEN act.claims
                      THEN max(CAST(?1 AS INTEGER),
                               coalesce((SELECT t.at FROM starts AS t WHERE t.id = cron_queue.id), 0))
                      ELSE cron_queue.started_at END,
