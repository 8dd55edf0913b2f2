-- Where the items in flight are found, named once (no table, index or row changes).
--
-- Migration 0015 found a batch's first attempts in flight in its lease window, and
-- the reaper, /metrics, the batch list and the three batch lookups each spelled
-- that read out again; the lookups also each spelled the whole `processing` count.
-- Two views now say it once, and each statement reads them. SQLite flattens both
-- into the statements that use them: every plan is the one the statements had.

-- Each batch's first attempts in flight (claimed by its cursor, run_after = 0):
-- the rows of its lease window (view lease_windows) still processing, read by
-- primary key. A statement filters it by batch_id (that batch's window only).
CREATE VIEW first_attempts_in_flight AS
SELECT w.batch_id, q.id, q.lease_expires_at, q.attempt, q.max_attempts, q.kind
FROM lease_windows AS w
JOIN cron_queue AS q NOT INDEXED ON q.id > w.lease_after AND q.id < w.unclaimed
WHERE q.batch_id = w.batch_id AND q.status = 'processing' AND q.run_after = 0;

-- Every batch with its live `processing` count: its items in flight with a real
-- run_after (the partial index of leased items, which holds items in flight only)
-- plus its first attempts in flight, read only while it has not ended (nothing of
-- an ended batch is in flight). A completion callback in flight is no item of its
-- batch.
CREATE VIEW batches_live AS
SELECT b.*,
       (SELECT count(*) FROM cron_queue AS q INDEXED BY cron_queue_leased
        WHERE q.status = 'processing' AND q.run_after > 0 AND q.batch_id = b.id
          AND q.kind <> 'callback') +
       CASE WHEN b.finished_at IS NULL
            THEN (SELECT count(*) FROM first_attempts_in_flight AS f WHERE f.batch_id = b.id)
            ELSE 0 END AS processing
FROM batches AS b;
