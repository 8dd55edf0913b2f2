-- Delete one schedule (DELETE /schedules/{id}). Its batches keep running: they are
-- ordinary batches that only remember schedule_id. ?1 id.
DELETE FROM schedules WHERE id = ?1 RETURNING id;
