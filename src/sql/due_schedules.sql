-- The enabled schedules due at ?1, oldest first, at most ?2 per tick; the rest are
-- due on the next tick. Due: next_fire_at <= now, or, while a schedule backs off
-- after failed fires, retry_at <= now (migration 0009). INDEXED BY pins the
-- partial expression index of enabled schedules, so the read is the rows returned
-- however many are idle, backing off or disabled.
SELECT id, cron, every_seconds, at, timezone, group_name, jitter_seconds, enabled,
       next_fire_at, last_fired_at, last_batch_id, revision, created_at, updated_at, on_finish,
       fire_failures, retry_at
FROM schedules INDEXED BY schedules_due
WHERE enabled = 1 AND coalesce(retry_at, next_fire_at) <= ?1
ORDER BY coalesce(retry_at, next_fire_at), id
LIMIT ?2;
