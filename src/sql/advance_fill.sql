-- After a page of a batch's fill (fill_batch_page.sql, same batch(), same ?1):
-- count the page into `total` (the items after the old cursor: only fills insert
-- into a batch, in subject-id order, so they are exactly this page) and move the
-- cursor to the last subject id enqueued, or to NULL (filled) when no active
-- subject of the fill is left after it, or when the batch was cancelled. So
-- `total` is exact at every step and final once `fill_after` is NULL; a batch is
-- never marked finished before (finish_batches.sql). The cursor is read back from
-- the items themselves (max on UNIQUE (batch_id, subject_id)), so it can never
-- disagree with what was enqueued. A page due at once (run_after = 0) moves the
-- batch's cursor_end (migration 0014) to its last id: the page was the last insert
-- (same batch(), ids ascending), so that is the table's largest id, one seek; an
-- empty page, or one of deferred items, leaves it. Returns the batch.
-- ?1 batch id, or NULL for the oldest batch still filling.
UPDATE batches
SET total = total + (SELECT count(*) FROM cron_queue AS q
                     WHERE q.batch_id = batches.id AND q.subject_id > batches.fill_after),
    cursor_end = coalesce((SELECT q.id FROM cron_queue AS q
                           WHERE q.id = (SELECT max(id) FROM cron_queue)
                             AND q.batch_id = batches.id AND q.subject_id > batches.fill_after
                             AND q.run_after = 0),
                          cursor_end),
    fill_after = CASE
      WHEN status NOT IN ('running', 'paused') THEN NULL
      WHEN CASE WHEN fill ->> 'group' IS NULL
                THEN EXISTS (SELECT 1 FROM subjects AS s
                             WHERE s.active = 1 AND s.id > coalesce(
                               (SELECT max(q.subject_id) FROM cron_queue AS q
                                WHERE q.batch_id = batches.id AND q.subject_id > batches.fill_after),
                               batches.fill_after))
                ELSE EXISTS (SELECT 1 FROM subjects AS s INDEXED BY subjects_group_id
                             WHERE s.active = 1 AND s.group_name = batches.fill ->> 'group'
                               AND s.id > coalesce(
                                 (SELECT max(q.subject_id) FROM cron_queue AS q
                                  WHERE q.batch_id = batches.id AND q.subject_id > batches.fill_after),
                                 batches.fill_after))
           END
      THEN coalesce((SELECT max(q.subject_id) FROM cron_queue AS q
                     WHERE q.batch_id = batches.id AND q.subject_id > batches.fill_after),
                    fill_after)
    END
WHERE id = coalesce(?1, (SELECT id FROM batches INDEXED BY batches_filling
                         WHERE fill_after IS NOT NULL ORDER BY created_at, id LIMIT 1))
  AND fill_after IS NOT NULL
RETURNING id, key, total, fill_after IS NOT NULL AS filling;
