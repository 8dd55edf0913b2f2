-- A page of subjects in id order, after ?1 (keyset pagination), at most ?2.
SELECT id, kind, payload, active, group_name, timezone, created_at, updated_at, limits
FROM subjects
WHERE id > ?1
ORDER BY id
LIMIT ?2;
