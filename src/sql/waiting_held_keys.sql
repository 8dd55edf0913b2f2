-- What holds pending items, read per key (GET /batches/{id}/items' `waiting_on`,
-- GET /batches/{id}'s counts): not a statement of its own but the head of
-- waiting_keys.sql, before key_rules.sql (src/sql/mod.rs joins the three), so the
-- keys' rules are the claim's very text. `held`: the keys asked about (?3, each
-- once), read only while the claim reads keys at all (`force`, the block of
-- claim_selection.sql: with no limit and no pause a claim takes items whatever
-- their keys).
-- ?1 now (ms), ?2 batch id, ?3 JSON array of keys, ?4 a claim's size (CLAIM_CHUNK).
WITH
force AS MATERIALIZED (
  SELECT EXISTS (SELECT 1 FROM limits)
         OR EXISTS (SELECT 1 FROM limit_state WHERE paused_until IS NOT NULL) AS kept
),
held AS MATERIALIZED (
  SELECT NULL AS id, k.value AS key
  FROM json_each(?3) AS k
  WHERE (SELECT kept FROM force)
),
