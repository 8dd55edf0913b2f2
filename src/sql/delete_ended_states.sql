-- Forget keys no limit governs once their pause is past its margin (the rows
-- clear_ended_pauses.sql, which follows in the same batch(), would clear): their
-- row held only the pause and a learned rate that has lapsed too, so limit_state
-- keeps a row per key in use, not one per host ever refused. A key a limit
-- governs (its own, or a partitioned `prefix:*` one) keeps its row and its rate
-- state. Reads the pauses' partial index, their rows and, for those, the limits.
-- ?1 now (ms), ?2 kept (ms).
DELETE FROM limit_state INDEXED BY limit_state_paused
WHERE paused_until IS NOT NULL AND paused_until < ?1 - ?2
  AND (refused_at IS NULL OR refused_at < ?1 - 3600000 - ?2)
  AND NOT EXISTS (SELECT 1 FROM limits AS l
                  WHERE l.key = limit_state.key
                     OR (substr(l.key, -2) = ':*' AND length(l.key) <= length(limit_state.key)
                         AND substr(limit_state.key, 1, length(l.key) - 1)
                             = substr(l.key, 1, length(l.key) - 1)));
