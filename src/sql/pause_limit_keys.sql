-- Pause the keys of items whose receiver said "slow down" (a retry delayed by the
-- answer: 429 or 503 with Retry-After, a kind's ctx.retry_after): every key such
-- an item holds gets paused_until, the instant its own retry is due, so no item
-- holding it is claimed before then (claim_selection.sql), whoever claims. One
-- row per key per commit (GROUP BY), never one per item; sent only with a commit
-- that carries such a retry, so items that never meet a refusal write nothing
-- here. An answer that spent its receiver's announced budget (core::pace: nothing
-- remains) pauses its keys the same way, until the budget resets, refusal or not.
-- A pause never shortens one already set. A key without a rate state gets
-- a row without one (tat 0, basis '': a limit set later starts from a full
-- burst). Runs in the commit's batch() before commit_outcomes.sql; each item is
-- fenced by its lease token (a lost lease pauses nothing).
-- An outcome with "keys" (a multi item's refused channels' host: keys) pauses only
-- those of its keys. The pause keeps the word of the latest-ending one (its first
-- 200 characters; `max()` takes the bare column from its row, as SQLite
-- documents), which a later pause replaces only when it ends as late or later.
-- ?1 JSON array of {"id", "token", "until", "keys"?, "word"?}.
INSERT INTO limit_state (key, tat, basis, paused_until, paused_word)
SELECT k.value, 0, '', max(p.value ->> 'until'), substr(p.value ->> 'word', 1, 200)
FROM json_each(?1) AS p
JOIN cron_queue AS q ON q.id = p.value ->> 'id' AND q.lease_token = p.value ->> 'token',
     json_each(q.limits) AS k
WHERE q.limits IS NOT NULL
  AND (p.value ->> 'keys' IS NULL OR k.value IN (SELECT value FROM json_each(p.value ->> 'keys')))
GROUP BY k.value
ON CONFLICT (key) DO UPDATE
SET paused_word = CASE WHEN excluded.paused_until >= coalesce(limit_state.paused_until, 0)
                       THEN excluded.paused_word ELSE limit_state.paused_word END,
    paused_until = max(coalesce(limit_state.paused_until, 0), excluded.paused_until);
