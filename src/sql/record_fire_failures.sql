-- Back off schedules whose fire failed on its own (core::schedule::tick): count the
-- failure and set when it is tried again, so a fire that keeps failing is tried at
-- a growing interval instead of every tick, and never holds up the others. Only the
-- row the fire was planned from (revision, created_at: a PUT since is the
-- operator's fix and is tried at its own time). One statement for the tick's
-- failures. ?1 JSON array of {"id", "revision", "created_at", "retry_at"}.
UPDATE schedules
SET fire_failures = fire_failures + 1,
    retry_at = f.retry_at
FROM (SELECT json_extract(value, '$.id') AS id,
             json_extract(value, '$.revision') AS revision,
             json_extract(value, '$.created_at') AS created_at,
             json_extract(value, '$.retry_at') AS retry_at
      FROM json_each(?1)) AS f
WHERE schedules.id = f.id AND schedules.revision = f.revision
  AND schedules.created_at = f.created_at AND schedules.enabled = 1;
