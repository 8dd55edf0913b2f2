-- Elastic drain (DRAINERS = "auto"): leased drainer slots, each drainer
-- summary's place in its chain, and an item's dispatch throws running.
--
-- drainer_slots: one row per slot a chain of drainers holds (slot 1 to
-- MAX_DRAINERS). A tick's drainer takes a free one (acquire_drainer_slot.sql:
-- absent, or its lease expired); each drainer of the chain hands it to the
-- continuation it sends, or frees it when nothing is left (pass_drainer_slot.sql),
-- one row written either way. `holder` names the invocation that may hand it on
-- next, so a message the queue delivers twice continues the chain once. A slot
-- whose drainer died frees itself when `expires_at` (ms) passes. The tick counts
-- the slots in use to start no more than MAX_DRAINERS drainers at once.
CREATE TABLE drainer_slots (
  slot INTEGER PRIMARY KEY,
  holder TEXT NOT NULL,
  expires_at INTEGER NOT NULL
);

-- A drainer's number among its tick's and its place in the chain (0: sent by
-- the tick, k: its k-th continuation); NULL for ticks and for drainers of a
-- fixed DRAINERS. O(1) ADD COLUMNs: no row is rewritten.
ALTER TABLE invocations ADD COLUMN drainer INTEGER;
ALTER TABLE invocations ADD COLUMN chain INTEGER;

-- How many times running an item's dispatch threw (the SELF call failed before
-- any answer; it went back unrun with its attempt): core::drain takes the
-- THROWS_BEFORE_CRASH-th for its child crashing, which spends an attempt, where
-- the ones before are taken for the platform refusing, which spends none. Set by
-- the group commit in the row it writes anyway (0 after any run): no row more.
ALTER TABLE cron_queue ADD COLUMN given_back INTEGER NOT NULL DEFAULT 0;
