-- Count the items the reaper is about to fail (out of attempts) into their
-- batches' `failed`: one written row per batch per reap, instead of a trigger's
-- row per item (invariant 10). Runs in the same batch() right BEFORE
-- reap_expired_leases.sql and reads the same page of expired leases in the same
-- order (the leased index and the lease windows, as that statement reads them),
-- so it counts exactly the rows that statement fails. Completion
-- callbacks are no item of their batch: never counted.
-- ?1 now, ?2 page size (both as reap_expired_leases.sql).
UPDATE batches
SET failed = batches.failed + d.n
FROM (
  SELECT page.batch_id, count(*) AS n
  FROM (
    SELECT * FROM (SELECT id, lease_expires_at, batch_id, attempt, max_attempts, kind
                   FROM cron_queue INDEXED BY cron_queue_leased
                   WHERE status = 'processing' AND run_after > 0 AND lease_expires_at <= ?1
                   ORDER BY lease_expires_at, id LIMIT ?2)
    UNION ALL
    SELECT * FROM (SELECT f.id, f.lease_expires_at, f.batch_id, f.attempt, f.max_attempts, f.kind
                   FROM batches AS b INDEXED BY batches_status
                   JOIN first_attempts_in_flight AS f ON f.batch_id = b.id
                   WHERE b.status IN ('running', 'cancelled') AND b.finished_at IS NULL
                     AND f.lease_expires_at <= ?1
                   ORDER BY f.lease_expires_at, f.id LIMIT ?2)
    ORDER BY 2, 1
    LIMIT ?2
  ) AS page
  WHERE page.attempt >= page.max_attempts AND page.kind <> 'callback'
  GROUP BY page.batch_id
) AS d
WHERE batches.id = d.batch_id;
