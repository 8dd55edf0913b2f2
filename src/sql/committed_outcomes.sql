-- Which outcomes of a group commit are applied: rows that still carry the
-- commit's lease token and are no longer processing. Only the lease holder's own
-- commit moves a row out of processing and keeps its token (the reaper clears it,
-- a claim replaces it; invariant 2), so these were applied by this commit or by an
-- earlier attempt of it whose answer was lost. Runs in the same batch() right after
-- commit_outcomes.sql, when nothing fenced is left processing: the rows not
-- returned lost their lease. Reads the rows by primary key; writes nothing.
-- ?1 the same JSON array as commit_outcomes.sql (only "id" and "token" are read).
SELECT q.id
FROM json_each(?1) AS o
JOIN cron_queue AS q ON q.id = o.value ->> 'id'
WHERE q.lease_token = o.value ->> 'token'
  AND q.status <> 'processing';
