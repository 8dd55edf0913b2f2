-- Last statement of a fire: move the schedule to its next occurrence (NULL and
-- disabled once a one-off has fired), record the fire, in the same transaction as
-- the batch, so a failed fire leaves the schedule due and the next tick retries it
-- (record_fire_failures.sql backs it off); an applied fire clears the backoff.
-- Applies only to the row the fire was planned from: its revision and created_at (a
-- schedule deleted and created again restarts at revision 1; a recreated row has
-- the same created_at only if created in the same millisecond as the old one).
-- ?1 schedule id, ?2 revision, ?3 next_fire_at, ?4 enabled (0/1), ?5 now (NULL when
-- the plan created no batch), ?6 the fired batch's key (NULL: none), ?7 created_at.
UPDATE schedules
SET next_fire_at = ?3,
    enabled = ?4,
    fire_failures = 0,
    retry_at = NULL,
    last_fired_at = coalesce(?5, last_fired_at),
    last_batch_id = coalesce((SELECT b.id FROM batches AS b WHERE b.key = ?6), last_batch_id)
WHERE id = ?1 AND revision = ?2 AND created_at = ?7;
