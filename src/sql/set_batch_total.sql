-- After a just-created batch's explicit items (enqueue_items.sql, same batch()):
-- they are the ids above its page mark (create_batch.sql noted the table's largest
-- id, and nothing else was inserted since in this transaction), one range in
-- subject order (migration 0017). So two seeks give its total, its one id range
-- and the end of its cursor range (migration 0014: every item is due at once),
-- without reading the items. A batch with no items keeps an empty cursor.
-- ?1 batch id.
UPDATE batches
SET total = m.last - page_mark,
    cursor_end = CASE WHEN m.last > page_mark THEN m.last ELSE 0 END,
    item_ranges = CASE WHEN m.last > page_mark THEN json_array(json_array(page_mark + 1, m.last)) END,
    page_mark = m.last
FROM (SELECT coalesce(max(id), 0) AS last FROM cron_queue) AS m
WHERE id = ?1;
