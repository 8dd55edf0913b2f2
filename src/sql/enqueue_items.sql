-- Add explicit items to a just-created batch. ?3 is a JSON array of
-- {"subject_id", "kind", "payload", "limits"} (payload as JSON text; limits the
-- keys the item holds, its own and its kind's, as a JSON array's text or null:
-- a column of the row written anyway, in no index, so keys cost no row written):
-- one bound parameter whatever the count, so D1's 100-parameter limit never applies.
-- max_attempts: the item's kind's own from ?4 (JSON object kind → attempts, for
-- kinds that declare one), else ?2 (MAX_ATTEMPTS). Each is due at once:
-- run_after = 0, claimed by its batch's cursor, in no index (migration 0014;
-- set_batch_total.sql sets the cursor's end). Inserted in subject-id order: the
-- store sorts the whole list before cutting it into statements, so the batch's ids
-- are in subject order (migration 0017: listings find a subject by binary search).
INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after, limits)
SELECT b.id, j.value ->> 'subject_id', j.value ->> 'kind', j.value ->> 'payload',
       coalesce(json_extract(?4, '$."' || (j.value ->> 'kind') || '"'), ?2), 0,
       j.value ->> 'limits'
FROM batches AS b, json_each(?3) AS j
WHERE b.id = ?1
ORDER BY j.value ->> 'subject_id';
