-- Fires and POST /batches over subjects fill their batch in bounded pages.
--
-- A batch over subjects used to be filled by one INSERT … SELECT over every
-- matching subject; over millions that one statement outlasts D1's 30 s query
-- limit and the batch can never be created. Now each statement enqueues at most a
-- page of subjects (sql/fill_batch_page.sql), in subject-id order, and the batch
-- remembers where it stands: `fill` is what it is filled from (the fire's group,
-- zone times, jitter and attempts, as JSON), `fill_after` the last subject id
-- enqueued ('' before the first page), NULL once filled. A batch still filling is
-- never marked finished (sql/finish_batches.sql); ticks continue its fill.
--
-- Costs: two nullable columns (no row rewritten; every existing batch is filled,
-- NULL), a partial index of the batches still filling (empty but while a fill
-- runs) and one more index entry per active subject (built by reading the
-- subjects once; written on a subject insert, 2 when its group or active flag
-- changes; nothing per item).
ALTER TABLE batches ADD COLUMN fill TEXT;
ALTER TABLE batches ADD COLUMN fill_after TEXT;

-- The batches still filling, oldest first: the ticks' continuation pages pick the
-- oldest (sql/fill_batch_page.sql, sql/advance_fill.sql) without reading the others.
CREATE INDEX batches_filling ON batches (created_at, id) WHERE fill_after IS NOT NULL;

-- A group's active subjects in id order: a page of a group's fill is a range seek
-- that starts after the cursor (subjects_group_zone orders a group by zone first).
CREATE INDEX subjects_group_id ON subjects (group_name, id) WHERE active = 1;
