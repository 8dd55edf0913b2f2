-- Count the next cancel page into batches.cancelled, per batch. Runs in the same
-- batch() right before cancel_pending_page.sql, which moves that page: both select
-- ?2 pending items of the same batches, batch by batch in id order (the same FROM,
-- WHERE, ORDER BY and LIMIT: keep them equal); ORDER BY b.id fixes how many items
-- of each batch the page holds, so the counter stays exact without
-- a write per item (the group commit and the reaper count only moves out of
-- processing). Bounded overall: reads at most ?2 items per batch walked, each part
-- read as cancel_pending_page.sql says,
-- however many batches are cancelled, grouped once in memory (a temporary B-tree
-- of at most ?2 rows). Batches with nothing in the page are not written.
-- ?1 batch id, or NULL for every cancelled batch that has not ended; ?2 page size
-- (items, over all the batches).
UPDATE batches
SET cancelled = cancelled + page.n
FROM (
  SELECT batch_id, count(*) AS n
  FROM (
    SELECT q.batch_id
    FROM batches AS b INDEXED BY batches_status, cron_queue AS q
    WHERE b.status = 'cancelled' AND b.finished_at IS NULL AND (?1 IS NULL OR b.id = ?1)
      AND q.id IN (
        SELECT * FROM (SELECT c.id FROM cron_queue AS c NOT INDEXED
                       WHERE c.id > b.claim_after AND c.id <= b.cursor_end
                         AND c.batch_id = b.id AND c.status = 'pending' AND c.run_after = 0
                       ORDER BY c.id LIMIT ?2)
        UNION ALL
        SELECT * FROM (SELECT d.id FROM cron_queue AS d INDEXED BY cron_queue_due
                       WHERE d.batch_id = b.id AND d.status = 'pending' AND d.kind <> 'callback'
                         AND d.run_after > 0
                       LIMIT ?2))
    ORDER BY b.id
    LIMIT ?2
  )
  GROUP BY batch_id
) AS page
WHERE batches.id = page.batch_id;
