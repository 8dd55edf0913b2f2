-- Items an invocation gave back unrun (core::model::Tally::released): claimed, but
-- the time left before their lease expired or the deadline could not cover a call
-- and its commit at the D1 round trips the drain saw (issue 9 item 9). Older rows
-- did not count them: 0.
--
-- Numbered 0005: 0002-0004 are the schedules, failed-items and dashboard migrations.
ALTER TABLE invocations ADD COLUMN released INTEGER NOT NULL DEFAULT 0;
