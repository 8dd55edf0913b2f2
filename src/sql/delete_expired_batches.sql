-- Retention, step 2: delete the batches of this tick's page (the first ?2 batches
-- that ended before ?1, wait for no callback and whose items are all accounted
-- for, in (status, finished_at) order: the same page as step 1,
-- delete_expired_items.sql, in the same call) that have no items left (step 1
-- deletes them first): none in its id ranges, among its rows stored before
-- migration 0017, nor its callback row. Nothing else keeps a batch with items
-- (migration 0017 dropped the items' foreign key), so a batch whose total is more
-- than its ranges and its legacy rows hold (items an old Worker inserted after
-- 0017, found by neither; migration 0018) is never in the page: deleting it would
-- strand them. Their keys become free again. Reads at most ?2 batches, however
-- many expired ones wait.
-- ?1 cutoff, ?2 batches a page.
DELETE FROM batches
WHERE id IN (
  SELECT page.id
  FROM (SELECT b.id, coalesce(b.item_ranges, '[]') AS ranges
        FROM batches AS b INDEXED BY batches_status
        WHERE b.status IN ('finished', 'cancelled') AND b.finished_at < ?1
          AND NOT EXISTS (SELECT 1 FROM cron_queue AS c INDEXED BY cron_queue_callback
                          WHERE c.batch_id = b.id AND c.kind = 'callback'
                            AND c.status IN ('pending', 'processing'))
          AND b.total <= b.legacy_items + coalesce((SELECT sum((r.value ->> 1) - (r.value ->> 0) + 1)
                                                    FROM json_each(b.item_ranges) AS r), 0)
        LIMIT ?2) AS page
  WHERE NOT EXISTS (SELECT 1 FROM json_each(page.ranges) AS r
                    JOIN cron_queue AS q ON q.id BETWEEN r.value ->> 0 AND r.value ->> 1
                    WHERE q.batch_id = page.id)
    AND NOT EXISTS (SELECT 1 FROM cron_queue AS q INDEXED BY cron_queue_legacy
                    WHERE q.batch_id = page.id AND q.legacy = 1)
    AND NOT EXISTS (SELECT 1 FROM cron_queue AS q INDEXED BY cron_queue_callback
                    WHERE q.batch_id = page.id AND q.kind = 'callback')
);
