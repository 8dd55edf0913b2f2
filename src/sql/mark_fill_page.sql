-- Before a page of a batch's fill (fill_group_page.sql or fill_every_group_page.sql,
-- then advance_fill.sql, same batch(), same ?1): note the table's largest id on the
-- batch the page will fill. The page's items are inserted right after, in one
-- statement, so they are the ids above the mark (migration 0017): the statement
-- after the page reads its range and count from the first id above the mark and
-- the largest id (two seeks) instead of reading the page.
-- It picks its batch as the page does (a batch that will insert nothing, paused or
-- cancelled, is marked too: its page is then empty).
-- ?1 batch id, or NULL for the oldest batch still filling.
UPDATE batches
SET page_mark = (SELECT coalesce(max(id), 0) FROM cron_queue)
WHERE id = coalesce(?1, (SELECT id FROM batches INDEXED BY batches_filling
                         WHERE fill_after IS NOT NULL ORDER BY created_at, id LIMIT 1))
  AND fill_after IS NOT NULL;
