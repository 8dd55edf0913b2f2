-- A page of limits in key order after ?1 (keyset pagination on the primary key), at
-- most ?2, each with its own rate state (a partitioned limit's members have theirs:
-- limit_usage.sql; `tat` as text, as in get_limit.sql).
SELECT l.key, l.rate, l.per_seconds, l.burst, l.concurrency, l.created_at, l.updated_at,
       CAST(s.tat AS TEXT) AS tat, s.basis, s.paused_until,
       s.learned, s.learned_at, s.refused_at, s.refusals, s.learned_before, s.learned_from
FROM limits AS l
LEFT JOIN limit_state AS s ON s.key = l.key
WHERE l.key > ?1
ORDER BY l.key
LIMIT ?2;
