-- The enabled schedules due at ?1 (next_fire_at <= now), oldest first, at most ?2
-- per tick; the rest are due on the next tick. INDEXED BY pins the partial index of
-- enabled schedules, so the read is the rows returned however many are idle or
-- disabled.
SELECT id, cron, every_seconds, at, timezone, group_name, jitter_seconds, enabled,
       next_fire_at, last_fired_at, last_batch_id, revision, created_at, updated_at, on_finish
FROM schedules INDEXED BY schedules_due
WHERE enabled = 1 AND next_fire_at <= ?1
ORDER BY next_fire_at, id
LIMIT ?2;
