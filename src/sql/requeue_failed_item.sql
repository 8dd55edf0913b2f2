-- Dead-letter replay of one item: failed -> pending, due at ?2, max_attempts grown
-- by ?3, last error kept (see requeue_failed_page.sql). Counted by
-- reopen_for_item_replay.sql right before it in the same batch(). Only into a
-- running or paused batch, never a completion callback (it is re-armed by its
-- batch's next end). Receipts (multi-channel items) are kept: a replay sends only
-- the channels not yet delivered. Returns the id when it moved.
-- ?1 item id, ?2 now, ?3 attempts to add (MAX_ATTEMPTS), ?4 JSON object kind →
-- attempts for kinds that declare their own (jobs::Policy): those add theirs.
UPDATE cron_queue
SET status = 'pending',
    run_after = ?2,
    max_attempts = max_attempts + coalesce(json_extract(?4, '$."' || kind || '"'), ?3),
    completed_at = NULL,
    -- A replay starts with no streak of refusals (one the reaper failed kept it).
    refused_since = NULL
WHERE id = ?1 AND status = 'failed' AND kind <> 'callback'
  AND EXISTS (SELECT 1 FROM batches AS b
              WHERE b.id = cron_queue.batch_id AND b.status IN ('running', 'paused'))
RETURNING id;
