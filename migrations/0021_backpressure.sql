-- Backpressure: a receiver's "slow down" pauses the keys of the item it answered.
--
--   a pause          limit_state.paused_until per key: no item holding the key is
--                    claimed before it. Written by the commit that records a retry
--                    the receiver delayed (a 429 or 503 with Retry-After, a kind's
--                    ctx.retry_after), once per commit per key
--                    (sql/pause_limit_keys.sql). A key paused without a limit of
--                    its own gets a row with no rate state (tat 0, basis '': a
--                    limit set on it later starts from a full burst).
--   while paused     a claim may hold an item back below one it claims, as a limit
--                    does: the lease windows reach 127 pending items further and
--                    the claim cursor stops before the first pending item while
--                    any pause row is kept (not only while one is in force, since
--                    an item held by a pause that just ended may still be pending
--                    below a claimed one). The tick's reaper clears pauses that
--                    ended an hour ago (sql/clear_ended_pauses.sql), longer than
--                    any lease, so no commit can then pass a held item.
--   implicit keys    a callback holds the host: key of its on_finish URL (the
--                    trigger below); webhook, multi and service items hold theirs
--                    from their kind (Job::limit_keys), copied like any key.
-- ADD COLUMN is O(1) in SQLite: no row is rewritten.

ALTER TABLE limit_state ADD COLUMN paused_until INTEGER;

-- Pauses kept: whether any exists (the claim, the cursor, the lease windows ask)
-- and the reaper's clear read this index only.
CREATE INDEX limit_state_paused ON limit_state (paused_until) WHERE paused_until IS NOT NULL;

DROP VIEW batches_live;
DROP VIEW first_attempts_in_flight;
DROP VIEW lease_windows;

CREATE VIEW lease_windows AS
SELECT b.id AS batch_id, b.lease_after,
       coalesce((SELECT f.id FROM cron_queue AS f NOT INDEXED
                 WHERE f.id > max(b.lease_after, b.claim_after) AND f.id <= b.cursor_end
                   AND f.batch_id = b.id AND f.status = 'pending' AND f.run_after = 0
                 ORDER BY f.id
                 LIMIT 1 OFFSET (SELECT CASE WHEN EXISTS (SELECT 1 FROM limits)
                                              OR EXISTS (SELECT 1 FROM limit_state
                                                         WHERE paused_until IS NOT NULL)
                                             THEN 127 ELSE 0 END)),
                b.cursor_end + 1) AS unclaimed
FROM batches AS b;

CREATE VIEW first_attempts_in_flight AS
SELECT w.batch_id, q.id, q.lease_expires_at, q.attempt, q.max_attempts, q.kind, q.limits
FROM lease_windows AS w
JOIN cron_queue AS q NOT INDEXED ON q.id > w.lease_after AND q.id < w.unclaimed
WHERE q.batch_id = w.batch_id AND q.status = 'processing' AND q.run_after = 0;

CREATE VIEW batches_live AS
SELECT b.*,
       (SELECT count(*) FROM cron_queue AS q INDEXED BY cron_queue_leased
        WHERE q.status = 'processing' AND q.run_after > 0 AND q.batch_id = b.id
          AND q.kind <> 'callback') +
       CASE WHEN b.finished_at IS NULL
            THEN (SELECT count(*) FROM first_attempts_in_flight AS f WHERE f.batch_id = b.id)
            ELSE 0 END AS processing
FROM batches AS b;

-- The trigger of migration 0019, its row now holding the host: key of its URL
-- (core::limits::host_key: the hostname in lower case, without port; none when
-- that is not a key, e.g. an IPv6 address or a name that is not ASCII).
DROP TRIGGER batches_enqueue_callback;

CREATE TRIGGER batches_enqueue_callback
AFTER UPDATE OF finished_at ON batches
WHEN OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL AND NEW.on_finish IS NOT NULL
BEGIN
  INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after, limits)
  SELECT NEW.id, '', 'callback',
         json_object('url', NEW.on_finish ->> 'url',
                     'signing_secret', NEW.on_finish ->> 'signing_secret',
                     'summary', json_object('batch_id', NEW.id, 'key', NEW.key,
                                            'status', NEW.status, 'total', NEW.total,
                                            'completed', NEW.completed, 'failed', NEW.failed,
                                            'cancelled', NEW.cancelled,
                                            'created_at', NEW.created_at,
                                            'finished_at', NEW.finished_at)),
         NEW.callback_max_attempts, NEW.finished_at,
         CASE WHEN h.host <> '' AND length(h.host) <= 123
                   AND h.host NOT GLOB '*[^a-z0-9._@-]*'
              THEN json_array('host:' || h.host) END
  FROM (SELECT lower(substr(r.rest, 1,
                            instr(replace(replace(replace(r.rest, '?', '/'), '#', '/'), ':', '/')
                                  || '/', '/') - 1)) AS host
        FROM (SELECT substr(NEW.on_finish ->> 'url',
                            instr(NEW.on_finish ->> 'url', '://') + 3) AS rest) AS r) AS h
  WHERE true
  ON CONFLICT (batch_id) WHERE kind = 'callback' DO UPDATE
  SET status = 'pending',
      payload = excluded.payload,
      limits = excluded.limits,
      attempt = 0,
      max_attempts = excluded.max_attempts,
      run_after = excluded.run_after,
      lease_token = NULL,
      lease_expires_at = NULL,
      started_at = NULL,
      completed_at = NULL,
      last_error = NULL;
END;
