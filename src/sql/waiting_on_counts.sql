-- How many of a batch's pending items each reason holds now (GET /batches/{id}'s
-- `waiting_on`): the reasons of waiting_selection.sql (which this statement
-- starts with) over the batch's head, ?3 NULL: at most ?4 entries of its due
-- index and its cursor items among the ?4 ids above its claim cursor. The caller
-- counts the pending items not read (the batch's counters less these). Read only.
-- ?1 to ?5 as in waiting_selection.sql.
SELECT reason, count(*) AS n
FROM reasons
GROUP BY reason;
