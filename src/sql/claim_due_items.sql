-- The rest of the claim, after its start (claim_now.sql or claim_at_slots.sql,
-- which open its UPDATE and set `started_at`): claim the selection's items
-- (claim_selection.sql, which this statement starts with: what is due, in which
-- order, what the limits let through) in one atomic statement (invariant 1: no item is handed out twice). The attempt is counted
-- here, at claim, so a run that crashes still uses up an attempt (invariant 3).
-- Each row gets its own lease token, ?3 (random per claim) joined with the row id,
-- which fences every later write about it.
-- Cost, without limits: per claimable batch, the rows from its cursor to its
-- ?5-th cursor item (those in flight are read and skipped), at most ?5 due index
-- entries, ?2 of the callbacks index, and the sorts of the order (turns). With
-- limits, the candidates' keys, the limits and states of their keys, and the items
-- in flight (only while a governed key has a concurrency).
-- A cursor item claimed keeps run_after = 0 (migration 0015): it enters no index,
-- not even cron_queue_leased; the reaper finds it in its batch's lease window, and
-- its commit, a release or a reap gives it a real run_after.
-- Returns each item's keys (limits: a drain meeting a refusal gives back its
-- queued items holding one, core::drain), its receipts (multi-channel items, core::receipts: the run sends
-- only the channels not yet delivered), its dispatch's throws running
-- (given_back, migration 0022: core::drain tells a crashing child from a
-- refusal), when its streak of refusals began (refused_since, migration 0025:
-- core::retry::refused gives up past REFUSAL_GIVE_UP_SECONDS) and whether limits, and rate limits (a learned rate in force is one),
-- are defined now (constant
-- subqueries, read once): the claimer's next claim is shaped by them
-- (store::Claimed).
-- The same statement moves the cursor items the claim passed (`passed`, held below
-- a cursor item of their batch that is not held) to their batch's due instant: they stay
-- pending, unleased, and come back marked `claimed` = 0, which the store drops
-- (without a lease or a start: '' and 0, so the row decodes).
-- ?7 lease expiry; ?1 to ?6 as in claim_selection.sql.
    status = CASE WHEN act.claims THEN 'processing' ELSE cron_queue.status END,
    attempt = cron_queue.attempt + act.claims,
    lease_token = CASE WHEN act.claims THEN ?3 || '.' || cron_queue.id
                       ELSE cron_queue.lease_token END,
    lease_expires_at = CASE WHEN act.claims THEN ?7 ELSE cron_queue.lease_expires_at END,
    run_after = coalesce(act.run_after, cron_queue.run_after)
-- One row source for both (each name of the selection read once: a statement
-- that named `passed` in every column took SQLite ten times longer to prepare).
FROM (SELECT id, 1 AS claims, NULL AS run_after FROM next
      UNION ALL
      SELECT id, 0, run_after FROM passed) AS act
WHERE cron_queue.id = act.id AND cron_queue.status = 'pending'
RETURNING cron_queue.id AS item_id, coalesce(cron_queue.lease_token, '') AS lease_token,
          batch_id, subject_id, attempt, max_attempts, kind, payload, receipts, given_back,
          limits, coalesce(started_at, 0) AS start_at, refused_since,
          cron_queue.status = 'processing' AS claimed,
          (SELECT EXISTS (SELECT 1 FROM limits)
                  OR EXISTS (SELECT 1 FROM limit_state WHERE paused_until IS NOT NULL))
            AS limits_defined,
          (SELECT EXISTS (SELECT 1 FROM limits WHERE rate IS NOT NULL)
                  OR EXISTS (SELECT 1 FROM limit_state INDEXED BY limit_state_learned
                             WHERE refused_at > CAST(?1 AS INTEGER) - 3600000)) AS rates_defined;
