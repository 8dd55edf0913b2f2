-- The pending items at the head of one batch, for its `waiting_on` counts (GET
-- /batches/{id}): at most ?2 entries of its due index (backoff included, by
-- run_after) and its cursor items among the ?2 ids above its claim cursor, the
-- candidates a claim reads while limits are kept (core::flow::limits::HELD_WINDOW).
-- Each with its keys and last error, run_after 0 read as the batch's due instant
-- (as the listing shows it). What holds them is then read per key
-- (waiting_keys.sql) and decided per item in core::flow::waiting. Read only.
-- ?1 batch id, ?2 most entries of each part of the head.
WITH batch AS MATERIALIZED (
  SELECT id, claim_after, cursor_end, coalesce(fill ->> 'fire_at', created_at) AS due_at
  FROM batches WHERE id = ?1
)
SELECT * FROM (
  SELECT q.id, q.run_after, q.limits, q.last_error
  FROM batch AS this CROSS JOIN cron_queue AS q INDEXED BY cron_queue_due ON q.batch_id = this.id
  WHERE q.status = 'pending' AND q.kind <> 'callback' AND q.run_after > 0
  ORDER BY q.run_after
  LIMIT ?2
)
UNION ALL
-- A range of ids, not of matches: items in flight or ended between pending ones
-- are read too, so the range bounds the rows read.
SELECT q.id, this.due_at, q.limits, q.last_error
FROM batch AS this CROSS JOIN cron_queue AS q NOT INDEXED
  ON q.id > this.claim_after AND q.id <= min(this.cursor_end, this.claim_after + ?2)
WHERE q.batch_id = this.id AND q.status = 'pending' AND q.run_after = 0;
