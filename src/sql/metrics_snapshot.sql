-- Everything GET /metrics reports, in one statement and one row, each part a
-- bounded read (docs/api.md states the cost per scrape):
--   running batches' counters   the batches_running partial index (running batches only)
--   processing                  the cron_queue_leased partial index (items in flight with
--                               a real run_after only), each item's batch by primary key:
--                               a paused or cancelled batch's in-flight items finish, but
--                               it is not running; then each running batch's first
--                               attempts in flight (view first_attempts_in_flight: its
--                               lease window, migrations 0015 and 0016)
--   due                         running batches' entries of cron_queue_due (keyed by
--                               batch, then run_after), then their cursor items
--                               (run_after = 0, migration 0014: due since the batch's
--                               fire instant; read by primary key from each cursor,
--                               those in flight skipped), counted up to ?2 rows (LIMIT)
--   oldest_due                  each running batch's first entry of cron_queue_due, or
--                               its fire instant (explicit items: its creation) while
--                               a cursor item is pending (read from its cursor to the
--                               first one)
--   the last hour's summaries   invocations_started from ?3 (one row per invocation),
--                               read twice: sums, then counts by stop reason
--   dead_letters                failed items of every retained batch (running or not):
--                               the cron_queue_failed partial index (failed rows only),
--                               counted up to ?4 rows (LIMIT); a failed completion
--                               callback is read and skipped (one per batch at most)
-- ?1 now (ms), ?2 cap of the due count, ?3 start of the window (ms), ?4 cap of the
-- dead-letter count.
SELECT r.running_batches, r.total, r.completed, r.failed,
       (SELECT count(*) FROM cron_queue AS q INDEXED BY cron_queue_leased
        JOIN batches AS b ON b.id = q.batch_id
        WHERE q.status = 'processing' AND q.run_after > 0 AND q.kind <> 'callback'
          AND b.status = 'running') +
       (SELECT count(*) FROM batches AS b INDEXED BY batches_running
        JOIN first_attempts_in_flight AS f ON f.batch_id = b.id
        WHERE b.status = 'running') AS processing,
       (SELECT count(*) FROM (SELECT 1
                              FROM batches AS b INDEXED BY batches_running
                              JOIN cron_queue AS q INDEXED BY cron_queue_due ON q.batch_id = b.id
                              WHERE b.status = 'running' AND q.status = 'pending'
                                AND q.kind <> 'callback'
                                AND q.run_after > 0 AND q.run_after <= ?1
                              UNION ALL
                              SELECT 1
                              FROM batches AS b INDEXED BY batches_running
                              JOIN cron_queue AS q NOT INDEXED
                                ON q.id > b.claim_after AND q.id <= b.cursor_end
                              WHERE b.status = 'running' AND q.batch_id = b.id
                                AND q.status = 'pending' AND q.run_after = 0
                              LIMIT ?2)) AS due,
       (SELECT min(first_due)
        FROM (SELECT min(coalesce(indexed, at_once), coalesce(at_once, indexed)) AS first_due
              FROM (SELECT (SELECT min(q.run_after) FROM cron_queue AS q INDEXED BY cron_queue_due
                            WHERE q.batch_id = b.id AND q.status = 'pending'
                              AND q.kind <> 'callback' AND q.run_after > 0) AS indexed,
                           CASE WHEN EXISTS (SELECT 1 FROM cron_queue AS q NOT INDEXED
                                             WHERE q.id > b.claim_after AND q.id <= b.cursor_end
                                               AND q.batch_id = b.id AND q.status = 'pending'
                                               AND q.run_after = 0)
                                THEN coalesce(b.fill ->> 'fire_at', b.created_at) END AS at_once
                    FROM batches AS b INDEXED BY batches_running WHERE b.status = 'running'))
        WHERE first_due <= ?1) AS oldest_due,
       (SELECT count(*) FROM (SELECT 1 FROM cron_queue AS q INDEXED BY cron_queue_failed
                              WHERE q.status = 'failed' AND q.kind <> 'callback'
                              LIMIT ?4)) AS dead_letters,
       h.invocations, h.claimed, h.completed AS hour_completed, h.retried, h.failed AS hour_failed,
       h.lost_leases, h.released, h.reaped, h.subrequests, h.subrequests_max, h.subrequest_budget_max,
       h.d1_statements, h.d1_rows_written, h.d1_rows_read,
       (SELECT json_group_object(stop_reason, n)
        FROM (SELECT stop_reason, count(*) AS n
              FROM invocations INDEXED BY invocations_started
              WHERE started_at >= ?3 GROUP BY stop_reason)) AS stop_reasons
FROM (SELECT count(*) AS running_batches, coalesce(sum(total), 0) AS total,
             coalesce(sum(completed), 0) AS completed, coalesce(sum(failed), 0) AS failed
      FROM batches INDEXED BY batches_running WHERE status = 'running') AS r,
     (SELECT count(*) AS invocations, coalesce(sum(claimed), 0) AS claimed,
             coalesce(sum(completed), 0) AS completed, coalesce(sum(retried), 0) AS retried,
             coalesce(sum(failed), 0) AS failed, coalesce(sum(lost_leases), 0) AS lost_leases,
             coalesce(sum(released), 0) AS released,
             coalesce(sum(reaped), 0) AS reaped, coalesce(sum(subrequests), 0) AS subrequests,
             coalesce(max(subrequests), 0) AS subrequests_max,
             coalesce(max(subrequest_budget), 0) AS subrequest_budget_max,
             coalesce(sum(d1_statements), 0) AS d1_statements,
             coalesce(sum(d1_rows_written), 0) AS d1_rows_written,
             coalesce(sum(d1_rows_read), 0) AS d1_rows_read
      FROM invocations INDEXED BY invocations_started WHERE started_at >= ?3) AS h;
