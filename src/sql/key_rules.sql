-- A key's rules, shared by the claim (claim_selection.sql) and by what says why an
-- item waits (waiting_held_keys.sql): not a statement, a part of their WITH
-- clause (src/sql/mod.rs joins the files), after a `held` (id, key) of the items
-- read. `governed`: each held key's limit (its own, else the longest partition
-- `prefix:*`, probed by primary key once per colon of the key), its pause, its
-- learned rate in force. `in_flight`: its items in flight, counted from the items
-- (read only while a governed key has a concurrency). ?1 is now (ms).
governed AS MATERIALIZED (
  SELECT key, concurrency, paused_until,
         CASE WHEN by_learned THEN learned ELSE rate END AS rate,
         CASE WHEN by_learned THEN 60 ELSE per_seconds END AS per_seconds,
         -- core::learn::burst_under: a second of the learned rate, never more than
         -- a set limit's own burst (a learned rate just under a set one would
         -- otherwise raise the burst the receiver was set to take).
         CASE WHEN by_learned THEN max(1, min(learned / 60, coalesce(burst, learned / 60)))
              ELSE burst END AS burst,
         CASE WHEN by_learned THEN learned || '/60 learned' ELSE rate || '/' || per_seconds END
           AS basis
  FROM (SELECT *, learned IS NOT NULL AND (rate IS NULL OR learned * per_seconds < rate * 60)
                    AS by_learned
        FROM (SELECT k.key, l.key AS limit_key, l.rate, l.per_seconds, l.burst, l.concurrency,
                     (SELECT s.paused_until FROM limit_state AS s
                      WHERE s.key = k.key AND s.paused_until > CAST(?1 AS INTEGER))
                       AS paused_until,
                     -- core::learn::at: × 5/4 a window (GROWTH_X1024, in
                     -- integers) up to learned_before, held 4 windows, then an
                     -- eighth of it more a window ('headers': never above it).
                     -- max(0, …): a claimer's clock behind the writer's never
                     -- lowers the rate below what was learned.
                     (SELECT CASE WHEN g.before IS NULL THEN g.grown
                                  WHEN g.source = 'headers' THEN min(g.grown, g.before)
                                  ELSE min(g.grown, g.before + max(0, g.w - 4) * max(1, g.before / 8))
                             END
                      FROM (SELECT s.learned_before AS before, s.learned_from AS source, s.w,
                                   s.learned * json_extract(
                                     '[1024,1280,1600,2000,2500,3125,3906,4883,6104,7629,9537,11921,14901,18626,23283,29104,36380,45475,56843,71054,88818,111022,138778,173472,216840,271051,338813,423516,529396,661744,827181,1033976,1292470,1615587,2019484,2524355,3155444,3944305,4930381,6162976,7703720]',
                                     '$[' || min(40, s.w) || ']') / 1024 AS grown
                            FROM (SELECT learned, learned_before, learned_from,
                                         max(0, CAST(?1 AS INTEGER) - learned_at) / 5000 AS w
                                  FROM limit_state
                                  WHERE key = k.key AND learned IS NOT NULL
                                    AND refused_at > CAST(?1 AS INTEGER) - 3600000) AS s) AS g)
                       AS learned
              FROM (SELECT DISTINCT key FROM held) AS k
              LEFT JOIN limits AS l ON l.key = coalesce(
                (SELECT o.key FROM limits AS o WHERE o.key = k.key),
                (WITH colon (at) AS (SELECT instr(k.key, ':')
                                 UNION ALL
                                 SELECT at + instr(substr(k.key, at + 1), ':') FROM colon
                                 WHERE instr(substr(k.key, at + 1), ':') > 0)
                 SELECT p.key FROM colon JOIN limits AS p ON p.key = substr(k.key, 1, colon.at) || '*'
                 WHERE colon.at > 0 AND colon.at < length(k.key)
                 ORDER BY colon.at DESC
                 LIMIT 1))))
  WHERE limit_key IS NOT NULL OR paused_until IS NOT NULL OR learned IS NOT NULL
),
in_flight AS MATERIALIZED (
  SELECT k.value AS key, count(*) AS n
  FROM (SELECT l.limits FROM cron_queue AS l INDEXED BY cron_queue_leased
        WHERE EXISTS (SELECT 1 FROM governed WHERE concurrency IS NOT NULL)
          AND l.status = 'processing' AND l.run_after > 0 AND l.limits IS NOT NULL
        UNION ALL
        SELECT f.limits FROM batches AS b INDEXED BY batches_status
        JOIN first_attempts_in_flight AS f ON f.batch_id = b.id
        WHERE EXISTS (SELECT 1 FROM governed WHERE concurrency IS NOT NULL)
          AND b.status IN ('running', 'paused', 'cancelled') AND b.finished_at IS NULL
          AND f.limits IS NOT NULL) AS w,
       json_each(w.limits) AS k
  WHERE k.value IN (SELECT key FROM governed WHERE concurrency IS NOT NULL)
  GROUP BY k.value
),
