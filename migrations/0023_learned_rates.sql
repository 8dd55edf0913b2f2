-- Learned rates: a key whose receiver refuses (a 429, a retry the answer delayed)
-- gets a rate of its own, learned from the refusals (core::learn, the rule).
--
--   learned state    limit_state per key, beside its tokens: `learned` starts per
--                    minute, `learned_at` when it last changed, `refused_at` the
--                    last refusal, `refusals` those since the state was learned.
--                    Written only by a commit that carries a refusal, once per
--                    commit per key (sql/learn_limit_keys.sql); the additive
--                    increase and the idle hour are computed from these at each
--                    read (claim_selection.sql), so no window writes anything.
--   in force         the claim's rate for the key is min(its set rate, the learned
--                    one); a key without a set rate has the learned one alone.
--   the careful claim a refusal also leaves an ended pause (paused_until = now at
--                    the least) so the cursor and the lease windows stay careful
--                    while the learned rate can hold items back (migration 0021):
--                    the reaper clears it an hour after, when the learned rate
--                    has lapsed.
-- ADD COLUMN is O(1) in SQLite: no row is rewritten.

ALTER TABLE limit_state ADD COLUMN learned INTEGER;
ALTER TABLE limit_state ADD COLUMN learned_at INTEGER;
ALTER TABLE limit_state ADD COLUMN refused_at INTEGER;
ALTER TABLE limit_state ADD COLUMN refusals INTEGER;

-- Learned keys: whether any is in force (the claim asks) and GET /limits' list
-- read this index only.
CREATE INDEX limit_state_learned ON limit_state (refused_at) WHERE refused_at IS NOT NULL;
