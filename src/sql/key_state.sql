-- A rate key's state as a claim reads it (after key_rules.sql): its next start
-- (`tat`) in the units of the rate in force. Not a statement, a part of the WITH
-- clause of the claim's statements (before claim_room.sql) and of
-- waiting_keys.sql (src/sql/mod.rs joins the files). ?1 is now (ms), ?3 the
-- claim's token: the state its own charge wrote is read as it was before it
-- (`tat_before`). A statement with no claim of its own binds as ?3 what no
-- token equals (waiting_keys.sql: a JSON array of keys), so it reads the state
-- as stored.
state AS MATERIALIZED (
  SELECT g.key, CASE WHEN s.claim = ?3 THEN s.tat_before
                     WHEN s.basis = g.basis THEN s.tat
                     -- Either rate learned (a learned rate's step, or the switch
                     -- to or from a set rate as it grows or a refusal lowers it):
                     -- the same instant in the new rate's units, rounded up, at
                     -- most the look-ahead and a full bucket ahead
                     -- (core::limits::Gcra::state_of). A full burst would come on
                     -- top of the slots claimed ahead under the other rate.
                     WHEN (s.basis LIKE '% learned' OR g.basis LIKE '% learned')
                          AND CAST(substr(s.basis, 1, instr(s.basis, '/') - 1) AS INTEGER) > 0
                     THEN min((s.tat + CAST(substr(s.basis, 1, instr(s.basis, '/') - 1) AS INTEGER) - 1)
                              / CAST(substr(s.basis, 1, instr(s.basis, '/') - 1) AS INTEGER) * g.rate,
                              (CAST(?1 AS INTEGER) + 1000) * g.rate + g.burst * g.per_seconds * 1000)
                END AS tat
  FROM governed AS g LEFT JOIN limit_state AS s ON s.key = g.key
  WHERE g.rate IS NOT NULL
),
