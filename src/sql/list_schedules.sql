-- A page of schedules in id order after ?1 (keyset pagination on the primary key),
-- at most ?2.
SELECT id, cron, every_seconds, at, timezone, group_name, jitter_seconds, enabled,
       next_fire_at, last_fired_at, last_batch_id, revision, created_at, updated_at, on_finish,
       fire_failures, retry_at, priority
FROM schedules
WHERE id > ?1
ORDER BY id
LIMIT ?2;
