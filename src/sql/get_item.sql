-- One item and its batch's status, for POST /items/{id}/retry to decide on (by
-- primary key, two rows read). A completion callback's row is no item (not found).
-- ?1 item id.
SELECT q.id, q.batch_id, q.status, b.status AS batch_status
FROM cron_queue AS q
JOIN batches AS b ON b.id = q.batch_id
WHERE q.id = ?1 AND q.kind <> 'callback';
