-- Forget pauses that ended more than an hour ago (core::limits::PAUSE_KEPT_MS),
-- run with the tick's reaper. While any pause is kept a claim may have held an
-- item back below one it claimed, so the claim cursor and the lease windows work
-- as while limits are defined (migration 0021); after an hour no lease that
-- started under the pause is still running, so no commit can move a cursor past
-- an item the pause held. A learned rate holds items back too, until an hour
-- after its key's last refusal (core::learn::IDLE_MS): the ended pause a refusal
-- leaves is kept the same margin past that lapse, so no lease taken under the
-- learned rate outlives the careful cursor. Reads the pauses' partial index and
-- their rows; writes only the rows it clears.
-- ?1 now (ms), ?2 kept (ms).
UPDATE limit_state INDEXED BY limit_state_paused
SET paused_until = NULL
WHERE paused_until IS NOT NULL AND paused_until < ?1 - ?2
  AND (refused_at IS NULL OR refused_at < ?1 - 3600000 - ?2);
