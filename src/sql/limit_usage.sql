-- What the defined limits are using, per key items hold (GET /limits, GET
-- /limits/{key}, GET /metrics; core::limit_view turns it into each limit's live
-- state): for each key held by an item in flight or by one of the first ?2 due
-- items, the limit that governs it — its own, else the longest partitioned one
-- (`prefix:*`) matching it, the claim's rule (claim_selection.sql,
-- core::limits::governing) —, its items in flight, its due items among those ?2,
-- and its rate state (a partitioned limit's members each have their own; tat as
-- text, as in get_limit.sql). Keys no
-- limit governs are left out. A last row with a NULL key counts the due items read:
-- ?2 means the count stopped there and more may be due.
-- In flight as the claim counts it: items in flight with a real run_after (the
-- leased index), and the first attempts in flight of unfinished batches, paused
-- and cancelled ones included (their lease windows: a paused batch's items in
-- flight hold their slots until they end). Due as /metrics counts it
-- (metrics_snapshot.sql): running batches' entries of the due index, then their
-- cursor items, at most ?2 rows in all, each read for its keys.
-- `batches`: per key, the distinct batches of those items in flight and due (a
-- JSON array; GET /limits links each key to them), from the same rows.
-- Reads nothing of the queue while no limit is defined: each read is driven from
-- `defined` (CROSS JOIN keeps it the outer loop), no row when there is none.
-- Otherwise every item in flight, at most ?2 due items, and per distinct key its
-- limit and its state by primary key and the partitioned limits.
-- ?1 now (ms), ?2 cap of the due items read.
WITH defined AS (SELECT 1 FROM limits LIMIT 1),
flying AS MATERIALIZED (
  SELECT q.batch_id, q.limits
  FROM defined CROSS JOIN cron_queue AS q INDEXED BY cron_queue_leased
  WHERE q.status = 'processing' AND q.run_after > 0 AND q.limits IS NOT NULL
  UNION ALL
  SELECT f.batch_id, f.limits
  FROM defined CROSS JOIN batches AS b INDEXED BY batches_status
  JOIN first_attempts_in_flight AS f ON f.batch_id = b.id
  WHERE b.status IN ('running', 'paused', 'cancelled') AND b.finished_at IS NULL
    AND f.limits IS NOT NULL
),
in_flight AS (
  SELECT k.value AS key, count(*) AS n
  FROM flying AS r, json_each(r.limits) AS k
  GROUP BY k.value
),
due AS MATERIALIZED (
  SELECT q.batch_id, q.limits
  FROM defined CROSS JOIN batches AS b INDEXED BY batches_running
  JOIN cron_queue AS q INDEXED BY cron_queue_due ON q.batch_id = b.id
  WHERE b.status = 'running' AND q.status = 'pending' AND q.kind <> 'callback'
    AND q.run_after > 0 AND q.run_after <= ?1
  UNION ALL
  SELECT q.batch_id, q.limits
  FROM defined CROSS JOIN batches AS b INDEXED BY batches_running
  JOIN cron_queue AS q NOT INDEXED ON q.id > b.claim_after AND q.id <= b.cursor_end
  WHERE b.status = 'running' AND q.batch_id = b.id AND q.status = 'pending'
    AND q.run_after = 0
  LIMIT ?2
),
waiting AS (
  SELECT k.value AS key, count(*) AS n
  FROM due AS d, json_each(d.limits) AS k
  WHERE d.limits IS NOT NULL
  GROUP BY k.value
),
holding AS (
  SELECT k.value AS key, json_group_array(DISTINCT r.batch_id) AS batches
  FROM (SELECT batch_id, limits FROM flying UNION ALL SELECT batch_id, limits FROM due) AS r,
       json_each(r.limits) AS k
  WHERE r.limits IS NOT NULL
  GROUP BY k.value
),
held AS (SELECT key FROM in_flight UNION SELECT key FROM waiting),
-- Each key's limit: its own, else the longest partition (`prefix:*`), probed by
-- primary key once per colon of the key (never a read of every limit).
governed AS MATERIALIZED (
  SELECT h.key, coalesce(
    (SELECT o.key FROM limits AS o WHERE o.key = h.key),
    (WITH colon (at) AS (SELECT instr(h.key, ':')
                     UNION ALL
                     SELECT at + instr(substr(h.key, at + 1), ':') FROM colon
                     WHERE instr(substr(h.key, at + 1), ':') > 0)
     SELECT p.key FROM colon JOIN limits AS p ON p.key = substr(h.key, 1, colon.at) || '*'
     WHERE colon.at > 0 AND colon.at < length(h.key)
     ORDER BY colon.at DESC
     LIMIT 1)) AS limit_key
  FROM held AS h
)
SELECT g.key, g.limit_key, coalesce(f.n, 0) AS in_flight, coalesce(w.n, 0) AS waiting,
       CAST(s.tat AS TEXT) AS tat, s.basis, o.batches
FROM governed AS g
LEFT JOIN in_flight AS f ON f.key = g.key
LEFT JOIN waiting AS w ON w.key = g.key
LEFT JOIN holding AS o ON o.key = g.key
LEFT JOIN limit_state AS s ON s.key = g.key
WHERE g.limit_key IS NOT NULL
UNION ALL
SELECT NULL, NULL, 0, count(*), NULL, NULL, NULL FROM due;
