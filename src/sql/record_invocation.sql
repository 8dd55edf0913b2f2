-- One summary row per scheduled invocation (never one per item). ?1 is the summary
-- as a JSON object with the column names as keys.
INSERT INTO invocations (trigger_kind, started_at, elapsed_ms, batch_ids, claimed, completed,
                         retried, failed, lost_leases, reaped, subrequests, subrequest_budget,
                         d1_statements, d1_rows_written, stop_reason)
SELECT j ->> 'trigger', j ->> 'started_at', j ->> 'elapsed_ms', j -> 'batch_ids', j ->> 'claimed',
       j ->> 'completed', j ->> 'retried', j ->> 'failed', j ->> 'lost_leases', j ->> 'reaped',
       j ->> 'subrequests', j ->> 'subrequest_budget', j ->> 'd1_statements',
       j ->> 'd1_rows_written', j ->> 'stop_reason'
FROM (SELECT json(?1) AS j);
