-- A claim's start when no rate is charged (claim_due_items.sql follows): every
-- item starts now. Without the charge a rate key has no room, so nothing is
-- let through ahead of its slot; the plain claim, the hot path, reads no slots.
UPDATE cron_queue
SET started_at = CASE WHEN act.claims THEN ?1 ELSE cron_queue.started_at END,
