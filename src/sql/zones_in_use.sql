-- The time zones of active subjects that `"timezone": "subject"` schedules read:
-- the distinct (group, zone) pairs of each group in the JSON array ?1, and, when ?2
-- is 1 (a schedule with no group), the distinct zones of every active subject,
-- with group_name NULL. Only the groups asked for are read, however many others
-- there are (one group per tenant: a narrow schedule must not read them all).
-- Skip scans: each step seeks the next zone with one min(), so the read is one
-- index entry per row returned (plus one per group, and one for the every-group
-- list), not one per subject (1,000,000 subjects in 3 zones: ~4 entries): a group's
-- zones on subjects_group_zone, every group's zones on subjects_zone (migration
-- 0009). SQLite has no skip-scan DISTINCT of its own here; the recursion spells it
-- out. Rows: at most (groups asked + 1) × the zones in use, and there are a few
-- hundred IANA zones.
-- ?1 JSON array of group names, ?2 1 to add every group's zones, else 0.
WITH RECURSIVE
  grp(g) AS (
    SELECT DISTINCT value FROM json_each(?1)
  ),
  zone(g, tz) AS (
    SELECT g, (SELECT min(timezone) FROM subjects INDEXED BY subjects_group_zone
               WHERE active = 1 AND group_name = grp.g)
    FROM grp
    UNION ALL
    SELECT g, (SELECT min(timezone) FROM subjects INDEXED BY subjects_group_zone
               WHERE active = 1 AND group_name = zone.g AND timezone > zone.tz)
    FROM zone
    WHERE tz IS NOT NULL
  ),
  any_zone(tz) AS (
    SELECT (SELECT min(timezone) FROM subjects INDEXED BY subjects_zone WHERE active = 1)
    WHERE ?2 = 1
    UNION ALL
    SELECT (SELECT min(timezone) FROM subjects INDEXED BY subjects_zone
            WHERE active = 1 AND timezone > any_zone.tz)
    FROM any_zone
    WHERE tz IS NOT NULL
  )
SELECT g AS group_name, tz AS timezone FROM zone WHERE tz IS NOT NULL
UNION ALL
SELECT NULL, tz FROM any_zone WHERE tz IS NOT NULL
ORDER BY 1, 2;
