-- When an item's streak of refusals by its receiver began (ms; NULL when its
-- last run was not refused): a refusal spends no attempt (core::retry::refused),
-- so this is what fails an item refused for longer than REFUSAL_GIVE_UP_SECONDS.
-- Written by the group commit in the row it writes anyway (a refusal sets it, a
-- release keeps it, any other outcome clears it) and returned by the claim: no
-- row more, and NULL on the happy path. ADD COLUMN is O(1) in SQLite: no row is
-- rewritten.

ALTER TABLE cron_queue ADD COLUMN refused_since INTEGER;
