-- A drainer's last step (DRAINERS = "auto"), one row written: if a claim would
-- take anything now (claim_selection.sql, which this statement starts with;
-- nothing charged), its slot is handed to the continuation it is about to send
-- (holder ?8, lease to ?9); if not, the slot is freed (expires_at 0) and the
-- chain ends. No row when the slot is no longer this drainer's (holder ?10): its
-- lease ran out and another chain took it, or a duplicate delivery of this
-- drainer's message handed it on first; such a drainer sends nothing.
-- ?1 to ?6 as in count_drain_work.sql (?2 = 1: anything at all), ?7 slot.
UPDATE drainer_slots
SET holder = ?8,
    expires_at = CASE WHEN EXISTS (SELECT 1 FROM next) THEN ?9 ELSE 0 END
WHERE slot = ?7 AND holder = ?10
RETURNING expires_at > 0 AS continues;
