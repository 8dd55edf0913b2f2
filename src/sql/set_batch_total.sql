-- After a just-created batch's explicit items (enqueue_items.sql, same batch()):
-- they are the ids above its page mark (create_batch.sql noted the table's largest
-- id, and nothing else was inserted since in this transaction), one range in
-- subject order (migration 0017). The first of them is the first id above the mark
-- (not always the mark + 1: AUTOINCREMENT skips the ids of rows deleted at the top
-- of the table), the last the table's largest: two seeks give its total, its one
-- id range and the end of its cursor range (migration 0014: every item is due at
-- once), without reading the items. A batch with no items keeps an empty cursor.
-- ?1 batch id.
UPDATE batches
SET total = coalesce(p.last - p.first + 1, 0),
    cursor_end = coalesce(p.last, 0),
    item_ranges = CASE WHEN p.first IS NOT NULL THEN json_array(json_array(p.first, p.last)) END,
    page_mark = coalesce(p.last, page_mark)
FROM (SELECT f.first, CASE WHEN f.first IS NOT NULL
                           THEN (SELECT max(id) FROM cron_queue) END AS last
      FROM (SELECT (SELECT min(q.id) FROM cron_queue AS q WHERE q.id > b.page_mark) AS first
            FROM batches AS b WHERE b.id = ?1) AS f) AS p
WHERE id = ?1;
