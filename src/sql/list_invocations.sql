-- The newest invocation summaries.
SELECT id, trigger_kind AS "trigger", started_at, elapsed_ms, batch_ids, claimed, completed,
       retried, failed, lost_leases, reaped, subrequests, subrequest_budget, d1_statements,
       d1_rows_written, stop_reason
FROM invocations
ORDER BY id DESC
LIMIT ?1;
