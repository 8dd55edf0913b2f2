-- After a cancel page (cancel_pending_page.sql, same batch(), same ?1): move each
-- selected cancelled batch's claim cursor (migration 0014) up to just before its
-- first cursor item still pending, or to the end of its range when none is left,
-- so the next page reads none of the items this one cancelled. Reads from the old
-- cursor to that item: the page just cancelled, and the batch's items in flight.
-- Its lease window (migration 0015) moves up the same way, to just before its
-- first cursor item still pending or in flight, so it does not hold the items
-- cancelled either (in flight ones keep it until their commit moves it). Batches
-- whose cursor is at its end are not written.
-- ?1 batch id, or NULL for every cancelled batch that has not ended.
UPDATE batches
SET claim_after = coalesce((SELECT c.id - 1 FROM cron_queue AS c NOT INDEXED
                            WHERE c.id > batches.claim_after AND c.id <= batches.cursor_end
                              AND c.batch_id = batches.id AND c.status = 'pending'
                              AND c.run_after = 0
                            ORDER BY c.id LIMIT 1),
                           cursor_end),
    lease_after = coalesce((SELECT c.id - 1 FROM cron_queue AS c NOT INDEXED
                            WHERE c.id > batches.lease_after AND c.id <= batches.cursor_end
                              AND c.batch_id = batches.id AND c.run_after = 0
                              AND c.status IN ('pending', 'processing')
                            ORDER BY c.id LIMIT 1),
                           cursor_end)
WHERE id IN (SELECT id FROM batches INDEXED BY batches_status
             WHERE status = 'cancelled' AND finished_at IS NULL AND (?1 IS NULL OR id = ?1))
  AND claim_after < cursor_end;
