-- Insert or update many subjects in one statement. ?1 is a JSON array of
-- {"id", "kind", "payload" (JSON text), "active" (0/1), "group", "timezone",
-- "limits" (the keys it holds, its own and its kind's, as a JSON array's text, or
-- null for none: core::requests::SubjectInput), "seed"}; ?2 now. A subject is replaced whole: omitted fields were filled with
-- their defaults before (core::requests), so a PUT without `group` moves the subject
-- back to "default". `seed` (core::schedule::jitter::subject_seed) is written on
-- insert only: a subject's jitter seed stays fixed for its life.
INSERT INTO subjects (id, kind, payload, active, group_name, timezone, created_at, updated_at,
                      jitter_seed, limits)
SELECT j.value ->> 'id', j.value ->> 'kind', j.value ->> 'payload', j.value ->> 'active',
       j.value ->> 'group', j.value ->> 'timezone', ?2, ?2, j.value ->> 'seed',
       j.value ->> 'limits'
FROM json_each(?1) AS j
WHERE true
ON CONFLICT (id) DO UPDATE
SET kind = excluded.kind,
    payload = excluded.payload,
    active = excluded.active,
    group_name = excluded.group_name,
    timezone = excluded.timezone,
    limits = excluded.limits,
    updated_at = excluded.updated_at;
