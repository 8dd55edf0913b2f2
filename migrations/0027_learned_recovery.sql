-- Learned rates that recover (core::learn): the rate the last refusal cut, which
-- recovery compounds back to before probing above it, and where the rate came
-- from (GET /limits `learned_source`: 'retry_after', 'headers' or 'refusals').
-- Written only by learn_limit_keys.sql, in the row it writes anyway. ADD COLUMN
-- is O(1) in SQLite: no row is rewritten.

ALTER TABLE limit_state ADD COLUMN learned_before INTEGER;
ALTER TABLE limit_state ADD COLUMN learned_from TEXT;

-- Rates learned before this column recover to where they were, as a refusal
-- had just cut them.
UPDATE limit_state SET learned_before = learned, learned_from = 'refusals'
WHERE learned IS NOT NULL;
