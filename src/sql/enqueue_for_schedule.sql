-- Fill a schedule's just-created batch ?1 from the active subjects of group ?7
-- (NULL: every group) in one statement, whatever their number. Matches nothing
-- unless batch ?1 exists (create_schedule_batch.sql, same batch()).
--
-- run_after = the subject's zone's local fire instant from the JSON map ?4
-- ({"Europe/Berlin": <ms>, ...}; `{}` unless the schedule runs on each subject's
-- time), or ?3, the fire instant, for a zone not in the map, so no subject is ever
-- left out; plus jitter: ((jitter_seed XOR ?5) mod (?6 + 1)) seconds, XOR spelled
-- (a | b) - (a & b) (core::schedule::jitter::jitter_ms is the Rust twin).
--
-- The group filter is a range on subjects_group_zone so that a group's fire reads
-- only that group's index entries: [?7, ?7] for a group, else everything from ''
-- to x'FF' (a byte no UTF-8 text contains, so above every group name). An
-- `?7 IS NULL OR group_name = ?7` would scan every subject for every group.
-- The map is MATERIALIZED so SQLite builds an automatic index on it: looking each
-- subject's zone up in json_each directly scans the map once per subject.
-- ?2 max_attempts.
WITH zone_time(timezone, at) AS MATERIALIZED (
  SELECT key, value FROM json_each(?4)
)
INSERT OR IGNORE INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after)
SELECT b.id, s.id, s.kind, s.payload, ?2,
       coalesce(z.at, ?3) + ((s.jitter_seed | ?5) - (s.jitter_seed & ?5)) % (?6 + 1) * 1000
FROM batches AS b
JOIN subjects AS s INDEXED BY subjects_group_zone
  ON s.active = 1
 AND s.group_name BETWEEN coalesce(?7, '') AND coalesce(?7, CAST(x'FF' AS TEXT))
LEFT JOIN zone_time AS z ON z.timezone = s.timezone
WHERE b.id = ?1;
