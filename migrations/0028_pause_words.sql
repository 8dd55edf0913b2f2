-- A pause keeps the receiver's word that set it (its refused item's error, e.g.
-- "HTTP 429, retry after 30 s"), so what says why an item waits on the pause
-- (waiting_keys.sql: `paused` with its `word`) names it for every batch's items,
-- not only the refused item's own. Written only by pause_limit_keys.sql, in the
-- row it writes anyway. ADD COLUMN is O(1) in SQLite: no row is rewritten.

ALTER TABLE limit_state ADD COLUMN paused_word TEXT;
