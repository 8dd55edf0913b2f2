-- Flow control: limit keys on items, limits per key, priorities.
--
-- Where each part of a limit lives (docs/architecture.md, "Flow control"):
--   the keys an item holds   cron_queue.limits, a JSON array copied at enqueue
--                            (from subjects.limits for a fill, from the request for
--                            explicit items), NULL when none: a column of the row
--                            the insert writes anyway, in no index, so keys cost
--                            no row written
--   a limit                  limits: one row per key set with PUT /limits/{key}
--                            (`tenant:*` is a partitioned one)
--   in flight                derived, never stored: the items in flight that hold
--                            the key, counted by the claim in the statement that
--                            claims (their status is the truth: a commit, a
--                            release and the reaper move it already)
--   tokens                   limit_state.tat per key (per partition member for a
--                            partitioned limit): the rate's theoretical arrival
--                            time, written once per claim per key
--   order                    batches.priority (and schedules.priority, copied to
--                            the batches a schedule fires)
-- All ADD COLUMNs are O(1) in SQLite: no row of the queue is rewritten.

ALTER TABLE subjects ADD COLUMN limits TEXT;
ALTER TABLE cron_queue ADD COLUMN limits TEXT;
ALTER TABLE batches ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;

-- One row per limited key. `rate` item starts per `per_seconds`, at most `burst`
-- at once after an idle spell; `concurrency` items in flight at once. At least one
-- of rate and concurrency (core::limits checks the ranges; the CHECKs are the
-- backstop).
CREATE TABLE limits (
  key         TEXT PRIMARY KEY,
  rate        INTEGER CHECK (rate BETWEEN 1 AND 1000000),
  per_seconds INTEGER NOT NULL DEFAULT 1 CHECK (per_seconds BETWEEN 1 AND 86400),
  burst       INTEGER CHECK (burst BETWEEN 1 AND 1000000),
  concurrency INTEGER CHECK (concurrency BETWEEN 1 AND 10000),
  created_at  INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL,
  CHECK (rate IS NOT NULL OR concurrency IS NOT NULL),
  CHECK ((rate IS NULL) = (burst IS NULL))
) WITHOUT ROWID;

-- A rate's state per key (a partitioned limit's members each have their own):
-- `tat`, the theoretical arrival time in units of ms × rate (integers, so the
-- bound is exact: core::limits::Gcra). `claim` and `tat_before` let the claim's
-- two statements see the same state: the charge (first) records the token of the
-- claim it charged and the state before it; the claim (second) reads that state
-- back. `basis` is the limit's (rate, per_seconds) the tat was counted in: a PUT
-- that changes them starts the key over (a full burst).
CREATE TABLE limit_state (
  key        TEXT PRIMARY KEY,
  tat        INTEGER NOT NULL,
  basis      TEXT NOT NULL,
  claim      TEXT,
  tat_before INTEGER
) WITHOUT ROWID;

-- The lease windows (migration 0015) and the view of migration 0016 with the keys
-- of each first attempt in flight: the claim counts a key's items in flight from
-- it (and from the leased index) in the statement that claims.
-- While limits are defined a claim may take a batch's cursor items with a held
-- one below them (claim_selection.sql): a window ending at the first pending item
-- would miss what was claimed above it (the reaper, the processing counts and the
-- in-flight counts read these views). A claim takes only candidates among the
-- first core::limits::HELD_WINDOW (128) pending cursor items above the batch's
-- cursor, and pending cursor items never come back (a retry, a release and a reap
-- give a real run_after), so every cursor item in flight lies below the 128th
-- pending one: the window ends there while limits are defined (128 rows more
-- read per window), at the first pending one otherwise (no item is held, so none
-- is claimed above it). Its cursor (claim_after) likewise never passes a pending
-- item while limits are defined (count_committed_outcomes.sql). batches_live
-- reads first_attempts_in_flight, so the three are dropped and made again; the
-- plans are the ones they had.
DROP VIEW batches_live;
DROP VIEW first_attempts_in_flight;
DROP VIEW lease_windows;

CREATE VIEW lease_windows AS
SELECT b.id AS batch_id, b.lease_after,
       coalesce((SELECT f.id FROM cron_queue AS f NOT INDEXED
                 WHERE f.id > max(b.lease_after, b.claim_after) AND f.id <= b.cursor_end
                   AND f.batch_id = b.id AND f.status = 'pending' AND f.run_after = 0
                 ORDER BY f.id
                 LIMIT 1 OFFSET (SELECT CASE WHEN EXISTS (SELECT 1 FROM limits) THEN 127 ELSE 0 END)),
                b.cursor_end + 1) AS unclaimed
FROM batches AS b;

CREATE VIEW first_attempts_in_flight AS
SELECT w.batch_id, q.id, q.lease_expires_at, q.attempt, q.max_attempts, q.kind, q.limits
FROM lease_windows AS w
JOIN cron_queue AS q NOT INDEXED ON q.id > w.lease_after AND q.id < w.unclaimed
WHERE q.batch_id = w.batch_id AND q.status = 'processing' AND q.run_after = 0;

CREATE VIEW batches_live AS
SELECT b.*,
       (SELECT count(*) FROM cron_queue AS q INDEXED BY cron_queue_leased
        WHERE q.status = 'processing' AND q.run_after > 0 AND q.batch_id = b.id
          AND q.kind <> 'callback') +
       CASE WHEN b.finished_at IS NULL
            THEN (SELECT count(*) FROM first_attempts_in_flight AS f WHERE f.batch_id = b.id)
            ELSE 0 END AS processing
FROM batches AS b;
