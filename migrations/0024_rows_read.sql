-- Rows read, beside statements and rows written, in every invocation summary:
-- on the platform D1's rows read are a quota and a bill like rows written (Free
-- 5 M a day, Paid 25 B a month included; D1's pricing page). NULL in summaries
-- stored before this migration (not known, not zero).
-- ADD COLUMN is O(1) in SQLite: no row is rewritten.

ALTER TABLE invocations ADD COLUMN d1_rows_read INTEGER;
