-- Whether a batch not created by schedule ?1 has a key starting with '<?1>:'
-- (an ad-hoc batch made before the schedule existed): then a new schedule ?1
-- could collide with its key. A range on the UNIQUE key index (':' + 1 = ';'),
-- reading the batches of that prefix. ?1 schedule id (contains no ':').
SELECT 1 AS used
FROM batches
WHERE key >= ?1 || ':' AND key < ?1 || ';'
  AND (schedule_id IS NULL OR schedule_id <> ?1)
LIMIT 1;
