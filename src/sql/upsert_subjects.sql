-- Insert or update many subjects in one statement. ?1 is a JSON array of
-- {"id", "kind", "payload" (JSON text), "active" (0/1), "seed"}; ?2 now.
-- `seed` (core::schedule::jitter::subject_seed) is written on insert only: a
-- subject's jitter seed stays fixed for its life.
INSERT INTO subjects (id, kind, payload, active, created_at, updated_at, jitter_seed)
SELECT j.value ->> 'id', j.value ->> 'kind', j.value ->> 'payload', j.value ->> 'active', ?2, ?2,
       j.value ->> 'seed'
FROM json_each(?1) AS j
WHERE true
ON CONFLICT (id) DO UPDATE
SET kind = excluded.kind,
    payload = excluded.payload,
    active = excluded.active,
    updated_at = excluded.updated_at;
