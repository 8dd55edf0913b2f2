-- Retention accounts for a batch's items before it deletes them
-- (delete_expired_items.sql, delete_expired_batches.sql). Since migration 0017 it
-- reads them through the batch's id ranges and, for the rows stored before 0017,
-- the legacy index; there is no foreign key any more to keep a batch that still
-- has items. A Worker built before 0017 that runs after it (between `migrations
-- apply` and `deploy`) inserts items in neither (legacy NULL, no range recorded):
-- a batch deleted around them would strand them.
--
-- A batch's `total` counts every item it got, whichever Worker inserted it; its
-- ranges hold the items inserted since 0017 by this code, and `legacy_items` the
-- ones stored before 0017. A batch is accounted for when
--   total <= legacy_items + the sizes of its ranges
-- (a range can only hold more: AUTOINCREMENT skips ids, never less), and retention
-- keeps one that is not whole: its items, its row.
--
-- legacy_items: the batch's rows in the legacy index (its completion callback,
-- subject_id '', aside), counted once here: nothing enters that index any more, so
-- it is 0 for every batch made since. Reads the legacy index once (index entries
-- only); rewrites only the batches that have legacy rows.
ALTER TABLE batches ADD COLUMN legacy_items INTEGER NOT NULL DEFAULT 0;

UPDATE batches
SET legacy_items = (SELECT count(*) FROM cron_queue AS q INDEXED BY cron_queue_legacy
                    WHERE q.legacy = 1 AND q.batch_id = batches.id AND q.subject_id > '')
WHERE EXISTS (SELECT 1 FROM cron_queue AS q INDEXED BY cron_queue_legacy
              WHERE q.legacy = 1 AND q.batch_id = batches.id AND q.subject_id > '');
