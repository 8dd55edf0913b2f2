-- First statement of a schedule's fire (one batch() with mark_fill_page.sql,
-- fill_group_page.sql, fill_every_group_page.sql, advance_fill.sql and
-- advance_schedule.sql): the batch row, unless its key
-- exists (invariant 5: re-firing creates nothing) or the schedule was replaced or
-- deleted since the fire was planned (revision; created_at too, because a schedule
-- deleted and created again restarts at revision 1), or no active subject is in its
-- group ?8 (NULL: any group): a fire that matches nobody makes no batch, and the
-- schedule still advances (advance_schedule.sql). That check reads one index entry.
-- The statements after it act on batch ?1 only, so then they add nothing. Only
-- the key's existence makes it a no-op: an id another batch holds fails the
-- insert (UNIQUE) and the fire's batch() with it, so nothing acts on that other
-- batch; the fire fails on its own and its schedule's next try plans a fresh id
-- (create_batch.sql says why not ON CONFLICT (key) DO NOTHING).
-- The batch carries the schedule's on_finish (its completion callback), whose
-- delivery gets ?6 attempts, and its priority (of the revision planned, which the
-- WHERE checks).
-- ?1 fresh batch id, ?2 key (<schedule id>:<date or instant>), ?3 now,
-- ?4 schedule id, ?5 the schedule's revision when planned, ?6 MAX_ATTEMPTS,
-- ?7 the schedule's created_at when planned, ?8 the schedule's group (NULL: every group),
-- ?9 what the batch is filled from (`batches.fill`, JSON: core::schedule::fill), its
-- cursor starting before the first subject (''). Its claim cursor and lease window
-- (migrations 0014, 0015) start at the table's largest id (one seek).
INSERT INTO batches (id, key, status, created_at, schedule_id, on_finish,
                     callback_max_attempts, fill, fill_after, claim_after, lease_after, priority)
SELECT ?1, ?2, 'running', ?3, s.id, s.on_finish,
       CASE WHEN s.on_finish IS NOT NULL THEN ?6 END, ?9, '', m.id, m.id, s.priority
FROM schedules AS s, (SELECT coalesce(max(id), 0) AS id FROM cron_queue) AS m
WHERE s.id = ?4 AND s.revision = ?5 AND s.created_at = ?7 AND s.enabled = 1
  AND CASE WHEN ?8 IS NULL
           THEN EXISTS (SELECT 1 FROM subjects INDEXED BY subjects_zone WHERE active = 1)
           ELSE EXISTS (SELECT 1 FROM subjects INDEXED BY subjects_group_zone
                        WHERE active = 1 AND group_name = ?8)
      END
  AND NOT EXISTS (SELECT 1 FROM batches AS k WHERE k.key = ?2 AND k.id <> ?1);
