-- One limit by key, with its own rate state (a partitioned limit's members have
-- theirs: limit_usage.sql). `tat` as text: ms × rate passes 2^53 once the rate
-- does ~5,000, past what D1's JavaScript numbers hold exactly. `paused_until`:
-- the key's pause (pause_limit_keys.sql), if any. ?1 key.
SELECT l.key, l.rate, l.per_seconds, l.burst, l.concurrency, l.created_at, l.updated_at,
       CAST(s.tat AS TEXT) AS tat, s.basis, s.paused_until,
       s.learned, s.learned_at, s.refused_at, s.refusals, s.learned_before, s.learned_from
FROM limits AS l
LEFT JOIN limit_state AS s ON s.key = l.key
WHERE l.key = ?1;
