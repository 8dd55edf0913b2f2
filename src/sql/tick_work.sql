-- What a tick has besides its due schedules and its drain, read in the same call
-- as the due schedules: whether some batch is still being filled from subjects
-- (its cursor fill_after is set: the tick continues fills only then), whether a
-- cancelled batch has not ended (the tail's cancel sweep), and whether a batch
-- ended or an invocation summary started before the retention cutoff (the tail's
-- retention statements). The tail leaves out the statements that have nothing to
-- do, so an idle tick runs 7 statements, not 13. Each flag is one seek on an
-- index that holds only what it asks for at its front (batches_filling is empty
-- when none fills; batches_status by (status, finished_at); invocations_started).
-- An expired batch whose items retention cannot all account for (migration 0018,
-- delete_expired_items.sql) is kept for good, so it is no work: the flag reads
-- the row of each expired batch it passes, the first one when retention has work.
-- ?1 the retention cutoff (now - RETENTION_DAYS), NULL when retention is off.
SELECT EXISTS (SELECT 1 FROM batches INDEXED BY batches_filling
               WHERE fill_after IS NOT NULL) AS filling,
       EXISTS (SELECT 1 FROM batches INDEXED BY batches_status
               WHERE status = 'cancelled' AND finished_at IS NULL) AS cancelling,
       EXISTS (SELECT 1 FROM batches INDEXED BY batches_status
               WHERE status IN ('finished', 'cancelled') AND finished_at < ?1
                 AND total <= legacy_items + coalesce((SELECT sum((r.value ->> 1) - (r.value ->> 0) + 1)
                                                       FROM json_each(item_ranges) AS r), 0))
         AS batches_expired,
       EXISTS (SELECT 1 FROM invocations INDEXED BY invocations_started
               WHERE started_at < ?1) AS invocations_expired;
