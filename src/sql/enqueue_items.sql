-- Add explicit items to a just-created batch. ?4 is a JSON array of
-- {"subject_id", "kind", "payload"} (payload as JSON text): one bound parameter
-- whatever the count, so D1's 100-parameter limit never applies.
-- max_attempts: the item's kind's own from ?5 (JSON object kind → attempts, for
-- kinds that declare one), else ?2 (MAX_ATTEMPTS). ?3 now.
INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after)
SELECT b.id, j.value ->> 'subject_id', j.value ->> 'kind', j.value ->> 'payload',
       coalesce(json_extract(?5, '$."' || (j.value ->> 'kind') || '"'), ?2), ?3
FROM batches AS b, json_each(?4) AS j
WHERE b.id = ?1;
