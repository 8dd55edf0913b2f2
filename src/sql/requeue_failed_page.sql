-- Dead-letter replay: move a page of batch ?1's failed items back to pending, due
-- at ?5, with a fresh allowance of attempts (max_attempts grows by ?6; attempt
-- keeps counting, so attempt <= max_attempts still holds, invariant 3) and the
-- last error kept. Counted by reopen_for_replay.sql, which runs right before it in
-- the same batch() with the same ?1..?4 and reopens the batch. Only into a running
-- or paused batch (a finished one is running again by then): a cancelled batch
-- gets nothing. Receipts (multi-channel items) are kept: a replay sends only the
-- channels not yet delivered. A failed completion callback (subject_id '') is
-- never in a page: '' is not after ?2. Returns the rows moved; the last subject_id
-- is where the next page starts.
-- ?1 batch id, ?2 subject_id to page after, ?3 substring of last_error or NULL,
-- ?4 page size, ?5 now, ?6 attempts to add (MAX_ATTEMPTS), ?7 JSON object kind →
-- attempts for kinds that declare their own (jobs::Policy): those add theirs.
UPDATE cron_queue
SET status = 'pending',
    run_after = ?5,
    max_attempts = max_attempts + coalesce(json_extract(?7, '$."' || kind || '"'), ?6),
    completed_at = NULL,
    -- A replay starts with no streak of refusals (one the reaper failed kept it).
    refused_since = NULL
WHERE id IN (
  SELECT id FROM cron_queue INDEXED BY cron_queue_failed
  WHERE batch_id = ?1 AND status = 'failed' AND subject_id > ?2
    AND (?3 IS NULL OR instr(last_error, ?3) > 0)
  ORDER BY subject_id
  LIMIT ?4
)
  AND EXISTS (SELECT 1 FROM batches AS b
              WHERE b.id = ?1 AND b.status IN ('running', 'paused'))
RETURNING id, subject_id;
