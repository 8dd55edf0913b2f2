-- Charge the rate limits for the claim that follows in the same batch()
-- (claim_due_items.sql): the same selection (claim_selection.sql, which this
-- statement starts with), so each rate-limited key is charged exactly the items
-- the claim takes that hold it, once per claim per key, never once per item. Each
-- key's state row records the claim's token (?3) and the state before it, which
-- the claim reads back instead (so both statements see the same room). A
-- partitioned limit's members each get their own row. The first charge of a key
-- inserts its row; a state counted under another basis (rate/per_seconds) is
-- read as `state` reads it (key_state.sql; core::limits::Gcra::state_of, then
-- Gcra::charge, the Rust twins).
-- ?1 to ?6 as in claim_selection.sql (?6 is 1).
INSERT INTO limit_state (key, tat, basis, claim, tat_before)
SELECT g.key, max(coalesce(s.tat, 0), CAST(?1 AS INTEGER) * g.rate) + t.n * g.per_seconds * 1000, g.basis, ?3,
       s.tat
FROM taken AS t
JOIN governed AS g ON g.key = t.key AND g.rate IS NOT NULL
LEFT JOIN state AS s ON s.key = g.key
WHERE true
ON CONFLICT (key) DO UPDATE
SET tat = excluded.tat, basis = excluded.basis, claim = excluded.claim,
    tat_before = excluded.tat_before;
