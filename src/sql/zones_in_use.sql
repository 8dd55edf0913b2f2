-- The distinct (group, time zone) pairs of active subjects, of group ?1 (NULL: of
-- every group), for `"timezone": "subject"` schedules. A skip scan on the partial
-- index subjects_group_zone: each step seeks the next group, or the next zone in a
-- group, with one min(); so it reads one entry per pair returned, not one per
-- subject (1,000,000 subjects in 3 zones: ~6 entries). SQLite has no skip-scan
-- DISTINCT of its own here; the recursion spells it out.
WITH RECURSIVE
  grp(g) AS (
    SELECT coalesce(?1, (SELECT min(group_name) FROM subjects INDEXED BY subjects_group_zone
                         WHERE active = 1))
    UNION ALL
    SELECT (SELECT min(group_name) FROM subjects INDEXED BY subjects_group_zone
            WHERE active = 1 AND group_name > grp.g)
    FROM grp
    WHERE ?1 IS NULL AND grp.g IS NOT NULL
  ),
  zone(g, tz) AS (
    SELECT g, (SELECT min(timezone) FROM subjects INDEXED BY subjects_group_zone
               WHERE active = 1 AND group_name = grp.g)
    FROM grp
    WHERE g IS NOT NULL
    UNION ALL
    SELECT g, (SELECT min(timezone) FROM subjects INDEXED BY subjects_group_zone
               WHERE active = 1 AND group_name = zone.g AND timezone > zone.tz)
    FROM zone
    WHERE tz IS NOT NULL
  )
SELECT g AS group_name, tz AS timezone
FROM zone
WHERE tz IS NOT NULL
ORDER BY g, tz;
