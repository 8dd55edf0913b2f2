-- Fewer D1 rows written per item: a first attempt in flight is in no index.
--
-- A claim moved every item into cron_queue_leased: one row written per item, only
-- so the reaper and the `processing` counts could find the items in flight. A
-- cursor item (migration 0014) now keeps run_after = 0 while its first attempt
-- runs, and the leased index holds only items with a real run_after (retries,
-- reaps, replays, deferred first attempts, callbacks). The reaper and the counts
-- find a batch's first attempts in flight by primary key in its lease window:
--
--   lease_after  every cursor item of the batch with an id up to it has left its
--                first attempt (ended, or given a real run_after); the group
--                commit moves it up (count_committed_outcomes.sql)
--   the window   (lease_after, the batch's first cursor item still unclaimed):
--                a cursor claim takes a batch's cursor items in id order, so the
--                first attempts in flight are all in it (the view lease_windows,
--                used by the reaper and every `processing` count)
--
-- The claim cursor of a new batch now starts at the table's largest id when it is
-- created (create_batch.sql), not at 0, so no claim reads older batches' rows.
--
-- Carrying a live database over: no item row changes. An item in flight was given
-- a real run_after by the claim before this migration, so it is in the rebuilt
-- index. A batch not ended whose claim cursor is still 0 gets it moved up: to just
-- before its first item when it has cursor items, else to the table's largest id
-- (any it gets later come after); its window starts at its claim cursor. An
-- ended batch has nothing in flight: its window starts at its cursor's end
-- (timed in docs/upgrading.md).
ALTER TABLE batches ADD COLUMN lease_after INTEGER NOT NULL DEFAULT 0;

UPDATE batches
SET claim_after = CASE
      WHEN cursor_end > 0
      THEN coalesce((SELECT min(q.id) FROM cron_queue AS q WHERE q.batch_id = batches.id), 1) - 1
      ELSE (SELECT coalesce(max(id), 0) FROM cron_queue)
    END
WHERE claim_after = 0 AND finished_at IS NULL;

UPDATE batches
SET lease_after = CASE WHEN finished_at IS NULL THEN claim_after ELSE cursor_end END;

-- Each batch's lease window: its first attempts in flight are the rows with ids in
-- (lease_after, unclaimed) whose status is 'processing' and run_after 0. Finding
-- `unclaimed` reads from the later of the window's start and the claim cursor to
-- the first unclaimed cursor item (the first attempts in flight above the cursor);
-- an ended batch's window is empty and reads nothing.
CREATE VIEW lease_windows AS
SELECT b.id AS batch_id, b.lease_after,
       coalesce((SELECT f.id FROM cron_queue AS f NOT INDEXED
                 WHERE f.id > max(b.lease_after, b.claim_after) AND f.id <= b.cursor_end
                   AND f.batch_id = b.id AND f.status = 'pending' AND f.run_after = 0
                 ORDER BY f.id LIMIT 1),
                b.cursor_end + 1) AS unclaimed
FROM batches AS b;

DROP INDEX cron_queue_leased;
CREATE INDEX cron_queue_leased ON cron_queue (lease_expires_at)
  WHERE status = 'processing' AND run_after > 0;
