-- Create or replace one schedule (PUT /schedules/{id}), validated beforehand
-- (core::schedule::body). A replace bumps `revision`, so a fire planned from the old
-- row applies nothing, and keeps created_at, last_fired_at and last_batch_id. A
-- replace without on_finish removes it (batches already fired keep theirs). A
-- replace clears a backoff (fire_failures, retry_at): the operator's fix is tried
-- at its own next_fire_at.
-- ?1 id, ?2 cron, ?3 every_seconds, ?4 at (exactly one of ?2-?4 non-NULL),
-- ?5 timezone, ?6 group_name (NULL: all subjects), ?7 jitter_seconds, ?8 enabled
-- (0/1), ?9 next_fire_at (NULL when disabled), ?10 now, ?11 on_finish as stored
-- ({"url": …}, core::callback) or NULL, ?12 the priority of the batches it fires
-- (-10 to 10; batches already fired keep theirs).
INSERT INTO schedules (id, cron, every_seconds, at, timezone, group_name, jitter_seconds,
                       enabled, next_fire_at, revision, created_at, updated_at, on_finish,
                       priority)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1, ?10, ?10, ?11, ?12)
ON CONFLICT (id) DO UPDATE
SET cron = excluded.cron,
    every_seconds = excluded.every_seconds,
    at = excluded.at,
    timezone = excluded.timezone,
    group_name = excluded.group_name,
    jitter_seconds = excluded.jitter_seconds,
    enabled = excluded.enabled,
    next_fire_at = excluded.next_fire_at,
    on_finish = excluded.on_finish,
    priority = excluded.priority,
    revision = schedules.revision + 1,
    fire_failures = 0,
    retry_at = NULL,
    updated_at = excluded.updated_at
RETURNING id, cron, every_seconds, at, timezone, group_name, jitter_seconds, enabled,
          next_fire_at, last_fired_at, last_batch_id, revision, created_at, updated_at,
          on_finish, fire_failures, retry_at, priority;
