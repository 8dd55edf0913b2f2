-- Learn the rates of the keys whose receiver refused (core::learn::is_refusal: a
-- 429, a retry the answer delayed): every key a refused item holds gets the
-- learned state of core::learn::refused, this statement's Rust twin, with its
-- constants (WINDOW_MS 5,000, IDLE_MS 3,600,000, the floor 1, step, the ceiling
-- of a set rate): half the learned rate as raised by the windows since its last
-- halving, kept when that was less than a window ago (a burst of refusals is one
-- signal); the first time (or after the idle hour) the rate its receiver took,
-- counted from the items themselves: of those within 1,000 ids of the refused
-- one that hold the key and started in the last window, the ones completed (or
-- completing in this commit, ?3), over the time since the first of them started
-- (at least a second; at most 2,000 rows read by primary key, once per key per
-- halving, only on a refusal). Also leaves
-- an ended pause (paused_until at least now): the claim's cursor and lease
-- windows stay careful while the learned rate may hold items back (migration
-- 0023). And while the learned rate is the one in force, empties its bucket:
-- no burst when the pause ends (the tokens the pause let gather would go out
-- at once into the same wall). One row per key per commit (GROUP BY); sent only with a commit that
-- carries a refusal, and only while LEARN_LIMITS is on, so items that never meet
-- a refusal write nothing here. Runs in the commit's batch() before
-- commit_outcomes.sql; each item is fenced by its lease token.
-- An outcome with "keys" (a multi item's refused channels' host: keys) teaches
-- only those of its keys.
-- ?1 JSON array of {"id", "token", "keys"?} (store::refusals_json), ?2 now (ms), ?3 JSON
-- array of the ids this commit completes.
WITH now AS (SELECT CAST(?2 AS INTEGER) AS t),
refused AS (
  SELECT k.value AS key, count(*) AS n, min(q.id) AS near
  FROM json_each(?1) AS p
  JOIN cron_queue AS q ON q.id = p.value ->> 'id' AND q.lease_token = p.value ->> 'token',
       json_each(q.limits) AS k
  WHERE q.limits IS NOT NULL
    AND (p.value ->> 'keys' IS NULL OR k.value IN (SELECT value FROM json_each(p.value ->> 'keys')))
  GROUP BY k.value
),
known AS (
  SELECT r.key, r.n, r.near, s.learned, s.learned_at, s.refusals, s.paused_until,
         coalesce(s.learned IS NOT NULL AND s.refused_at > (SELECT t FROM now) - 3600000, 0)
           AS alive,
         (SELECT max(1, l.rate * 60 / l.per_seconds) FROM limits AS l
          WHERE l.rate IS NOT NULL AND l.key = coalesce(
            (SELECT o.key FROM limits AS o WHERE o.key = r.key),
            (WITH colon (at) AS (SELECT instr(r.key, ':')
                             UNION ALL
                             SELECT at + instr(substr(r.key, at + 1), ':') FROM colon
                             WHERE instr(substr(r.key, at + 1), ':') > 0)
             SELECT p.key FROM colon JOIN limits AS p ON p.key = substr(r.key, 1, colon.at) || '*'
             WHERE colon.at > 0 AND colon.at < length(r.key)
             ORDER BY colon.at DESC
             LIMIT 1))) AS ceiling
  FROM refused AS r
  LEFT JOIN limit_state AS s ON s.key = r.key
),
kept AS (
  SELECT k.*, k.alive AND (SELECT t FROM now) - k.learned_at < 5000 AS within FROM known AS k
),
next AS (
  SELECT c.*,
       CASE WHEN c.within THEN c.learned
            ELSE min(coalesce(c.ceiling, 1000000000), max(1,
                   CASE WHEN c.alive
                        THEN min(coalesce(c.ceiling, 1000000000),
                                 c.learned + ((SELECT t FROM now) - c.learned_at) / 5000
                                             * max(1, min(60, c.learned / 4))) / 2
                        ELSE coalesce((SELECT count(CASE WHEN (q.status = 'completed'
                                                      AND q.completed_at >= (SELECT t FROM now) - 5000)
                                                     OR q.id IN (SELECT value FROM json_each(?3))
                                                THEN 1 END) * 60000
                                     / max(1000, (SELECT t FROM now) - min(q.started_at))
                              FROM cron_queue AS q, json_each(q.limits) AS k
                              WHERE q.id > c.near - 1000 AND q.id < c.near + 1000
                                AND q.started_at >= (SELECT t FROM now) - 5000
                                AND q.limits IS NOT NULL AND k.value = c.key), 0)
                   END))
       END AS rate
  FROM kept AS c
)
INSERT INTO limit_state (key, tat, basis, paused_until, learned, learned_at, refused_at, refusals)
SELECT c.key,
       -- An empty bucket at the end of the pause (or now): the learned rate
       -- starts with no burst after a refusal (core::learn::burst, ms × rate).
       -- Only while the learned rate is the one in force (below a set rate; ''
       -- otherwise: a set rate's own state is left as it is).
       CASE WHEN c.ceiling IS NULL OR c.rate < c.ceiling
            THEN max(coalesce(c.paused_until, 0), (SELECT t FROM now)) * c.rate
                 + max(1, c.rate / 60) * 60000
            ELSE 0 END,
       CASE WHEN c.ceiling IS NULL OR c.rate < c.ceiling THEN c.rate || '/60 learned' ELSE '' END,
       (SELECT t FROM now), c.rate,
       CASE WHEN c.within THEN c.learned_at ELSE (SELECT t FROM now) END,
       (SELECT t FROM now),
       CASE WHEN c.alive THEN coalesce(c.refusals, 0) + c.n ELSE c.n END
FROM next AS c
WHERE true
ON CONFLICT (key) DO UPDATE
SET paused_until = max(coalesce(limit_state.paused_until, 0), excluded.paused_until),
    learned = excluded.learned, learned_at = excluded.learned_at,
    refused_at = excluded.refused_at, refusals = excluded.refusals,
    tat = CASE WHEN excluded.basis = '' THEN limit_state.tat ELSE excluded.tat END,
    basis = CASE WHEN excluded.basis = '' THEN limit_state.basis ELSE excluded.basis END;
