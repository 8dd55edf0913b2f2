-- Add explicit items to a just-created batch. ?4 is a JSON array of
-- {"subject_id", "kind", "payload"} (payload as JSON text): one bound parameter
-- whatever the count, so D1's 100-parameter limit never applies.
INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after)
SELECT b.id, j.value ->> 'subject_id', j.value ->> 'kind', j.value ->> 'payload', ?2, ?3
FROM batches AS b, json_each(?4) AS j
WHERE b.id = ?1;
