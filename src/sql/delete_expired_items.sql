-- Retention, step 1: delete up to ?2 items of batches that ended (finished, or
-- cancelled and ended) before ?1. Reads the ended batches by (status,
-- finished_at) and their items by (batch_id, subject_id): nothing of a recent or
-- unfinished batch is read, so an idle tick costs a seek. Deleting items does not
-- touch the batch counters (no trigger on DELETE): the batch row keeps its
-- figures until step 2 deletes it.
-- A batch whose completion callback still waits for its delivery (pending or in
-- flight, migration 0007) is kept whole until it is delivered or has failed:
-- retention never loses a callback (one seek per ended batch).
-- ?1 cutoff (now - RETENTION_DAYS), ?2 most rows per statement.
DELETE FROM cron_queue
WHERE id IN (
  SELECT q.id
  FROM batches AS b INDEXED BY batches_status
  JOIN cron_queue AS q ON q.batch_id = b.id
  WHERE b.status IN ('finished', 'cancelled') AND b.finished_at < ?1
    AND NOT EXISTS (SELECT 1 FROM cron_queue AS c
                    WHERE c.batch_id = b.id AND c.subject_id = ''
                      AND c.status IN ('pending', 'processing'))
  LIMIT ?2
);
