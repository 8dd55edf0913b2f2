-- A completion callback signed with its own secret: `on_finish.signing_secret`
-- (core::callback), stored in batches.on_finish and schedules.on_finish with the
-- URL, is copied into the callback row's payload by the trigger that enqueues it,
-- so the callback kind signs with it instead of WEBHOOK_SECRET, which every
-- webhook receiver holds (and so could forge callbacks with). Null without one.
-- The trigger of migration 0017 otherwise unchanged; nothing else moves, and a
-- callback row enqueued before this keeps its payload (no secret: WEBHOOK_SECRET).

DROP TRIGGER batches_enqueue_callback;

CREATE TRIGGER batches_enqueue_callback
AFTER UPDATE OF finished_at ON batches
WHEN OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL AND NEW.on_finish IS NOT NULL
BEGIN
  INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after)
  VALUES (NEW.id, '', 'callback',
          json_object('url', NEW.on_finish ->> 'url',
                      'signing_secret', NEW.on_finish ->> 'signing_secret',
                      'summary', json_object('batch_id', NEW.id, 'key', NEW.key,
                                             'status', NEW.status, 'total', NEW.total,
                                             'completed', NEW.completed, 'failed', NEW.failed,
                                             'cancelled', NEW.cancelled,
                                             'created_at', NEW.created_at,
                                             'finished_at', NEW.finished_at)),
          NEW.callback_max_attempts, NEW.finished_at)
  ON CONFLICT (batch_id) WHERE kind = 'callback' DO UPDATE
  SET status = 'pending',
      payload = excluded.payload,
      attempt = 0,
      max_attempts = excluded.max_attempts,
      run_after = excluded.run_after,
      lease_token = NULL,
      lease_expires_at = NULL,
      started_at = NULL,
      completed_at = NULL,
      last_error = NULL;
END;
