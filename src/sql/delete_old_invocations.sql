-- Retention, step 3: delete up to ?2 invocation summaries that started before ?1,
-- oldest first, read by the start-time index (an idle tick costs a seek).
-- ?1 cutoff, ?2 most rows per statement.
DELETE FROM invocations
WHERE id IN (
  SELECT id FROM invocations INDEXED BY invocations_started
  WHERE started_at < ?1
  ORDER BY started_at
  LIMIT ?2
);
