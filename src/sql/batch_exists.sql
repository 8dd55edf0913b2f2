-- Whether batch ?1 exists: its row by primary key, nothing computed (a listing of
-- its items needs no more; get_batch.sql also counts its items in flight).
-- ?1 batch id.
SELECT 1 AS found FROM batches WHERE id = ?1;
