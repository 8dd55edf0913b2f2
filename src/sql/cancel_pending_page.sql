-- Move one page of pending items of the cancelled batches to the terminal status
-- `cancelled` (retries and expired leases of a cancelled batch come back as
-- pending and are swept here too, so nothing loops). Bounded overall: the page is
-- ?2 pending items of all the selected batches together, batch by batch in id
-- order (batches_status yields the unended cancelled batches by id, so nothing is
-- sorted; each batch gives at most ?2 of its cursor items (run_after = 0, read
-- by primary key from its cursor, migration 0014) and ?2 of its due index
-- entries, and the LIMIT stops the walk). A tick (?1 NULL) thus
-- moves at most ?2 items however many batches are cancelled, and a million-item
-- cancel never holds D1 for long; a batch with more than a page pending holds the
-- sweep of the batches after it until it is swept. Counted by
-- count_cancelled_page.sql, which runs right before it in the same batch() with
-- the same ?1 and ?2 and the same FROM, WHERE, ORDER BY and LIMIT (keep them
-- equal): ORDER BY b.id fixes how many items of each batch the page holds (every
-- pending item of the batches before the last one, the rest of ?2 from the last),
-- whichever of a batch's items the walk takes, so the counts are exact.
-- advance_cancelled_cursors.sql, right after it, moves the batches' cursors past
-- what this page cancelled, so the next page does not read it again.
-- last_error keeps any earlier error and says why the item ended. An item with
-- receipts (multi-channel) fails its channels not delivered, as the reaper does for
-- an exhausted item (reap_expired_leases.sql): a cancelled item never runs again,
-- so a `pending` receipt would promise a delivery that never comes. Each keeps its
-- last error and says the batch was cancelled; delivered ones stay delivered.
-- ?1 batch id, or NULL for every cancelled batch that has not ended; ?2 page size
-- (items, over all the batches); ?3 now.
UPDATE cron_queue
SET status = 'cancelled',
    completed_at = ?3,
    last_error = CASE WHEN last_error IS NULL THEN 'batch cancelled'
                      ELSE last_error || '; batch cancelled' END,
    receipts = CASE WHEN receipts IS NOT NULL THEN (
      SELECT json_group_object(r.key, CASE WHEN r.value ->> 'status' = 'pending'
        THEN json_set(r.value, '$.status', 'failed', '$.error',
                      coalesce(r.value ->> 'error' || '; ', '') || 'batch cancelled')
        ELSE json(r.value) END)
      FROM json_each(cron_queue.receipts) AS r
    ) END
WHERE id IN (
  SELECT q.id
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
);
