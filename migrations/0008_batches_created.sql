-- The batch list (sql/list_batches.sql, polled every 3 s by an open dashboard)
-- reads the newest batches in (created_at, id) order, newest first. Without an
-- index SQLite read every batch and sorted them for each refresh; this one gives
-- the page in order, so a refresh reads `limit` entries whatever the number of
-- batches.
--
-- Cost: one index entry per batch, written when the batch is created (its
-- created_at never changes, so counter updates touch no entry); nothing per item.
-- Building it reads the batches table once (docs/upgrading.md, Migration 0008).
CREATE INDEX batches_created ON batches (created_at, id);
