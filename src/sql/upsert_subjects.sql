-- Insert or update many subjects in one statement. ?1 is a JSON array of
-- {"id", "kind", "payload" (JSON text), "active" (0/1)}; ?2 now.
INSERT INTO subjects (id, kind, payload, active, created_at, updated_at)
SELECT j.value ->> 'id', j.value ->> 'kind', j.value ->> 'payload', j.value ->> 'active', ?2, ?2
FROM json_each(?1) AS j
WHERE true
ON CONFLICT (id) DO UPDATE
SET kind = excluded.kind,
    payload = excluded.payload,
    active = excluded.active,
    updated_at = excluded.updated_at;
