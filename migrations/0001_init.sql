-- cron-fanout schema. Times are integer milliseconds since the Unix epoch (UTC),
-- always bound by the Worker (`?now`), never read from SQLite's clock.
--
-- On D1 every index costs one written row per change of an indexed value, so each
-- index below says which query needs it. Rows written per item are a cost figure
-- (Free plan: 100,000 rows written per day) reported by the load test.

-- What every daily run covers: one row per user, account, feed...
CREATE TABLE subjects (
  id         TEXT PRIMARY KEY,
  kind       TEXT NOT NULL,
  payload    TEXT NOT NULL,               -- JSON, validated by the job kind
  active     INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1)),
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;

-- One row per batch. `key` makes creation idempotent: `daily:<UTC date>` for the
-- daily cron, caller-chosen (or generated) for ad-hoc batches.
-- `completed` and `failed` are kept exact by the trigger below, so progress and the
-- finish check never count a million rows.
CREATE TABLE batches (
  id          TEXT PRIMARY KEY,
  key         TEXT NOT NULL UNIQUE,
  status      TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'finished')),
  total       INTEGER NOT NULL DEFAULT 0,
  completed   INTEGER NOT NULL DEFAULT 0,
  failed      INTEGER NOT NULL DEFAULT 0,
  created_at  INTEGER NOT NULL,
  finished_at INTEGER
) WITHOUT ROWID;

CREATE TABLE cron_queue (
  -- rowid alias: the cheapest key (no separate index); it is also the item id that
  -- webhooks receive as Idempotency-Key. Rows are never deleted, so ids never repeat.
  id               INTEGER PRIMARY KEY,
  batch_id         TEXT NOT NULL REFERENCES batches (id),
  subject_id       TEXT NOT NULL,
  kind             TEXT NOT NULL,
  payload          TEXT NOT NULL,
  status           TEXT NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
  attempt          INTEGER NOT NULL DEFAULT 0,
  max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
  lease_token      TEXT,
  lease_expires_at INTEGER,
  run_after        INTEGER NOT NULL,
  started_at       INTEGER,
  completed_at     INTEGER,
  last_error       TEXT,
  CHECK (attempt <= max_attempts),
  -- Idempotent batch init (INSERT OR IGNORE) and the per-batch item listing, paged
  -- by subject_id.
  UNIQUE (batch_id, subject_id)
);

-- Claim: due pending items in (run_after, id) order. Partial, so an item enters it
-- once (insert or retry) and leaves it once (claim); completions never touch it.
CREATE INDEX cron_queue_due ON cron_queue (run_after) WHERE status = 'pending';

-- Reaper (expired leases) and the progress `processing` count. Partial: it only ever
-- holds the items in flight, so both queries stay small whatever the batch size.
CREATE INDEX cron_queue_leased ON cron_queue (lease_expires_at) WHERE status = 'processing';

-- Keeps batches.completed / batches.failed exact. Fires once per item when it
-- reaches a terminal state (terminal states are never left), in the same
-- transaction as the write that caused it: one extra written row per item.
CREATE TRIGGER cron_queue_count_terminal
AFTER UPDATE OF status ON cron_queue
WHEN OLD.status <> NEW.status AND NEW.status IN ('completed', 'failed')
BEGIN
  UPDATE batches
  SET completed = completed + (NEW.status = 'completed'),
      failed    = failed    + (NEW.status = 'failed')
  WHERE id = NEW.batch_id;
END;

-- One summary row per scheduled invocation (a write per invocation, never per item):
-- the load test reads it for subrequests, D1 statements and rows written.
CREATE TABLE invocations (
  id                INTEGER PRIMARY KEY,
  trigger_kind      TEXT NOT NULL,
  started_at        INTEGER NOT NULL,
  elapsed_ms        INTEGER NOT NULL,
  batch_ids         TEXT NOT NULL,        -- JSON array
  claimed           INTEGER NOT NULL,
  completed         INTEGER NOT NULL,
  retried           INTEGER NOT NULL,
  failed            INTEGER NOT NULL,
  lost_leases       INTEGER NOT NULL,
  reaped            INTEGER NOT NULL,
  subrequests       INTEGER NOT NULL,
  subrequest_budget INTEGER NOT NULL,
  d1_statements     INTEGER NOT NULL,
  d1_rows_written   INTEGER NOT NULL,
  stop_reason       TEXT NOT NULL
);
