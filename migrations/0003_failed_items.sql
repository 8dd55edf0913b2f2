-- Failed items of a batch in subject_id order, for `GET /batches/{id}/items?status=failed`
-- (list_failed_items.sql). Partial: an item enters it once, when it fails, and never
-- leaves (failed is terminal), so it costs one written row per failed item and none
-- for the others; listing the few failures of a million-item batch reads only them,
-- not the batch (issue 9 item 10).
--
-- Numbered 0003: 0002 is taken by the schedules migration on another branch.
CREATE INDEX cron_queue_failed ON cron_queue (batch_id, subject_id) WHERE status = 'failed';
