-- A drainer's last step (DRAINERS = "auto"), one row written: its slot is handed
-- to the continuation it is about to send (holder ?8, lease to ?9) while more is
-- due now than the live chains on lower slots can take (?11 items each: a
-- drainer's capacity), so the lowest live chain goes on while anything at all is
-- due and a tail of a few items does not wake every chain; otherwise the slot is
-- freed (expires_at 0) and the chain ends. Due is what a claim would take now
-- (claim_selection.sql, which this statement starts with; nothing charged),
-- counted up to ?2 (= ?7 × ?11: past that the answer is the same). No row when
-- the slot is no longer this drainer's (holder ?10): its lease ran out and
-- another chain took it, or a duplicate delivery of this drainer's message
-- handed it on first; such a drainer sends nothing.
-- ?1 to ?6 as in count_drain_work.sql, ?7 slot.
UPDATE drainer_slots
SET holder = ?8,
    expires_at = CASE WHEN (SELECT count(*) FROM next)
                           > ?11 * (SELECT count(*) FROM drainer_slots AS o
                                    WHERE o.slot < ?7 AND o.expires_at > ?1)
                      THEN ?9 ELSE 0 END
WHERE slot = ?7 AND holder = ?10
RETURNING expires_at > 0 AS continues;
