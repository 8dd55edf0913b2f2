-- Create a batch row unless its key exists (invariant 5: idempotent per key).
-- ?1 is a fresh id: the statements that follow in the same batch() only act on
-- ?1, so when the key already existed they change nothing (an existing batch
-- keeps its own on_finish too). Only the key's existence makes it a no-op (one
-- seek on the key's index): an id another batch holds fails the insert (UNIQUE),
-- and with it the whole batch(), so nothing after it acts on that other batch;
-- the caller draws a fresh id. (INSERT OR IGNORE, or ON CONFLICT (key) DO
-- NOTHING, would swallow it: the second even when the key's batch holds ?1, as
-- every ad-hoc batch whose key is `adhoc:<its id>` does.)
-- ?2 key, ?3 now, ?4 on_finish as stored ({"url": …}, core::callback) or NULL,
-- ?5 the attempts its callback gets (MAX_ATTEMPTS), NULL without ?4,
-- ?6 what it is filled from (`batches.fill`, JSON: core::schedule::fill) for a batch
-- over subjects, its cursor then starting before the first subject (''); NULL for
-- explicit items (enqueued in the same batch(), nothing to fill later),
-- ?7 its priority (-10 to 10: core::requests::parse_priority).
-- Its claim cursor and lease window (migrations 0014, 0015) start at the table's
-- largest id (one seek): its items come after, so no claim reads an older row.
-- That id is its page mark too (migration 0017): explicit items, inserted next in
-- the same batch(), are the ids above it (set_batch_total.sql).
INSERT INTO batches (id, key, status, created_at, on_finish, callback_max_attempts,
                     fill, fill_after, claim_after, lease_after, page_mark, priority)
SELECT ?1, ?2, 'running', ?3, ?4, ?5, ?6, CASE WHEN ?6 IS NOT NULL THEN '' END, m.id, m.id, m.id,
       ?7
FROM (SELECT coalesce(max(id), 0) AS id FROM cron_queue) AS m
WHERE NOT EXISTS (SELECT 1 FROM batches AS k WHERE k.key = ?2 AND k.id <> ?1);
