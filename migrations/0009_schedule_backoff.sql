-- Schedules that fail back off, and zones read without walking every group.
--
-- A schedule whose fire fails backs off instead of blocking the tick: the tick
-- applies each fire apart from the others (core::schedule::tick), and a fire that
-- fails on its own is retried at `retry_at` (capped exponential backoff,
-- `tick::retry_at`), counted in `fire_failures`. A fire that applies, or a PUT,
-- clears both. `next_fire_at` keeps the occurrence that is due, so a retry fires
-- the occurrence it missed (or a later one, once that is due: missed fires fire once).
--
-- Costs: two constant-default columns (SQLite adds them without rewriting a row)
-- and the due index rebuilt over the enabled schedules (one entry each).
ALTER TABLE schedules ADD COLUMN fire_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN retry_at INTEGER;

-- The due query (sql/due_schedules.sql) orders by when a schedule is next tried:
-- its retry while it backs off, else its next occurrence. Still partial on
-- enabled schedules, so an idle tick reads only the due rows it returns.
DROP INDEX schedules_due;
CREATE INDEX schedules_due ON schedules (coalesce(retry_at, next_fire_at)) WHERE enabled = 1;

-- The zones of every active subject, for a `"timezone": "subject"` schedule with no
-- group (sql/zones_in_use.sql skips from one zone to the next: one entry per zone
-- read, however many groups and subjects). Before it, that read walked every
-- (group, zone) pair of subjects_group_zone: with one group per tenant, hundreds of
-- thousands of entries a fire. Written: 1 entry per subject insert, 2 when a
-- subject's zone or active flag changes; nothing per item. Building it reads the
-- subjects once.
CREATE INDEX subjects_zone ON subjects (timezone) WHERE active = 1;
