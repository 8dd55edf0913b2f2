-- Batch control (issue 11 part A): pause, resume, cancel, dead-letter replay and
-- retention.
--
-- Batches gain the statuses `paused` and `cancelled` and a `cancelled` counter;
-- items gain the terminal status `cancelled`. SQLite cannot alter a CHECK, so both
-- tables are rebuilt the documented way (https://www.sqlite.org/lang_altertable.html,
-- "other kinds of table schema changes"): create the new table, copy, drop the old
-- one, rename, and recreate every index and trigger. D1 enforces foreign keys and
-- runs a migration as one transaction; the order below never leaves an item
-- pointing at a missing batch (the new queue references the new batches table,
-- whose rename carries the reference along), and deferring the checks to the
-- commit, as D1's docs advise for such rebuilds, costs nothing if it is not needed.
--
-- Cost: every row of both tables is written once more, with its index entries
-- (docs/upgrading.md gives the figures per million items). Retention of
-- invocation summaries reads them by migration 0004's invocations_started.
PRAGMA defer_foreign_keys = true;

CREATE TABLE batches_new (
  id          TEXT PRIMARY KEY,
  key         TEXT NOT NULL UNIQUE,
  -- running: claimable. paused: not claimed until resumed. cancelled: never
  -- claimed again; ends (finished_at set) once nothing is pending or in flight.
  -- finished: every item ended. Replay moves finished back to running.
  status      TEXT NOT NULL DEFAULT 'running'
              CHECK (status IN ('running', 'paused', 'cancelled', 'finished')),
  total       INTEGER NOT NULL DEFAULT 0,
  completed   INTEGER NOT NULL DEFAULT 0,
  failed      INTEGER NOT NULL DEFAULT 0,
  cancelled   INTEGER NOT NULL DEFAULT 0,
  created_at  INTEGER NOT NULL,
  finished_at INTEGER,
  schedule_id TEXT
) WITHOUT ROWID;

INSERT INTO batches_new (id, key, status, total, completed, failed, cancelled,
                         created_at, finished_at, schedule_id)
SELECT id, key, status, total, completed, failed, 0, created_at, finished_at, schedule_id
FROM batches;

CREATE TABLE cron_queue_new (
  -- AUTOINCREMENT: the id is the webhooks' Idempotency-Key, and retention deletes
  -- rows, so an id must never be handed out again (a plain rowid reuses the
  -- largest one once it is deleted). It costs one sqlite_sequence write per
  -- INSERT statement, not per item.
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  batch_id         TEXT NOT NULL REFERENCES batches_new (id),
  subject_id       TEXT NOT NULL,
  kind             TEXT NOT NULL,
  payload          TEXT NOT NULL,
  status           TEXT NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'processing', 'completed', 'failed', 'cancelled')),
  attempt          INTEGER NOT NULL DEFAULT 0,
  max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
  lease_token      TEXT,
  lease_expires_at INTEGER,
  run_after        INTEGER NOT NULL,
  started_at       INTEGER,
  completed_at     INTEGER,
  last_error       TEXT,
  CHECK (attempt <= max_attempts),
  -- Idempotent batch init (INSERT OR IGNORE), the per-batch item listing paged by
  -- subject_id, and retention's items of a batch.
  UNIQUE (batch_id, subject_id)
);

INSERT INTO cron_queue_new (id, batch_id, subject_id, kind, payload, status, attempt,
                            max_attempts, lease_token, lease_expires_at, run_after,
                            started_at, completed_at, last_error)
SELECT id, batch_id, subject_id, kind, payload, status, attempt, max_attempts,
       lease_token, lease_expires_at, run_after, started_at, completed_at, last_error
FROM cron_queue;

-- The child first: dropping the old queue drops its indexes and the counter
-- trigger; then no table references the old batches.
DROP TABLE cron_queue;
DROP TABLE batches;
ALTER TABLE batches_new RENAME TO batches;
ALTER TABLE cron_queue_new RENAME TO cron_queue;

-- The running batches, exactly as migration 0004 made it: /metrics sums their
-- counters, and they are the claimable ones (sql/claim_due_items.sql).
CREATE INDEX batches_running ON batches (status) WHERE status = 'running';

-- Which cancelled batches still have items to sweep (sql/count_cancelled_page.sql)
-- or may end (sql/finish_batches.sql), and which ended long enough ago for
-- retention (sql/delete_*): each a seek on (status, finished_at), never a scan of
-- old batches. Written: 2 entries per status change, nothing per item.
CREATE INDEX batches_status ON batches (status, finished_at);

-- Claim: a running batch's due pending items in (run_after, id) order (the rowid
-- ends every index entry). Keyed by batch first, so the claim seeks each running
-- batch and never walks the items of a paused or cancelled one; cancel pages
-- through a batch's pending items here. Partial: an item enters it once (insert,
-- retry, replay) and leaves it once (claim, cancel); completions never touch it.
-- The same rows are written as with the old (run_after) index.
CREATE INDEX cron_queue_due ON cron_queue (batch_id, run_after) WHERE status = 'pending';

-- Reaper (expired leases) and the progress `processing` count. Partial: it only ever
-- holds the items in flight, so both queries stay small whatever the batch size.
CREATE INDEX cron_queue_leased ON cron_queue (lease_expires_at) WHERE status = 'processing';

-- Failed items of a batch in subject_id order: `?status=failed` listings and
-- replay read only the failures (migration 0003). An item enters it when it fails
-- and leaves it when it is replayed (one written row each).
CREATE INDEX cron_queue_failed ON cron_queue (batch_id, subject_id) WHERE status = 'failed';

-- Keeps batches.completed / failed / cancelled exact for the moves items make one at
-- a time: out of processing into a terminal state (a commit, the reaper), in the
-- same transaction as the write: one extra written row per item. The bulk moves
-- count themselves instead, in the same transaction as the move, one written row
-- per page instead of one per item: cancel (pending -> cancelled,
-- sql/count_cancelled_page.sql) and replay (failed -> pending,
-- sql/reopen_for_replay.sql, sql/reopen_for_item_replay.sql). Nothing else moves
-- an item into or out of a terminal state.
CREATE TRIGGER cron_queue_count_terminal
AFTER UPDATE OF status ON cron_queue
WHEN OLD.status = 'processing' AND NEW.status IN ('completed', 'failed', 'cancelled')
BEGIN
  UPDATE batches
  SET completed = completed + (NEW.status = 'completed'),
      failed    = failed    + (NEW.status = 'failed'),
      cancelled = cancelled + (NEW.status = 'cancelled')
  WHERE id = NEW.batch_id;
END;
