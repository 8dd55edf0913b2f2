-- What a tick's drainers have to do (DRAINERS = "auto"): the due items a claim
-- would take now, counted up to ?2 (claim_selection.sql, which this statement
-- starts with: items held back by limits are not counted; nothing is charged or
-- written), and the drainer slots in use (migration 0022), so the tick starts
-- no more than MAX_DRAINERS at once.
-- ?1 now, ?2 cap of the count, ?3 a token no claim has (rate state read as it
-- is), ?4 '{}', ?5 candidates per batch (= ?2), ?6 1 (rate tokens counted).
SELECT (SELECT count(*) FROM next) AS due,
       (SELECT count(*) FROM drainer_slots WHERE expires_at > ?1) AS live;
