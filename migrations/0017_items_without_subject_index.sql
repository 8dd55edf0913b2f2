-- Fewer D1 rows written per item: no (batch_id, subject_id) index entry per item.
--
-- UNIQUE (batch_id, subject_id) cost every item one written row at insert. What
-- it did is now done without an entry per item:
--   idempotent init     the batch key (create_batch.sql: the statements after it
--                       act on a fresh id only) and a fill's cursor, moved in the
--                       same batch() as its page; explicit lists refuse duplicates
--                       in the request (core::requests)
--   listing by subject  a batch's items are inserted in subject order (a fill page
--                       walks its subjects in id order, explicit items are sorted),
--                       each insert one contiguous id range, so within a batch id
--                       order is subject order. `batches.item_ranges` lists the
--                       batch's id ranges ([[first, last], …], a range per insert,
--                       merged while they touch); a listing finds `after` by binary
--                       search and walks the ranges by primary key
--                       (list_batch_items.sql)
--   retention, totals   read a batch's items through its ranges
--   the callback row    found by the partial unique index cron_queue_callback
--                       (one callback row per batch; the trigger's upsert target)
--   page_mark           the table's largest id right before a page is inserted
--                       (mark_fill_page.sql, create_batch.sql), so the statement
--                       after the page knows its range without reading it
--
-- Carrying a live database over: SQLite cannot drop a table's UNIQUE constraint,
-- so the queue is rebuilt the documented way (as in migration 0006): create the
-- new table, copy every row with its id, drop the old one, rename, and recreate
-- the indexes, the views and the callback trigger. The rows stored before have no
-- ranges and their ids are not in subject order: they are marked `legacy = 1` and
-- keep a (batch_id, subject_id) entry in the partial index cron_queue_legacy,
-- which the listing, retention and the callback lookups read beside the ranges;
-- it empties as retention deletes them, and rows inserted from now on (legacy
-- NULL) are never in it. The AUTOINCREMENT high-water mark moves with the rows
-- (sqlite_sequence), so no id deleted before is handed out again.
-- Cost: every item row is written once more, with its index entries (timed in
-- docs/upgrading.md, "Migration 0017").

DROP VIEW batches_live;
DROP VIEW first_attempts_in_flight;
DROP VIEW lease_windows;
DROP TRIGGER batches_enqueue_callback;

CREATE TABLE cron_queue_new (
  -- AUTOINCREMENT: the id is the webhooks' Idempotency-Key, and retention deletes
  -- rows, so an id must never be handed out again (a plain rowid reuses the
  -- largest one once it is deleted). It costs one sqlite_sequence write per
  -- INSERT statement, not per item.
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  -- No REFERENCES batches (id) any more: enforcing it when a batch is deleted
  -- needs an index by batch_id over every item (without one D1 would scan the
  -- queue per deleted batch), the entry per item this migration removes. Items
  -- are only inserted by statements that read their batch in the same statement,
  -- and retention deletes a batch only once none of its items is left
  -- (delete_expired_batches.sql; conformance tests check both).
  batch_id         TEXT NOT NULL,
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
  receipts         TEXT,
  -- 1 on the rows stored before this migration (in cron_queue_legacy), else NULL.
  legacy           INTEGER,
  CHECK (attempt <= max_attempts)
);

-- The high-water mark first, so the copy (explicit ids) only ever raises it.
UPDATE sqlite_sequence SET name = 'cron_queue_new' WHERE name = 'cron_queue';

INSERT INTO cron_queue_new (id, batch_id, subject_id, kind, payload, status, attempt,
                            max_attempts, lease_token, lease_expires_at, run_after,
                            started_at, completed_at, last_error, receipts, legacy)
SELECT id, batch_id, subject_id, kind, payload, status, attempt, max_attempts,
       lease_token, lease_expires_at, run_after, started_at, completed_at, last_error,
       receipts, 1
FROM cron_queue
ORDER BY id;

DROP TABLE cron_queue;
ALTER TABLE cron_queue_new RENAME TO cron_queue;

-- The indexes as migrations 0003, 0007, 0014 and 0015 left them.
CREATE INDEX cron_queue_failed ON cron_queue (batch_id, subject_id) WHERE status = 'failed';
CREATE INDEX cron_queue_callbacks ON cron_queue (run_after)
  WHERE status = 'pending' AND kind = 'callback';
CREATE INDEX cron_queue_due ON cron_queue (batch_id, run_after)
  WHERE status = 'pending' AND kind <> 'callback' AND run_after > 0;
CREATE INDEX cron_queue_leased ON cron_queue (lease_expires_at)
  WHERE status = 'processing' AND run_after > 0;

-- The rows stored before this migration, by batch in subject order (what the
-- UNIQUE constraint's index gave them). Nothing enters it any more.
CREATE INDEX cron_queue_legacy ON cron_queue (batch_id, subject_id) WHERE legacy = 1;

-- A batch's completion callback row (subject_id '', kind 'callback', migration
-- 0007): at most one per batch, the trigger's upsert target, one seek for the
-- batch lookups and retention. One entry per batch, none per item.
CREATE UNIQUE INDEX cron_queue_callback ON cron_queue (batch_id) WHERE kind = 'callback';

-- A batch's item id ranges and the page mark (above). A batch made before has no
-- ranges: its items are the legacy ones.
ALTER TABLE batches ADD COLUMN item_ranges TEXT;
ALTER TABLE batches ADD COLUMN page_mark INTEGER NOT NULL DEFAULT 0;

-- The ids of a group commit's outcomes its fence will refuse (lost leases), set
-- by count_committed_outcomes.sql on the batch row it writes anyway, only so that
-- its RETURNING can hand them back: commit_outcomes.sql then returns nothing (a
-- RETURNING row per item is a row read per item on D1). NULL when none was lost.
ALTER TABLE batches ADD COLUMN commit_lost TEXT;

-- The trigger of migration 0007, its upsert now on the callback index.
CREATE TRIGGER batches_enqueue_callback
AFTER UPDATE OF finished_at ON batches
WHEN OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL AND NEW.on_finish IS NOT NULL
BEGIN
  INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after)
  VALUES (NEW.id, '', 'callback',
          json_object('url', NEW.on_finish ->> 'url',
                      'summary', json_object('batch_id', NEW.id, 'key', NEW.key,
                                             'status', NEW.status, 'total', NEW.total,
                                             'completed', NEW.completed, 'failed', NEW.failed,
                                             'cancelled', NEW.cancelled,
                                             'created_at', NEW.created_at,
                                             'finished_at', NEW.finished_at)),
          NEW.callback_max_attempts, NEW.finished_at)
  ON CONFLICT (batch_id) WHERE kind = 'callback' DO UPDATE
  SET status = 'pending',
      payload = excluded.payload,
      attempt = 0,
      max_attempts = excluded.max_attempts,
      run_after = excluded.run_after,
      lease_token = NULL,
      lease_expires_at = NULL,
      started_at = NULL,
      completed_at = NULL,
      last_error = NULL;
END;

-- The views of migrations 0015 and 0016, unchanged.
CREATE VIEW lease_windows AS
SELECT b.id AS batch_id, b.lease_after,
       coalesce((SELECT f.id FROM cron_queue AS f NOT INDEXED
                 WHERE f.id > max(b.lease_after, b.claim_after) AND f.id <= b.cursor_end
                   AND f.batch_id = b.id AND f.status = 'pending' AND f.run_after = 0
                 ORDER BY f.id LIMIT 1),
                b.cursor_end + 1) AS unclaimed
FROM batches AS b;

CREATE VIEW first_attempts_in_flight AS
SELECT w.batch_id, q.id, q.lease_expires_at, q.attempt, q.max_attempts, q.kind
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
