-- The keys with a learned rate in force (their receiver refused within the hour:
-- learn_limit_keys.sql, core::learn::IDLE_MS), with or without a limit, the
-- latest refusal first, at most ?2; only key ?3 when it is not NULL (GET
-- /limits/{key} for a key without a limit of its own). GET /limits `learned`;
-- core::limit_view::LearnedKey computes the rate in force at now. Reads the
-- learned keys' partial index only.
-- ?1 now (ms), ?2 at most, ?3 key or NULL.
SELECT key, learned, learned_at, refused_at, refusals, learned_before, learned_from, paused_until
FROM limit_state INDEXED BY limit_state_learned
WHERE refused_at IS NOT NULL AND refused_at > ?1 - 3600000 AND (?3 IS NULL OR key = ?3)
ORDER BY refused_at DESC
LIMIT ?2;
