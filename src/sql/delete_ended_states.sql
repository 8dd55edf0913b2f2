-- Forget keys no limit governs once their pause is past its margin (the rows
-- clear_ended_pauses.sql, which follows in the same batch(), would clear): their
-- row held only the pause and a learned rate that has lapsed too, so limit_state
-- keeps a row per key in use, not one per host ever refused. A key a limit
-- governs (its own, or a partitioned `prefix:*` one) keeps its row and its rate
-- state. Reads the pauses' partial index, their rows and, for those, the limits
-- that could govern them (a primary-key probe per colon of the key).
-- ?1 now (ms), ?2 kept (ms).
DELETE FROM limit_state INDEXED BY limit_state_paused
WHERE paused_until IS NOT NULL AND paused_until < ?1 - ?2
  AND (refused_at IS NULL OR refused_at < ?1 - 3600000 - ?2)
  AND NOT EXISTS (SELECT 1 FROM limits AS l WHERE l.key = limit_state.key)
  AND (WITH colon (at) AS (SELECT instr(limit_state.key, ':')
                       UNION ALL
                       SELECT at + instr(substr(limit_state.key, at + 1), ':') FROM colon
                       WHERE instr(substr(limit_state.key, at + 1), ':') > 0)
       SELECT p.key FROM colon JOIN limits AS p ON p.key = substr(limit_state.key, 1, colon.at) || '*'
       WHERE colon.at > 0 AND colon.at < length(limit_state.key)
       ORDER BY colon.at DESC
       LIMIT 1) IS NULL;
