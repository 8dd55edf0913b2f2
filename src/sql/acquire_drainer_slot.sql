-- A tick's drainer takes the lowest free drainer slot (DRAINERS = "auto";
-- migration 0022): one never taken, or one whose lease (expires_at, ms) has
-- passed or that its last drainer freed. No row when all ?4 are held: the
-- drainer drains nothing (MAX_DRAINERS are live). One row written.
-- ?1 now, ?2 holder, ?3 lease until, ?4 MAX_DRAINERS.
WITH RECURSIVE n(slot) AS (SELECT 1 UNION ALL SELECT slot + 1 FROM n WHERE slot < ?4)
INSERT INTO drainer_slots (slot, holder, expires_at)
SELECT slot, ?2, ?3 FROM n
WHERE NOT EXISTS (SELECT 1 FROM drainer_slots AS d WHERE d.slot = n.slot AND d.expires_at > ?1)
ORDER BY slot
LIMIT 1
ON CONFLICT (slot) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
RETURNING slot;
