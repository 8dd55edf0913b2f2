-- A page of a batch's items in subject_id order after ?2, optionally of one status
-- (?3 NULL = any). Failed items are listed by list_failed_items.sql instead:
-- filtering here would read every item of the batch to find a few failures.
--
-- There is no index by (batch, subject) (migration 0017): a batch's items are
-- inserted in subject order, a range of ids per insert (`batches.item_ranges`), so
-- within a batch id order is subject order. The first item after ?2 is found by a
-- binary search (by primary key) in the first range whose last item comes after
-- ?2, and the page walks the ranges from there, one row by primary key at a time,
-- until ?4 rows match: about log2(range) + the rows walked, whatever the batch's
-- size or place. Rows stored before migration 0017 (legacy) are walked in their
-- own index, in subject order, one seek a step; a batch has one kind or the other
-- (or both, when its fill crossed the migration), and the page merges both. The
-- batch's completion callback (subject_id '', migration 0007) is in no range and
-- never after ?2 ('' sorts before every subject id).
-- Each walk stops after ?5 rows (core::listing::ITEMS_WALKED_PER_PAGE), matching or
-- not, so a status few items have (a finished batch's `pending`) never reads the
-- whole batch in one statement: the walk's ?5-th row comes back with `cut` = 1
-- (and `listed` = 0 unless it matches), and the caller ends the page there and
-- answers it as the continuation (core::listing::items_page).
-- An item never claimed that was due at once (run_after = 0, migration 0014) shows
-- when it became due: its batch's fire instant, or its creation for explicit items.
-- ?1 batch id, ?2 subject_id to page after ('' for the first page), ?3 status or
-- NULL, ?4 page size, ?5 most rows each walk reads.
WITH RECURSIVE
b AS MATERIALIZED (
  SELECT coalesce(item_ranges, '[]') AS ranges, coalesce(fill ->> 'fire_at', created_at) AS due_at
  FROM batches WHERE id = ?1
),
-- Ranges are in subject order too: the first whose last row comes after ?2.
first_range AS MATERIALIZED (
  SELECT CAST(r.key AS INTEGER) AS k, r.value ->> 0 AS lo, r.value ->> 1 AS hi
  FROM b, json_each(b.ranges) AS r
  WHERE (SELECT q.subject_id FROM cron_queue AS q
         WHERE q.id BETWEEN r.value ->> 0 AND r.value ->> 1 ORDER BY q.id DESC LIMIT 1) > ?2
  ORDER BY r.key
  LIMIT 1
),
-- [lo, hi] holds the first row after ?2; each step reads the first row at or after
-- the middle (a range has no gaps but where a batch is being deleted).
search(lo, hi) AS (
  SELECT lo, hi FROM first_range
  UNION ALL
  SELECT CASE WHEN (SELECT q.subject_id FROM cron_queue AS q
                    WHERE q.id BETWEEN (s.lo + s.hi) / 2 AND s.hi ORDER BY q.id LIMIT 1) > ?2
              THEN s.lo ELSE (s.lo + s.hi) / 2 + 1 END,
         CASE WHEN (SELECT q.subject_id FROM cron_queue AS q
                    WHERE q.id BETWEEN (s.lo + s.hi) / 2 AND s.hi ORDER BY q.id LIMIT 1) > ?2
              THEN (s.lo + s.hi) / 2 ELSE s.hi END
  FROM search AS s
  WHERE s.lo < s.hi
),
-- The batch's ids from there, range after range, the n-th at most ?5; the caller
-- stops it at ?4 rows.
walk(id, k, n) AS (
  SELECT s.lo, f.k, 1 FROM search AS s, first_range AS f WHERE s.lo = s.hi
  UNION ALL
  SELECT CASE WHEN w.id < b.ranges ->> ('$[' || w.k || '][1]') THEN w.id + 1
              ELSE b.ranges ->> ('$[' || (w.k + 1) || '][0]') END,
         CASE WHEN w.id < b.ranges ->> ('$[' || w.k || '][1]') THEN w.k ELSE w.k + 1 END,
         w.n + 1
  FROM walk AS w, b
  WHERE w.n < ?5
    AND (w.id < b.ranges ->> ('$[' || w.k || '][1]') OR w.k + 1 < json_array_length(b.ranges))
),
-- The legacy rows' subjects after ?2 in order, one seek on their index a step, the
-- n-th at most ?5 (a batch without legacy rows: one seek that finds none).
legacy_walk(subject_id, n) AS (
  SELECT (SELECT min(q.subject_id) FROM cron_queue AS q INDEXED BY cron_queue_legacy
          WHERE q.legacy = 1 AND q.batch_id = ?1 AND q.subject_id > ?2), 1
  UNION ALL
  SELECT (SELECT min(q.subject_id) FROM cron_queue AS q INDEXED BY cron_queue_legacy
          WHERE q.legacy = 1 AND q.batch_id = ?1 AND q.subject_id > w.subject_id), w.n + 1
  FROM legacy_walk AS w
  WHERE w.subject_id IS NOT NULL AND w.n < ?5
)
SELECT p.id, p.subject_id, p.kind, p.status, p.attempt, p.max_attempts, p.last_error,
       CASE p.run_after WHEN 0 THEN (SELECT due_at FROM b) ELSE p.run_after END AS run_after,
       p.started_at, p.completed_at, p.receipts, p.limits,
       ?3 IS NULL OR p.status = ?3 AS listed, p.cut
FROM (
  -- Each walk's matching rows and its ?5-th row (cut), the first ?4 of them.
  SELECT * FROM (
    SELECT q.*, w.n = ?5 AS cut FROM walk AS w CROSS JOIN cron_queue AS q ON q.id = w.id
    WHERE q.batch_id = ?1 AND q.subject_id > ?2 AND (?3 IS NULL OR q.status = ?3 OR w.n = ?5)
    LIMIT ?4
  )
  UNION ALL
  SELECT * FROM (
    SELECT q.*, w.n = ?5 AS cut
    FROM legacy_walk AS w CROSS JOIN cron_queue AS q INDEXED BY cron_queue_legacy
      ON q.legacy = 1 AND q.batch_id = ?1 AND q.subject_id = w.subject_id
    WHERE ?3 IS NULL OR q.status = ?3 OR w.n = ?5
    LIMIT ?4
  )
) AS p
ORDER BY p.subject_id
LIMIT ?4;
