-- Fill a just-created batch from every active subject: one statement whatever the
-- count. Matches nothing unless batch ?1 exists (it was created in this batch()).
INSERT OR IGNORE INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after)
SELECT b.id, s.id, s.kind, s.payload, ?2, ?3
FROM batches AS b, subjects AS s
WHERE b.id = ?1 AND s.active = 1;
