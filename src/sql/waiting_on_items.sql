-- What holds each of a page's pending items now (GET /batches/{id}/items'
-- `waiting_on`), one row per item still pending: the reason (the order of
-- precedence and each reason's rule: waiting_selection.sql, which this statement
-- starts with) and what it names — the key, its items in flight and concurrency,
-- whether its rate is a learned one, the instant it ends (a backoff's run_after,
-- a pause's end, the next token) and the item's last error. Read only.
-- ?1 to ?5 as in waiting_selection.sql (?3 the page's pending item ids).
SELECT id, reason, last_error,
       CASE reason WHEN 'backoff' THEN run_after WHEN 'paused' THEN until
                   WHEN 'rate' THEN until END AS until,
       CASE WHEN reason IN ('paused', 'concurrency', 'rate') THEN key END AS key,
       CASE reason WHEN 'concurrency' THEN in_flight END AS in_flight,
       CASE reason WHEN 'concurrency' THEN concurrency END AS concurrency,
       CASE reason WHEN 'rate' THEN learned END AS learned,
       CASE reason WHEN 'turn' THEN (SELECT batches FROM ahead) END AS batches,
       CASE reason WHEN 'turn' THEN (SELECT priority FROM ahead) END AS priority
FROM reasons
ORDER BY id;
