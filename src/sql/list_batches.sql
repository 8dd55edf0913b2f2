-- Newest batches first, each with its live `processing` count (see get_batch.sql).
-- Bounded by the page, not by the number of batches or items: the page is taken
-- first, newest first from the index batches_created (migration 0008; no sort,
-- the LIMIT stops the walk), and the items in flight are counted once per refresh,
-- grouped by batch, from the partial index of leased items (which holds the items
-- in flight with a real run_after only), instead of once per batch (view
-- batches_live would walk it per batch); each batch's first attempts in flight
-- (view first_attempts_in_flight, migrations 0015 and 0016: its lease window) are
-- counted only for a batch not ended (nothing of an ended one is in flight, and
-- most of a page has ended). So a refresh reads ?1
-- batches, their callback rows (one seek each on the callback index, migration 0017)
-- and the items in flight once. A completion callback in flight is no item of its
-- batch.
-- ?1 page size.
SELECT b.id, b.key, b.status, b.total, b.completed, b.failed, b.cancelled, b.created_at,
       b.finished_at, b.schedule_id, b.on_finish, b.fill_after IS NOT NULL AS filling, b.priority,
       coalesce(p.processing, 0) +
       CASE WHEN b.finished_at IS NULL
            THEN (SELECT count(*) FROM first_attempts_in_flight AS f WHERE f.batch_id = b.id)
            ELSE 0 END AS processing,
       c.status AS callback_status, c.attempt AS callback_attempts, c.last_error AS callback_error
FROM (
  SELECT * FROM batches INDEXED BY batches_created
  ORDER BY created_at DESC, id DESC
  LIMIT ?1
) AS b
LEFT JOIN (
  SELECT q.batch_id, count(*) AS processing
  FROM cron_queue AS q INDEXED BY cron_queue_leased
  WHERE q.status = 'processing' AND q.run_after > 0 AND q.kind <> 'callback'
  GROUP BY q.batch_id
) AS p ON p.batch_id = b.id
LEFT JOIN cron_queue AS c INDEXED BY cron_queue_callback ON c.batch_id = b.id AND c.kind = 'callback'
ORDER BY b.created_at DESC, b.id DESC;
