-- The newest ?1 invocation summaries, newest first, each as one JSON object in the
-- form of core::model::Invocation (what record_invocation.sql stored, plus its id):
-- batch_ids and per_batch back as JSON, started_at back as RFC 3339 text with
-- milliseconds; invocation NULL for rows stored before it was; drainer and chain
-- NULL but for drainers of DRAINERS = "auto"; d1_rows_read NULL for rows stored
-- before migration 0024; queue_operations 0 for rows stored before 0026.
SELECT json_object(
         'id', id, 'invocation', invocation, 'trigger', trigger_kind,
         'started_at', strftime('%Y-%m-%dT%H:%M:%fZ', started_at / 1000.0, 'unixepoch'),
         'elapsed_ms', elapsed_ms, 'batch_ids', json(batch_ids), 'claimed', claimed,
         'completed', completed, 'retried', retried, 'failed', failed,
         'lost_leases', lost_leases, 'released', released, 'reaped', reaped,
         'subrequests', subrequests, 'subrequest_budget', subrequest_budget,
         'd1_statements', d1_statements, 'd1_rows_written', d1_rows_written,
         'd1_rows_read', d1_rows_read,
         'stop_reason', stop_reason, 'per_batch', json(per_batch),
         'drainer', drainer, 'chain', chain, 'queue_operations', queue_operations
       ) AS invocation
FROM invocations
ORDER BY id DESC
LIMIT ?1;
