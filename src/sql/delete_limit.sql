-- Delete one limit (DELETE /limits/{key}), after its rate state
-- (delete_limit_state.sql, same batch()). Items keep their keys; a key no limit
-- governs holds nothing back. ?1 key.
DELETE FROM limits WHERE key = ?1 RETURNING key;
