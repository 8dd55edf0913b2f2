-- Fewer D1 rows written per item: first attempts claimed by a cursor.
--
-- A first attempt due when its batch is created (every item of an ad-hoc batch,
-- of a schedule in a fixed zone without jitter) was inserted with an entry in
-- cron_queue_due only to be read once, in id order, by the claim: one row
-- written per item. Such an item is now inserted with run_after = 0 ("due as soon
-- as its batch runs") and is in no index: the claim walks the batch's own id
-- range from its cursor by primary key (sql/claim_due_items.sql). Items given a
-- real run_after (retries, releases, reaps, replays, the subject-zone and
-- jittered schedules' items) are in cron_queue_due as before, and a claim gives
-- a cursor item its run_after, so it never goes back to pending without one.
--
--   claim_after  every cursor item of the batch with a larger id is unclaimed or
--                in flight; the commits move it up (count_committed_outcomes.sql)
--   cursor_end   the largest id of the batch's cursor items (0: it has none)
--
-- Carrying a live database over: every existing item keeps its run_after (> 0)
-- and so its entry in the rebuilt index; existing batches get an empty cursor
-- range (0, 0], so their items are claimed from the index as before. Nothing
-- is rewritten but the index itself (timed in docs/upgrading.md).
ALTER TABLE batches ADD COLUMN claim_after INTEGER NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN cursor_end INTEGER NOT NULL DEFAULT 0;

DROP INDEX cron_queue_due;
CREATE INDEX cron_queue_due ON cron_queue (batch_id, run_after)
  WHERE status = 'pending' AND kind <> 'callback' AND run_after > 0;
