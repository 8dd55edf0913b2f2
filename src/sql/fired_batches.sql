-- Read back after a tick's fires, last statement of their batch(): per fire, the
-- batch its key names (NULL when none) and whether the schedule is still the row
-- the fire was planned from. So the log tells a fire that created its batch (the
-- id it planned) from one that found its key taken (invariant 5: re-firing creates
-- nothing), one that matched no subject (no batch, the schedule advanced: still
-- current) and one superseded by a PUT or DELETE (no batch, not current). Each key
-- is a lookup on the UNIQUE key index, each schedule on its primary key.
-- ?1 JSON array of {"key", "schedule_id", "revision", "created_at"}.
SELECT f.value ->> 'key' AS key,
       b.id AS batch_id,
       b.total AS total,
       EXISTS (SELECT 1 FROM schedules AS s
               WHERE s.id = f.value ->> 'schedule_id'
                 AND s.revision = f.value ->> 'revision'
                 AND s.created_at = f.value ->> 'created_at') AS current
FROM json_each(?1) AS f
LEFT JOIN batches AS b ON b.key = f.value ->> 'key';
