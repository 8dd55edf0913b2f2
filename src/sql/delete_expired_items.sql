-- Retention, step 1: delete up to ?2 items of this tick's page of expired batches:
-- the first ?3 batches that ended (finished, or cancelled and ended) before ?1, in
-- (status, finished_at) order. Step 2 (delete_expired_batches.sql, same call)
-- deletes the batches of the same page that have no items left, so an emptied
-- batch leaves the front of the index in the tick that empties it, and the next
-- tick's page starts where this one stopped: the deletions are the cursor. So a
-- tick reads at most ?3 batches and ?2 items, however many expired batches wait
-- (before, a backlog of emptied batches was walked again every tick). An idle
-- tick costs a seek. Deleting items does not touch the batch counters (no trigger
-- on DELETE).
-- A batch's items are read through its id ranges by primary key (migration 0017:
-- a deleted prefix costs a seek per range), its rows stored before that migration
-- through their own index, its callback row through the callback index.
-- A batch whose completion callback still waits for its delivery (pending or in
-- flight, migration 0007) is kept whole until it is delivered or has failed:
-- retention never loses a callback. A batch whose items the ranges and the legacy
-- rows do not all account for (its total is more: items a Worker built before
-- migration 0017 inserted after it, in neither; migration 0018) is kept whole
-- too, since deleting it would strand them (no foreign key keeps it). The page
-- passes over such batches (one seek each, the other check reads the batch row
-- only), so their number, not the history, adds to the walk.
-- ?1 cutoff (now - RETENTION_DAYS), ?2 most items per statement, ?3 batches a page.
WITH page AS MATERIALIZED (
  SELECT b.id, coalesce(b.item_ranges, '[]') AS ranges
  FROM batches AS b INDEXED BY batches_status
  WHERE b.status IN ('finished', 'cancelled') AND b.finished_at < ?1
    AND NOT EXISTS (SELECT 1 FROM cron_queue AS c INDEXED BY cron_queue_callback
                    WHERE c.batch_id = b.id AND c.kind = 'callback'
                      AND c.status IN ('pending', 'processing'))
    AND b.total <= b.legacy_items + coalesce((SELECT sum((r.value ->> 1) - (r.value ->> 0) + 1)
                                              FROM json_each(b.item_ranges) AS r), 0)
  LIMIT ?3
)
DELETE FROM cron_queue
WHERE id IN (
  SELECT q.id FROM page CROSS JOIN json_each(page.ranges) AS r
  CROSS JOIN cron_queue AS q ON q.id BETWEEN r.value ->> 0 AND r.value ->> 1
  WHERE q.batch_id = page.id
  UNION ALL
  SELECT q.id FROM page CROSS JOIN cron_queue AS q INDEXED BY cron_queue_legacy
    ON q.batch_id = page.id AND q.legacy = 1
  UNION ALL
  SELECT q.id FROM page CROSS JOIN cron_queue AS q INDEXED BY cron_queue_callback
    ON q.batch_id = page.id AND q.kind = 'callback'
  LIMIT ?2
);
