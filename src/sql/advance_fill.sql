-- After a page of a batch's fill (mark_fill_page.sql, then fill_group_page.sql or
-- fill_every_group_page.sql, same batch(), same ?1): the page's items are the ids
-- above the batch's page_mark up to the table's largest id (one statement inserted
-- them right after the mark, migration 0017), so two seeks give its range and
-- count, whatever its size: the first id above the mark (not always the mark + 1: AUTOINCREMENT skips the ids of
-- rows deleted at the top of the table) and the largest.
-- Count the page into `total`; record its range in `item_ranges` (extending the
-- last range when the page follows it directly, as the pages of one call do); move
-- the cursor to the page's last subject id (its last row: a page is inserted in
-- subject order), or to NULL (filled) when no active subject of the fill is left
-- after it, or when the batch was cancelled. So `total` is exact at every step and
-- final once `fill_after` is NULL; a batch is never marked finished before
-- (finish_batches.sql). A page due at once (run_after = 0) moves the batch's
-- cursor_end (migration 0014) to its last id; an empty page, or one of deferred
-- items, leaves it. Returns the batch.
-- ?1 batch id, or NULL for the oldest batch still filling.
UPDATE batches
SET total = total + coalesce(p.last - p.first + 1, 0),
    cursor_end = CASE WHEN p.first IS NOT NULL AND p.run_after = 0 THEN p.last ELSE cursor_end END,
    item_ranges = CASE
      WHEN p.first IS NULL THEN item_ranges
      WHEN item_ranges ->> '$[#-1][1]' = page_mark THEN json_set(item_ranges, '$[#-1][1]', p.last)
      ELSE json_insert(coalesce(item_ranges, '[]'), '$[#]', json_array(p.first, p.last))
    END,
    page_mark = coalesce(p.last, page_mark),
    fill_after = CASE
      WHEN status NOT IN ('running', 'paused') THEN NULL
      WHEN CASE WHEN fill ->> 'group' IS NULL
                THEN EXISTS (SELECT 1 FROM subjects AS s
                             WHERE s.active = 1 AND s.id > coalesce(p.subject_id, fill_after))
                ELSE EXISTS (SELECT 1 FROM subjects AS s INDEXED BY subjects_group_id
                             WHERE s.active = 1 AND s.group_name = batches.fill ->> 'group'
                               AND s.id > coalesce(p.subject_id, fill_after))
           END
      THEN coalesce(p.subject_id, fill_after)
    END
FROM (SELECT f.first, q.id AS last, q.subject_id, q.run_after
      FROM (SELECT (SELECT min(c.id) FROM cron_queue AS c WHERE c.id > b.page_mark) AS first
            FROM batches AS b
            WHERE b.id = coalesce(?1, (SELECT id FROM batches INDEXED BY batches_filling
                                       WHERE fill_after IS NOT NULL ORDER BY created_at, id
                                       LIMIT 1))) AS f
      LEFT JOIN cron_queue AS q
        ON f.first IS NOT NULL AND q.id = (SELECT max(id) FROM cron_queue)) AS p
WHERE id = coalesce(?1, (SELECT id FROM batches INDEXED BY batches_filling
                         WHERE fill_after IS NOT NULL ORDER BY created_at, id LIMIT 1))
  AND fill_after IS NOT NULL
RETURNING id, key, total, fill_after IS NOT NULL AS filling;
