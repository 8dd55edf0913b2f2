-- The rate state of a limit being deleted (DELETE /limits/{key}; delete_limit.sql
-- follows in the same batch()): its own row and, for a partitioned limit
-- (`prefix:*`), its members' rows — the keys it governs, not those with a limit of
-- their own or under a longer partitioned one, which keep theirs. A limit put again
-- later starts from a full burst. Nothing when the key has no limit (a 404 writes
-- nothing). Members are a range of the primary key: every key after `prefix:` and
-- before `prefix;` (';' follows ':').
-- A paused key's row stays (its pause outlives the limit; clear_ended_pauses.sql
-- forgets it).
-- ?1 key.
DELETE FROM limit_state
WHERE EXISTS (SELECT 1 FROM limits WHERE key = ?1)
  AND paused_until IS NULL
  AND (key = ?1
       OR (substr(?1, -2) = ':*'
           AND key > substr(?1, 1, length(?1) - 1)
           AND key < substr(?1, 1, length(?1) - 2) || ';'
           AND NOT EXISTS (SELECT 1 FROM limits AS o WHERE o.key = limit_state.key)
           AND NOT EXISTS (SELECT 1 FROM limits AS p
                           WHERE substr(p.key, -2) = ':*' AND length(p.key) > length(?1)
                             AND length(p.key) <= length(limit_state.key)
                             AND substr(limit_state.key, 1, length(p.key) - 1)
                                 = substr(p.key, 1, length(p.key) - 1))));
