-- What each batch cost: the shares of the invocations that worked on it
-- (core::cost::split), kept on the batch row so that GET /batches/{id} reads one
-- row, whatever the number of invocations, and the figures outlive the
-- summaries' retention. Each summary carries its batches' shares in per_batch
-- ("cost"); its insert adds them here (the trigger below): no statement more,
-- and one row written per batch it charges, which the summary counts in its own
-- d1_rows_written (store::SUMMARY_ROWS_WRITTEN plus core::cost::charged). A
-- batch is charged by an invocation that ended some of its items, or that
-- created or claimed from it and ended none; never one row per item.
-- ADD COLUMN with a constant default is O(1) in SQLite: no row is rewritten.

ALTER TABLE batches ADD COLUMN cost_d1_rows_written INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN cost_d1_rows_read INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN cost_d1_statements INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN cost_subrequests INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN cost_queue_operations INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN cost_worker_requests INTEGER NOT NULL DEFAULT 0;

-- DRAIN_QUEUE operations of the invocation (core::model::Tally::queue_operations).
ALTER TABLE invocations ADD COLUMN queue_operations INTEGER NOT NULL DEFAULT 0;

-- A summary's shares go to their batches in the statement that stores it. The
-- batch is found by its primary key; a share for a batch already deleted
-- (retention) matches nothing.
CREATE TRIGGER invocations_charge_batches
AFTER INSERT ON invocations
BEGIN
  UPDATE batches
  SET cost_d1_rows_written = cost_d1_rows_written + coalesce(
        (SELECT c.value ->> '$.cost.d1_rows_written' FROM json_each(NEW.per_batch) AS c
         WHERE c.key = batches.id), 0),
      cost_d1_rows_read = cost_d1_rows_read + coalesce(
        (SELECT c.value ->> '$.cost.d1_rows_read' FROM json_each(NEW.per_batch) AS c
         WHERE c.key = batches.id), 0),
      cost_d1_statements = cost_d1_statements + coalesce(
        (SELECT c.value ->> '$.cost.d1_statements' FROM json_each(NEW.per_batch) AS c
         WHERE c.key = batches.id), 0),
      cost_subrequests = cost_subrequests + coalesce(
        (SELECT c.value ->> '$.cost.subrequests' FROM json_each(NEW.per_batch) AS c
         WHERE c.key = batches.id), 0),
      cost_queue_operations = cost_queue_operations + coalesce(
        (SELECT c.value ->> '$.cost.queue_operations' FROM json_each(NEW.per_batch) AS c
         WHERE c.key = batches.id), 0),
      cost_worker_requests = cost_worker_requests + coalesce(
        (SELECT c.value ->> '$.cost.worker_requests' FROM json_each(NEW.per_batch) AS c
         WHERE c.key = batches.id), 0)
  WHERE id IN (SELECT c.key FROM json_each(NEW.per_batch) AS c
               WHERE c.value -> '$.cost' IS NOT NULL);
END;
