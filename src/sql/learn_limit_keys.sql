-- Learn the rates of the keys whose receiver refused (core::learn::is_refusal: a
-- 429, a retry the answer delayed) or whose announced budget ran out with a quota
-- per window (core::pace): every key such an item holds gets the learned state
-- of core::learn::learned_after, this statement's Rust twin, with its constants
-- (WINDOW_MS 5,000, IDLE_MS 3,600,000, the floor 1, GROWTH_X1024, HOLD_WINDOWS 4,
-- probe before/8, the ceiling of a set rate): a rate the receiver announced
-- (source 'headers'); else the rate kept when it changed less than a window ago
-- (a burst of refusals is one signal); else half the learned rate as grown by
-- the windows since (its 'before' the rate it cut); else, the first time (or
-- after the idle hour), the rate its receiver took, counted from the items
-- themselves: of those within 1,000 ids of the refused one that hold the key
-- and started in the last window, the ones completed (or completing in this
-- commit, ?3), over the time since the first of them started (at least a
-- second; at most 2,000 rows read by primary key, once per key per change,
-- only on a refusal); else, nothing taken, one start per wait asked (source
-- 'retry_after', the wait between 1 and 5 s). Also leaves
-- an ended pause (paused_until at least now): the claim's cursor and lease
-- windows stay careful while the learned rate may hold items back (migration
-- 0023). And while the learned rate is the one in force, empties its bucket:
-- no burst when the pause ends (the tokens the pause let gather would go out
-- at once into the same wall). One row per key per commit (GROUP BY); sent only
-- with a commit that carries a refusal or a spent budget with a quota, and only
-- while LEARN_LIMITS is on, so items that never meet either write nothing here. Runs in the commit's batch() before
-- commit_outcomes.sql; each item is fenced by its lease token.
-- An outcome with "keys" (a multi item's refused channels' host: keys) teaches
-- only those of its keys.
-- ?1 JSON array of {"id", "token", "keys"?, "refused"?, "rate"?, "refill"?, "wait"?}
-- (store::refusals_json: "refused" 1 for a refusal, "rate" an announced rate per
-- minute, "refill" the starts its budget's reset gives back, "wait" a refusal's
-- wait in ms), ?2 now (ms), ?3 JSON array of the ids
-- this commit completes.
WITH now AS (SELECT CAST(?2 AS INTEGER) AS t),
refused AS (
  SELECT k.value AS key, count(p.value ->> 'refused') AS n, min(q.id) AS near,
         min(p.value ->> 'rate') AS announced, max(p.value ->> 'wait') AS wait,
         min(p.value ->> 'refill') AS refill
  FROM json_each(?1) AS p
  JOIN cron_queue AS q ON q.id = p.value ->> 'id' AND q.lease_token = p.value ->> 'token',
       json_each(q.limits) AS k
  WHERE q.limits IS NOT NULL
    AND (p.value ->> 'keys' IS NULL OR k.value IN (SELECT value FROM json_each(p.value ->> 'keys')))
  GROUP BY k.value
),
known AS (
  SELECT r.key, r.n, r.near, r.announced, r.wait, r.refill, s.learned, s.learned_at, s.refusals,
         s.paused_until, s.learned_before, s.learned_from,
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
  SELECT k.*, k.alive AND (SELECT t FROM now) - k.learned_at < 5000 AS within,
         max(0, (SELECT t FROM now) - k.learned_at) / 5000 AS w
  FROM known AS k
),
grown AS (
  SELECT c.*, c.learned * json_extract(
           '[1024,1280,1600,2000,2500,3125,3906,4883,6104,7629,9537,11921,14901,18626,23283,29104,36380,45475,56843,71054,88818,111022,138778,173472,216840,271051,338813,423516,529396,661744,827181,1033976,1292470,1615587,2019484,2524355,3155444,3944305,4930381,6162976,7703720]',
           '$[' || min(40, c.w) || ']') / 1024 AS g
  FROM kept AS c
),
-- core::learn::at: the learned rate in force now (alive rows only).
current AS (
  SELECT c.*,
         min(coalesce(c.ceiling, 1000000000),
             CASE WHEN c.learned_before IS NULL THEN c.g
                  WHEN c.learned_from = 'headers' THEN min(c.g, c.learned_before)
                  ELSE min(c.g, c.learned_before + max(0, c.w - 4) * max(1, c.learned_before / 8))
             END) AS cur,
         (SELECT nullif(count(CASE WHEN (q.status = 'completed'
                                         AND q.completed_at >= (SELECT t FROM now) - 5000)
                                        OR q.id IN (SELECT value FROM json_each(?3))
                                   THEN 1 END), 0) * 60000
                 / max(1000, (SELECT t FROM now) - min(q.started_at))
          FROM cron_queue AS q, json_each(q.limits) AS k
          WHERE q.id > c.near - 1000 AND q.id < c.near + 1000
            AND q.started_at >= (SELECT t FROM now) - 5000
            AND q.limits IS NOT NULL AND k.value = c.key
            AND c.announced IS NULL AND NOT c.alive) AS taken
  FROM grown AS c
),
next AS (
  SELECT c.*, CASE WHEN c.announced IS NOT NULL THEN 'headers'
                   WHEN c.within THEN coalesce(c.learned_from, 'refusals')
                   WHEN c.alive OR c.taken IS NOT NULL THEN 'refusals'
                   ELSE 'retry_after' END AS source,
         -- Kept within a window as it is (the claim takes the set rate's min).
         CASE WHEN c.announced IS NULL AND c.within THEN c.learned
              ELSE min(coalesce(c.ceiling, 1000000000), max(1,
                CASE WHEN c.announced IS NOT NULL THEN min(1000000000, c.announced)
                     WHEN c.alive THEN c.cur / 2
                     WHEN c.taken IS NOT NULL THEN c.taken
                     ELSE 60000 / min(5000, max(1000, coalesce(c.wait, 5000)))
                END)) END AS rate
  FROM current AS c
),
fixed AS (
  SELECT c.*, CASE WHEN c.source = 'headers' OR (c.taken IS NOT NULL AND NOT c.within)
                   THEN c.rate
                   WHEN c.within THEN c.learned_before
                   WHEN c.alive THEN c.cur
                   END AS before
  FROM next AS c
)
INSERT INTO limit_state (key, tat, basis, paused_until, learned, learned_at, refused_at, refusals,
                         learned_before, learned_from)
SELECT c.key,
       -- An empty bucket at the end of the pause (or now): the learned rate
       -- starts with no burst after a refusal (core::learn::burst, ms × rate);
       -- an announced rate with one start at its reset when the reset gives
       -- any back ("refill"), not the whole refill: a burst of it meets the
       -- calls claimed ahead before the pause (measured on the IETF fake: 10
       -- refusals after its budget was spent with the whole quota, 1 with
       -- none). Only while the learned rate is the one in force (below a set
       -- rate; '' otherwise: a set rate's own state is left as it is).
       CASE WHEN c.ceiling IS NULL OR c.rate < c.ceiling
            THEN max(coalesce(c.paused_until, 0), (SELECT t FROM now)) * c.rate
                 + (max(1, c.rate / 60)
                    - CASE WHEN c.source = 'headers' AND c.refill > 0 THEN 1 ELSE 0 END)
                   * 60000
            ELSE 0 END,
       CASE WHEN c.ceiling IS NULL OR c.rate < c.ceiling THEN c.rate || '/60 learned' ELSE '' END,
       (SELECT t FROM now), c.rate,
       CASE WHEN c.within AND c.announced IS NULL THEN c.learned_at ELSE (SELECT t FROM now) END,
       (SELECT t FROM now),
       CASE WHEN c.alive THEN coalesce(c.refusals, 0) + c.n ELSE c.n END,
       c.before, c.source
FROM fixed AS c
WHERE true
ON CONFLICT (key) DO UPDATE
SET paused_until = max(coalesce(limit_state.paused_until, 0), excluded.paused_until),
    learned = excluded.learned, learned_at = excluded.learned_at,
    refused_at = excluded.refused_at, refusals = excluded.refusals,
    learned_before = excluded.learned_before, learned_from = excluded.learned_from,
    -- Starts already charged stay charged (items claimed ahead of their slot
    -- before this commit): never an earlier tat; one counted under another
    -- rate, carried over as the claim reads it (key_state.sql's `state`,
    -- core::limits::Gcra::state_of: its instant in the new rate's units, at
    -- most a second and a full bucket of it ahead).
    tat = CASE WHEN excluded.basis = '' THEN limit_state.tat
               WHEN excluded.basis = limit_state.basis THEN max(limit_state.tat, excluded.tat)
               WHEN CAST(substr(limit_state.basis, 1, instr(limit_state.basis, '/') - 1) AS INTEGER) > 0
               THEN max(excluded.tat,
                        min((limit_state.tat
                             + CAST(substr(limit_state.basis, 1, instr(limit_state.basis, '/') - 1) AS INTEGER) - 1)
                            / CAST(substr(limit_state.basis, 1, instr(limit_state.basis, '/') - 1) AS INTEGER)
                            * excluded.learned,
                            (excluded.refused_at + 1000) * excluded.learned
                            + max(1, excluded.learned / 60) * 60000))
               ELSE excluded.tat END,
    basis = CASE WHEN excluded.basis = '' THEN limit_state.basis ELSE excluded.basis END;
