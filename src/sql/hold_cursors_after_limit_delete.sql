-- A limit about to be deleted may be holding items back: such an item can be
-- pending below one in flight, and once no limit is defined a commit moves its
-- batch's cursor past it (count_committed_outcomes.sql), so no claim would read it
-- again. An ended pause on the key (paused_until = now: it holds nothing back)
-- keeps every cursor careful, as any kept pause does, until the tick's reaper
-- clears it an hour later (clear_ended_pauses.sql), longer than any lease. Only
-- when the limit exists: a DELETE of no limit writes nothing.
-- ?1 key, ?2 now.
INSERT INTO limit_state (key, tat, basis, paused_until)
SELECT ?1, 0, '', ?2 WHERE EXISTS (SELECT 1 FROM limits WHERE key = ?1)
ON CONFLICT (key) DO UPDATE
SET paused_until = max(coalesce(limit_state.paused_until, 0), excluded.paused_until);
