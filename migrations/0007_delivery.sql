-- Delivery (issue 11 part B): completion callbacks and multi-channel items with
-- per-channel receipts.
--
-- A completion callback is a row of the queue, claimed, dispatched, committed and
-- reaped like any item, so it is delivered at least once with the items' retry
-- policy and survives a crash. It is its batch's row with subject_id '' (no
-- subject has that id: the id rules refuse it) and kind 'callback'; the trigger
-- at the end enqueues it atomically with the finish compare-and-set
-- (sql/finish_batches.sql). It is not one of the batch's items: the counters,
-- `total`, progress, the item listings and the cancel sweep leave it out.
--
-- Cost: every statement here is O(1) in rows written except the index rebuild,
-- which writes one entry per pending item (docs/upgrading.md). Nothing is added
-- per item: the new columns have constant defaults (no row is rewritten) and the
-- rebuilt index holds the same entries for items as before.

-- The callback of a batch: {"url": "https://…"} as validated (core::callback),
-- NULL for none; and the attempts its delivery gets (MAX_ATTEMPTS when the batch
-- was created), set with it. The trigger reads both.
ALTER TABLE batches ADD COLUMN on_finish TEXT;
ALTER TABLE batches ADD COLUMN callback_max_attempts INTEGER
  CHECK ((callback_max_attempts IS NULL) = (on_finish IS NULL) AND
         (callback_max_attempts IS NULL OR callback_max_attempts >= 1));

-- A schedule's callback, copied onto every batch it fires
-- (sql/create_schedule_batch.sql).
ALTER TABLE schedules ADD COLUMN on_finish TEXT;

-- Per-channel receipts of a `multi` item (core::receipts):
-- {"<channel>": {"status": "delivered", "at": <ms>} | {"status": "pending" |
-- "failed", "error": "…"}}, NULL until its first run commits and for kinds
-- without channels. Lives in the item's own row: committing it with the outcome
-- writes no extra row (sql/commit_outcomes.sql merges, never downgrading a
-- delivered channel).
ALTER TABLE cron_queue ADD COLUMN receipts TEXT;

-- The due index without callback rows: the claim seeks it per running batch and
-- the cancel sweep pages through it, and neither may take a callback (a batch
-- reopened by a replay, then cancelled, would otherwise sweep the callback of
-- its earlier end into its own `cancelled` counter). Queries that read it say
-- `kind <> 'callback'` so that SQLite may use it (INDEXED BY makes that an error
-- otherwise). Items enter and leave it exactly as before.
DROP INDEX cron_queue_due;
CREATE INDEX cron_queue_due ON cron_queue (batch_id, run_after)
  WHERE status = 'pending' AND kind <> 'callback';

-- Due callbacks, whatever their batch's status (a callback reports an end, so its
-- batch has ended, or was reopened since): the claim's second source
-- (sql/claim_due_items.sql). Holds only the callbacks waiting for a delivery: an
-- idle claim reads nothing here. Written: 1 entry in and 1 out per attempt of a
-- callback, nothing per item.
CREATE INDEX cron_queue_callbacks ON cron_queue (run_after)
  WHERE status = 'pending' AND kind = 'callback';

-- The counter trigger of migration 0006, leaving callback rows out: a callback
-- is not one of its batch's items, and its batch has ended when it commits.
DROP TRIGGER cron_queue_count_terminal;
CREATE TRIGGER cron_queue_count_terminal
AFTER UPDATE OF status ON cron_queue
WHEN OLD.status = 'processing' AND NEW.status IN ('completed', 'failed', 'cancelled')
  AND NEW.kind <> 'callback'
BEGIN
  UPDATE batches
  SET completed = completed + (NEW.status = 'completed'),
      failed    = failed    + (NEW.status = 'failed'),
      cancelled = cancelled + (NEW.status = 'cancelled')
  WHERE id = NEW.batch_id;
END;

-- Enqueue the callback in the same statement that ends the batch: only the finish
-- compare-and-set (sql/finish_batches.sql) moves finished_at from NULL to a time,
-- once per end (a replay clears it, so the batch ends, and calls back, again).
-- The payload carries the summary as it is at the end (the counters are final:
-- nothing is pending or in flight). A batch that ends again reuses its callback
-- row: reset to a fresh delivery of the new summary, whatever the row's state
-- (an older summary not yet delivered is replaced by the newer one; a delivery of
-- it still in flight loses its lease and commits nothing).
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
  ON CONFLICT (batch_id, subject_id) DO UPDATE
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
