-- Enqueue the next page of a batch being filled from every group's subjects
-- (`batches.fill`'s "group" null; fill_group_page.sql, the statement before it,
-- does a fill of one group, and this one then seeks NULL and reads nothing): at
-- most ?2 active subjects after the batch's cursor `fill_after`, walking the
-- primary key from it, skipping inactive subjects. So one statement is bounded by
-- the page, whatever the number of subjects; the statement after it
-- (advance_fill.sql, same batch()) moves the cursor and the total,
-- so a page and its cursor commit together or not at all (a tick that dies between
-- pages loses and doubles nothing). Only into a running or paused batch (a
-- cancelled one stops filling).
-- The page is inserted in subject-id order, so its ids (one contiguous range: one
-- statement) are in subject order and follow the batch's earlier pages: within a
-- batch, id order is subject order (migration 0017; mark_fill_page.sql noted the
-- largest id before it, advance_fill.sql records the range). The scan's own order
-- gives it: one table, read in id order, so no sort (a sorter's rows count as
-- read on D1).
--
-- run_after = the subject's zone's local fire instant from the fill's "zone_times"
-- ({"Europe/Berlin": <ms>, ...}, looked up by key), or its "fire_at" for a zone not
-- in the map, plus jitter ((jitter_seed XOR "fire_seed") mod ("jitter_seconds" +
-- 1)) seconds, XOR spelled (a | b) - (a & b) (core::schedule::jitter::jitter_ms is
-- the Rust twin). A fill with no zone times and no jitter (a fixed zone, or POST
-- /batches over subjects) has every item due at once: run_after = 0, claimed by the
-- batch's cursor and in no index (migration 0014; advance_fill.sql sets
-- cursor_end). max_attempts = the fill's "attempts" for the subject's kind, else
-- its "max_attempts". limits = the subject's keys (its own and its kind's, merged
-- when the subject was written), copied like the payload. The batch's values are
-- constant subqueries, read once.
-- ?1 batch id, or NULL for the oldest batch still filling; ?2 page size.
WITH b AS MATERIALIZED (
  SELECT id, fill_after AS after, fill ->> 'group' AS grp, fill -> 'zone_times' AS zones,
         fill ->> 'fire_at' AS fire_at, fill ->> 'fire_seed' AS seed,
         fill ->> 'jitter_seconds' AS jitter, fill ->> 'max_attempts' AS max_attempts,
         coalesce(fill -> 'attempts', '{}') AS attempts,
         fill ->> 'jitter_seconds' = 0
           AND NOT EXISTS (SELECT 1 FROM json_each(fill -> 'zone_times')) AS at_once
  FROM batches
  WHERE id = coalesce(?1, (SELECT id FROM batches INDEXED BY batches_filling
                           WHERE fill_after IS NOT NULL ORDER BY created_at, id LIMIT 1))
    AND fill_after IS NOT NULL AND status IN ('running', 'paused')
)
INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after, limits)
SELECT (SELECT id FROM b), s.id, s.kind, s.payload,
       coalesce((SELECT attempts FROM b) ->> ('$."' || s.kind || '"'), (SELECT max_attempts FROM b)),
       CASE WHEN (SELECT at_once FROM b) THEN 0
            ELSE coalesce((SELECT zones FROM b) ->> ('$."' || s.timezone || '"'),
                          (SELECT fire_at FROM b))
                 + ((s.jitter_seed | (SELECT seed FROM b)) - (s.jitter_seed & (SELECT seed FROM b)))
                   % ((SELECT jitter FROM b) + 1) * 1000
       END,
       s.limits
FROM subjects AS s
WHERE s.active = 1 AND s.id > (SELECT CASE WHEN grp IS NULL THEN after END FROM b)
ORDER BY s.id
LIMIT ?2;
