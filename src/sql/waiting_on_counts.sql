-- How many of a batch's pending items each reason holds now (GET /batches/{id}'s
-- `waiting_on`), and per key (its `waiting_keys`): the reasons of
-- waiting_selection.sql (which this statement starts with) over the batch's head,
-- ?3 NULL: at most ?4 entries of its due index and its cursor items among the ?4
-- ids above its claim cursor. One row per reason, split by key for a key's
-- reasons (paused, concurrency, rate: the key's state, the same for each of its
-- items) and for items in backoff on a paused key (their last error is the
-- receiver's word that paused it: a pause is not stored with its words). The
-- caller counts the pending items not read (the batch's counters less these).
-- Read only; rows read as without the split (only the grouping changes).
-- ?1 to ?5 as in waiting_selection.sql.
SELECT reason,
       CASE WHEN reason IN ('paused', 'concurrency', 'rate')
                 OR (reason = 'backoff' AND class = 1) THEN key END AS key,
       count(*) AS n,
       max(CASE reason WHEN 'paused' THEN until WHEN 'rate' THEN until END) AS until,
       max(CASE reason WHEN 'concurrency' THEN in_flight END) AS in_flight,
       max(CASE reason WHEN 'concurrency' THEN concurrency END) AS concurrency,
       max(CASE reason WHEN 'rate' THEN learned END) AS learned,
       max(CASE WHEN reason = 'backoff' AND class = 1 THEN last_error END) AS last_error
FROM reasons
GROUP BY 1, 2;
