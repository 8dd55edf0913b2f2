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
-- The same statement moves the cursor items the claim passed (`passed`, held while
-- a later item of their batch is taken) to their batch's due instant: they stay
-- pending, unleased, and come back marked `claimed` = 0, which the store drops
-- (without a lease or a start: '' and 0, so the row decodes).
-- ?7 lease expiry; ?1 to ?6 as in claim_selection.sql.
    status = CASE WHEN id IN (SELECT id FROM passed) THEN status ELSE 'processing' END,
    attempt = attempt + (id NOT IN (SELECT id FROM passed)),
    lease_token = CASE WHEN id IN (SELECT id FROM passed) THEN lease_token
                       ELSE ?3 || '.' || id END,
    lease_expires_at = CASE WHEN id IN (SELECT id FROM passed) THEN lease_expires_at ELSE ?7 END,
    run_after = coalesce((SELECT p.run_after FROM passed AS p WHERE p.id = cron_queue.id),
                         run_after)
WHERE (id IN (SELECT id FROM next) OR id IN (SELECT id FROM passed)) AND status = 'pending'
RETURNING id AS item_id, coalesce(lease_token, '') AS lease_token, batch_id, subject_id, attempt,
          max_attempts, kind, payload, receipts, given_back, limits,
          coalesce(started_at, 0) AS start_at, refused_since, status = 'processing' AS claimed,
          (SELECT EXISTS (SELECT 1 FROM limits)
                  OR EXISTS (SELECT 1 FROM limit_state WHERE paused_until IS NOT NULL))
            AS limits_defined,
          (SELECT EXISTS (SELECT 1 FROM limits WHERE rate IS NOT NULL)
                  OR EXISTS (SELECT 1 FROM limit_state INDEXED BY limit_state_learned
                             WHERE refused_at > CAST(?1 AS INTEGER) - 3600000)) AS rates_defined;
