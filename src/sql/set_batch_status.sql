-- Pause, resume or cancel batch ?1: move it from status ?2 to ?3, a compare-and-set
-- (core::control decided the move from the status it read). A request that raced
-- another change (a tick finishing the batch, another request) changes nothing
-- here and decides again from what it reads next. Cancelling is O(1) here: claims
-- skip the batch from this write on; its pending items are swept in pages
-- (cancel_pending_page.sql). Returns the id when the move applied.
-- ?1 batch id, ?2 expected status, ?3 new status.
UPDATE batches
SET status = ?3
WHERE id = ?1 AND status = ?2
RETURNING id;
