-- The `daily` schedule of 0002 reaches only subjects without a group (group_name
-- 'default', what a subject gets when PUT /subjects names none): a subject put in a
-- group belongs to the schedules of that group and no longer gets a noon-UTC
-- delivery on top. Only the row 0002 created and nobody replaced (group NULL,
-- revision 1) changes: an operator's own `daily` is theirs. The revision grows as a
-- PUT's would. `PUT /schedules/daily` without `group` restores every subject.
-- Cost: one row written (two index entries of schedules_due at most).
UPDATE schedules
SET group_name = 'default',
    revision = revision + 1,
    updated_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000
WHERE id = 'daily' AND group_name IS NULL AND revision = 1;
