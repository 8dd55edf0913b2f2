-- The keys paused now (a receiver asked them to slow down: pause_limit_keys.sql),
-- with or without a limit, the longest pause first, at most ?2: GET /limits
-- `paused`. Reads the pauses' partial index only.
-- ?1 now (ms), ?2 at most.
SELECT key, paused_until
FROM limit_state INDEXED BY limit_state_paused
WHERE paused_until IS NOT NULL AND paused_until > ?1
ORDER BY paused_until DESC
LIMIT ?2;
