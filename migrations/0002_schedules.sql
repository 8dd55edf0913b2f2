-- Schedules (issue 10): any number of cron / interval / one-off schedules, each in a
-- named time zone or in each subject's own, fired by the one `* * * * *` trigger.
-- The daily batch of 0001 becomes the schedule `daily` (last statement).
--
-- Costs, in D1 rows written: every statement here is O(1) except the two UPDATEs,
-- which write each existing subject once and each existing daily batch once.

-- One row per schedule. Exactly one of cron / every_seconds / at says when it fires
-- (src/core/schedule); `next_fire_at` is the next due instant, NULL once disabled.
-- `revision` grows with every PUT: a fire planned from an older revision applies
-- nothing (sql/create_schedule_batch.sql, sql/advance_schedule.sql).
CREATE TABLE schedules (
  id             TEXT PRIMARY KEY,
  cron           TEXT,                 -- 5 fields, Cloudflare cron syntax
  every_seconds  INTEGER CHECK (every_seconds BETWEEN 60 AND 31536000),
  at             INTEGER,              -- a one-off's instant
  timezone       TEXT NOT NULL DEFAULT 'UTC',  -- IANA name, or 'subject'
  group_name     TEXT,                 -- NULL: every active subject
  jitter_seconds INTEGER NOT NULL DEFAULT 0 CHECK (jitter_seconds BETWEEN 0 AND 3600),
  enabled        INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
  next_fire_at   INTEGER,
  last_fired_at  INTEGER,
  last_batch_id  TEXT,
  revision       INTEGER NOT NULL DEFAULT 1,
  created_at     INTEGER NOT NULL,
  updated_at     INTEGER NOT NULL,
  CHECK ((cron IS NOT NULL) + (every_seconds IS NOT NULL) + (at IS NOT NULL) = 1),
  CHECK (enabled = 0 OR next_fire_at IS NOT NULL)
) WITHOUT ROWID;

-- The tick's due query (sql/due_schedules.sql): enabled schedules by next_fire_at.
-- Partial, so disabled schedules are not in it, and a tick reads only the due rows
-- it returns: 10,000 idle schedules cost nothing. Written: 1 entry per schedule
-- write, 2 (out, in) per fire.
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE enabled = 1;

-- Which schedule created a batch (NULL: ad-hoc). No index: nothing looks batches
-- up by schedule (a schedule row points at its last batch instead).
ALTER TABLE batches ADD COLUMN schedule_id TEXT;

-- Subjects gain a group (what a schedule's `group` selects) and a time zone (what
-- `"timezone": "subject"` reads). Constant defaults: SQLite adds such columns
-- without rewriting a row.
ALTER TABLE subjects ADD COLUMN group_name TEXT NOT NULL DEFAULT 'default';
ALTER TABLE subjects ADD COLUMN timezone TEXT NOT NULL DEFAULT 'UTC';

-- Each subject's jitter seed, fixed for its life, so an item's jitter is fixed per
-- (fire, subject) and computed inside the fire's INSERT … SELECT. New subjects get
-- FNV-1a(id) (sql/upsert_subjects.sql, core::schedule::jitter::subject_seed);
-- existing ones a random 31-bit value here (SQLite has no hash function, and a
-- seed only has to be fixed). `random() % 2^31` first: abs() of the smallest
-- 64-bit integer would overflow.
ALTER TABLE subjects ADD COLUMN jitter_seed INTEGER NOT NULL DEFAULT 0;
UPDATE subjects SET jitter_seed = abs(random() % 2147483648);

-- Per (group, zone) of active subjects: a fire's group filter (INSERT … SELECT of
-- sql/enqueue_for_schedule.sql reads only its group's subjects) and the zones in
-- use (sql/zones_in_use.sql skips from one distinct pair to the next, reading one
-- entry per pair, not per subject). Written: 1 entry per subject insert, 2 when a
-- subject's group, zone or active flag changes; nothing per item.
CREATE INDEX subjects_group_zone ON subjects (group_name, timezone) WHERE active = 1;

-- Daily batches created before schedules belong to `daily`.
UPDATE batches SET schedule_id = 'daily' WHERE substr(key, 1, 6) = 'daily:';

-- The compatibility schedule: what DAILY_CRON did (every active subject at 12:00
-- UTC, key daily:<UTC date>). next_fire_at is 12:00 UTC of the day the migration
-- runs: migrated in the morning, it fires at noon; migrated in the afternoon, the
-- next tick fires today's batch if the old trigger has not created it (same key,
-- so it is created once either way). The only clock a migration has is SQLite's.
INSERT INTO schedules (id, cron, timezone, group_name, jitter_seconds, enabled,
                       next_fire_at, created_at, updated_at)
VALUES ('daily', '0 12 * * *', 'UTC', NULL, 0, 1,
        CAST(strftime('%s', date('now'), '+12 hours') AS INTEGER) * 1000,
        CAST(strftime('%s', 'now') AS INTEGER) * 1000,
        CAST(strftime('%s', 'now') AS INTEGER) * 1000);
