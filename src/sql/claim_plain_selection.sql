-- The claim's selection while no limit, pause or learned rate is in force (the
-- claimer's last claim said so, store::ClaimShape): what is due and in which order,
-- exactly as claim_selection.sql, without the key columns and the limit tables, so
-- the hot path costs what the claim cost before limits (docs/architecture/flow-control.md,
-- "The claim's cost with nothing in force"). claim_now.sql and claim_due_items.sql follow it.
-- A limit or a pause that came into force since the claimer's last claim makes it
-- select nothing (two index probes, `unlimited`); the store then claims again with
-- the full selection, which reads them: nothing starts past a new limit.
-- Candidates (`cursor`, `due`, `callbacks`) and their order (priority, turns,
-- run_after, id) as in claim_selection.sql, whose comments say why each is read
-- as it is. ?1 now, ?2 limit, ?3 token prefix, ?4 JSON object batch id → largest
-- id this claimer claimed there, ?5 candidates per batch; ?6 is not read (no
-- charge: nothing is rate-limited).
WITH claimable AS (
  SELECT id, coalesce(fill ->> 'fire_at', created_at) AS due_at, claim_after, cursor_end,
         priority
  FROM batches INDEXED BY batches_running WHERE status = 'running'
),
unlimited AS (
  SELECT NOT EXISTS (SELECT 1 FROM limits)
         AND NOT EXISTS (SELECT 1 FROM limit_state WHERE paused_until IS NOT NULL) AS yes
),
callbacks AS (
  SELECT c.id, c.batch_id, c.run_after,
         (SELECT b.priority FROM batches AS b WHERE b.id = c.batch_id) AS priority
  FROM cron_queue AS c INDEXED BY cron_queue_callbacks
  WHERE c.status = 'pending' AND c.kind = 'callback' AND c.run_after <= ?1
    AND c.attempt < c.max_attempts
    AND (SELECT b.finished_at FROM batches AS b WHERE b.id = c.batch_id) IS NOT NULL
  ORDER BY c.run_after, c.id
  LIMIT ?2
),
cursor AS (
  SELECT q.id, b.id AS batch_id, b.due_at AS run_after, b.priority
  FROM (SELECT id, due_at, cursor_end, priority,
               max(claim_after, coalesce(json_extract(?4, '$."' || id || '"'), 0)) AS after
        FROM claimable) AS b
  CROSS JOIN cron_queue AS q NOT INDEXED
    ON q.id > b.after
   AND q.id <= coalesce((SELECT c.id FROM cron_queue AS c NOT INDEXED
                         WHERE c.id > b.after AND c.id <= b.cursor_end
                           AND c.batch_id = b.id AND c.status = 'pending' AND c.run_after = 0
                           AND c.attempt < c.max_attempts
                         ORDER BY c.id
                         LIMIT 1 OFFSET ?5 - 1),
                        b.cursor_end)
  WHERE q.batch_id = b.id AND q.status = 'pending' AND q.run_after = 0
    AND q.attempt < q.max_attempts
),
due AS (
  SELECT q.id, q.batch_id, q.run_after, b.priority
  FROM claimable AS b, cron_queue AS q
  WHERE q.id IN (
    SELECT d.id FROM cron_queue AS d INDEXED BY cron_queue_due
    WHERE d.batch_id = b.id AND d.status = 'pending' AND d.kind <> 'callback'
      AND d.run_after > 0 AND d.run_after <= ?1 AND d.attempt < d.max_attempts
    ORDER BY d.run_after, d.id
    LIMIT ?5
  )
),
next AS (
  SELECT id
  FROM (SELECT u.*, row_number() OVER (PARTITION BY batch_id ORDER BY run_after, id) AS turn
        FROM (SELECT * FROM due UNION ALL SELECT * FROM cursor UNION ALL SELECT * FROM callbacks)
             AS u)
  WHERE (SELECT yes FROM unlimited)
  ORDER BY priority DESC, turn, run_after, id
  LIMIT ?2
),
-- Nothing is held while nothing is in force: no cursor item is passed
-- (claim_selection.sql).
passed (id, run_after) AS (SELECT NULL, NULL WHERE 0)
