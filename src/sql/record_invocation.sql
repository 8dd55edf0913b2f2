-- One summary row per scheduled invocation (never one per item; invariant 7 is
-- checked from these rows). ?1 is core::model::InvocationSummary as JSON: its keys
-- are the column names, its started_at RFC 3339 text, stored as Unix milliseconds;
-- per_batch (items each batch ended) is kept as JSON text for the timeline; its
-- invocation id (the Fanout-Invocation value) as text; a drainer's number and
-- place in its chain (NULL when absent: ticks, fixed drainers); its queue
-- operations (0 when absent). per_batch's "cost" shares are added to their
-- batches by the trigger invocations_charge_batches (migration 0026), in this
-- statement.
INSERT INTO invocations (invocation, trigger_kind, started_at, elapsed_ms, batch_ids, claimed, completed,
                         retried, failed, lost_leases, released, reaped, subrequests,
                         subrequest_budget, d1_statements, d1_rows_written, d1_rows_read,
                         stop_reason, per_batch, drainer, chain, queue_operations)
SELECT j ->> 'invocation', j ->> 'trigger',
       CAST(round((julianday(j ->> 'started_at') - 2440587.5) * 86400000.0) AS INTEGER),
       j ->> 'elapsed_ms', j -> 'batch_ids', j ->> 'claimed',
       j ->> 'completed', j ->> 'retried', j ->> 'failed', j ->> 'lost_leases', j ->> 'released',
       j ->> 'reaped',
       j ->> 'subrequests', j ->> 'subrequest_budget', j ->> 'd1_statements',
       j ->> 'd1_rows_written', j ->> 'd1_rows_read', j ->> 'stop_reason', coalesce(j -> 'per_batch', '{}'),
       j ->> 'drainer', j ->> 'chain', coalesce(j ->> 'queue_operations', 0)
FROM (SELECT json(?1) AS j);
