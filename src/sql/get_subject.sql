-- One subject by id (GET /subjects/{id}). ?1 id.
SELECT id, kind, payload, active, group_name, timezone, created_at, updated_at, limits
FROM subjects
WHERE id = ?1;
