-- D1 rows read and written per batch source, over the batches created at or
-- after ?1 (ms): a schedule's id, or 'adhoc' for POST /batches (schedule_id
-- NULL). Each batch's counters are its invocations' shares (migration 0026), so
-- this reads one row per batch of the window by the batches_created index,
-- never an item or a summary. At most ?2 sources, in name order.
SELECT coalesce(schedule_id, 'adhoc') AS source,
       sum(cost_d1_rows_read) AS d1_rows_read,
       sum(cost_d1_rows_written) AS d1_rows_written
FROM batches INDEXED BY batches_created
WHERE created_at >= ?1
GROUP BY coalesce(schedule_id, 'adhoc')
ORDER BY source
LIMIT ?2;
