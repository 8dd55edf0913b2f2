-- A page of a batch's items in subject_id order after ?2 (keyset pagination on the
-- UNIQUE (batch_id, subject_id) index), optionally of one status (?3 NULL = any).
-- Failed items are listed by list_failed_items.sql instead: filtering here would
-- read every item of the batch to find a few failures. The batch's completion
-- callback (subject_id '', migration 0007) is no item: `subject_id > ?2` never
-- matches it, as '' sorts before every subject id. An item never claimed that was
-- due at once (run_after = 0, migration 0014) shows when it became due: its
-- batch's fire instant, or its creation for explicit items.
SELECT id, subject_id, kind, status, attempt, max_attempts, last_error,
       CASE run_after WHEN 0 THEN (SELECT coalesce(b.fill ->> 'fire_at', b.created_at)
                                   FROM batches AS b WHERE b.id = ?1)
                      ELSE run_after END AS run_after,
       started_at, completed_at, receipts
FROM cron_queue
WHERE batch_id = ?1 AND subject_id > ?2 AND (?3 IS NULL OR status = ?3)
ORDER BY subject_id
LIMIT ?4;
