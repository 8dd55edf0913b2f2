-- Lift a key's pause now (DELETE /limits/{key}/pause): a receiver's delay that
-- should not stand (a wrong Retry-After) ends at ?2. The row keeps an ended pause
-- (paused_until = now), as deleting a limit leaves one: items the pause held may
-- sit below claimed ones, so cursors stay careful until the reaper clears it
-- (clear_ended_pauses.sql). A learned rate stays. Nothing is written when the key
-- is not paused now (a 404).
-- ?1 key, ?2 now (ms).
UPDATE limit_state
SET paused_until = ?2
WHERE key = ?1 AND paused_until > ?2
RETURNING key;
