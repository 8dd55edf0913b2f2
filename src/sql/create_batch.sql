-- Create a batch row unless its key exists (invariant 5: idempotent per key).
-- ?1 is a fresh id: the statements that follow in the same batch() only act on
-- ?1, so when the key already existed they change nothing.
INSERT OR IGNORE INTO batches (id, key, status, created_at)
VALUES (?1, ?2, 'running', ?3);
