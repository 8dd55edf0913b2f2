//! Completion callbacks: a batch's `on_finish`, set by `POST /batches`
//! or by the schedule that fires it, and the signed summary POSTed to it each time
//! the batch ends (`finished`, or `cancelled` once nothing is left in flight).
//!
//! A callback is a row of the queue (kind [`KIND`], the batch's row with
//! subject_id `''`), enqueued by a trigger in the same statement as the finish
//! compare-and-set (migration 0007), then claimed, dispatched, retried, reaped and
//! committed like any item: delivered at least once, never lost across a crash. It
//! is not one of the batch's items: it counts in no counter, no `total`, no
//! progress, no listing. A batch that ends again after a replay reuses the row,
//! reset to a fresh delivery of the new summary (its `finished_at` is newer, and
//! so is its key); while the replay runs, an undelivered callback of the earlier
//! end is held (sql/claim_due_items.sql).

use serde::{Deserialize, Serialize};

use crate::core::batch::model::BatchRow;
use crate::core::error::ApiError;
use crate::core::security::target::{self, TargetPolicy};
use crate::core::time::{rfc3339, rfc3339_ms};

/// The job kind of callback rows. Internal: no subject or item may use it
/// (`jobs::check_payload` knows only the public kinds).
pub const KIND: &str = crate::core::batch::model::CALLBACK_KIND;

/// Where a batch's completion callback goes and what signs it:
/// `{"url": "https://…", "signing_secret": "<optional>"}`, in `POST /batches`,
/// `PUT /schedules/{id}` and (the secret redacted) their views.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnFinish {
    pub url: String,
    /// Signs the callbacks instead of `WEBHOOK_SECRET`, which every webhook
    /// receiver holds and so could forge them with. Never listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
}

/// The shortest `on_finish.signing_secret`, as for a subject's own.
pub const MIN_SECRET_CHARS: usize = crate::core::security::secrets::MIN_SECRET_CHARS;
/// The longest: it is copied into every batch a schedule fires and every
/// callback row.
pub const MAX_SECRET_BYTES: usize = 1_024;

impl OnFinish {
    /// Check the URL like a webhook target (`core::target`: scheme, SSRF rules,
    /// the Worker's own host) and the signing secret's length: 400
    /// `invalid_on_finish`. Returns the stored form.
    pub fn validate(&self, policy: &TargetPolicy) -> Result<String, ApiError> {
        let invalid = |message: String| ApiError::bad_request("invalid_on_finish", message);
        target::validate(&self.url, policy).map_err(|e| invalid(format!("on_finish.{e}")))?;
        if let Some(secret) = &self.signing_secret {
            if secret.chars().count() < MIN_SECRET_CHARS || secret.len() > MAX_SECRET_BYTES {
                return Err(invalid(format!(
                    "on_finish.signing_secret must be {MIN_SECRET_CHARS} characters to {MAX_SECRET_BYTES} bytes"
                )));
            }
        }
        Ok(serde_json::to_string(self).expect("plain data"))
    }

    /// The stored form back (`None` for none, or for text that is not one).
    pub fn from_stored(stored: Option<&str>) -> Option<OnFinish> {
        stored.and_then(|text| serde_json::from_str(text).ok())
    }

    /// The stored form as the API shows it: its signing secret, if any, as
    /// `[redacted]`.
    pub fn shown(stored: Option<&str>) -> Option<OnFinish> {
        OnFinish::from_stored(stored).map(|on_finish| OnFinish {
            signing_secret: on_finish
                .signing_secret
                .map(|_| crate::core::security::secrets::REDACTED.to_string()),
            ..on_finish
        })
    }
}

/// A callback's delivery as `GET /batches/{id}` shows it: `pending` until it is
/// delivered (also before the batch ended), `delivered`, or `failed` once its
/// attempts ran out or its receiver refused it for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallbackView {
    pub status: &'static str,
    /// Deliveries tried for the batch's latest end.
    pub attempts: i64,
    pub last_error: Option<String>,
}

impl CallbackView {
    /// `None` for a batch without `on_finish`.
    pub fn from_row(row: &BatchRow) -> Option<CallbackView> {
        row.on_finish.as_ref()?;
        let status = match row.callback_status.as_deref() {
            Some("completed") => "delivered",
            Some("failed") => "failed",
            // Not ended yet (no row), waiting, or in flight.
            _ => "pending",
        };
        Some(CallbackView {
            status,
            attempts: row.callback_attempts.unwrap_or(0),
            last_error: row.callback_error.clone(),
        })
    }
}

/// A callback row's payload, built by the trigger that enqueues it: the URL, the
/// signing secret (migration 0019; null without one, and absent from rows
/// enqueued before it) and the batch's summary at its end.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Payload {
    pub url: String,
    #[serde(default)]
    pub signing_secret: Option<String>,
    pub summary: Summary,
}

/// The body a callback POSTs: the batch at its end. Times are stored as ms and
/// sent as RFC 3339 text, as the API shows them; `finished_at` tells an end from
/// a later one after a replay (and is part of the `Idempotency-Key`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub batch_id: String,
    pub key: String,
    /// `finished` or `cancelled`.
    pub status: String,
    pub total: i64,
    pub completed: i64,
    pub failed: i64,
    pub cancelled: i64,
    #[serde(serialize_with = "rfc3339_ms::serialize")]
    pub created_at: i64,
    #[serde(serialize_with = "rfc3339_ms::serialize")]
    pub finished_at: i64,
}

impl Payload {
    pub fn parse(text: &str) -> Result<Payload, String> {
        serde_json::from_str(text).map_err(|e| format!("callback payload: {e}"))
    }

    /// The request body.
    pub fn body(&self) -> String {
        serde_json::to_string(&self.summary).expect("plain data")
    }

    /// `Idempotency-Key: batch:<id>:<finished_at>` (RFC 3339, as in the body): the
    /// same on every attempt of one end, another for each end, so a receiver that
    /// dedupes on the key alone keeps a later end's summary.
    pub fn idempotency_key(&self) -> String {
        format!(
            "batch:{}:{}",
            self.summary.batch_id,
            rfc3339(self.summary.finished_at)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const PUBLIC: TargetPolicy = TargetPolicy {
        allow_private: false,
        own_host: Some("fanout.example.com:443"),
        own_hostnames: &[],
        services: &[],
    };

    fn row(on_finish: Option<&str>, status: Option<&str>, attempts: Option<i64>) -> BatchRow {
        BatchRow {
            id: "b".into(),
            key: "k".into(),
            status: "finished".into(),
            total: 1,
            completed: 1,
            failed: 0,
            cancelled: 0,
            processing: 0,
            created_at: 0,
            finished_at: Some(1),
            schedule_id: None,
            on_finish: on_finish.map(str::to_string),
            callback_status: status.map(str::to_string),
            callback_attempts: attempts,
            callback_error: None,
            filling: 0,
            priority: 0,
            cost: None,
        }
    }

    #[test]
    fn on_finish_urls_follow_the_webhook_target_rules() {
        let ok = OnFinish {
            url: "https://hooks.example.com/done".into(),
            signing_secret: None,
        };
        assert_eq!(
            ok.validate(&PUBLIC).unwrap(),
            r#"{"url":"https://hooks.example.com/done"}"#
        );
        for bad in [
            "ftp://example.com/x",
            "http://127.0.0.1:9000/x",
            "http://169.254.169.254/latest",
            "https://fanout.example.com/batches",
            "https://user:pw@example.com/",
            "not a url",
        ] {
            let e = OnFinish {
                url: bad.into(),
                signing_secret: None,
            }
            .validate(&PUBLIC)
            .unwrap_err();
            assert_eq!(e.code(), "invalid_on_finish", "{bad}");
            assert!(
                e.public_message().starts_with("on_finish.url"),
                "{bad}: {}",
                e.public_message()
            );
        }
        let dev = TargetPolicy {
            allow_private: true,
            own_host: None,
            own_hostnames: &[],
            services: &[],
        };
        assert!(OnFinish {
            url: "http://127.0.0.1:9000/x".into(),
            signing_secret: None,
        }
        .validate(&dev)
        .is_ok());
    }

    #[test]
    fn the_view_follows_the_callback_row() {
        let on = Some(r#"{"url":"https://example.com/"}"#);
        assert_eq!(CallbackView::from_row(&row(None, None, None)), None);
        let view = |status, attempts| CallbackView::from_row(&row(on, status, attempts)).unwrap();
        assert_eq!(
            (view(None, None).status, view(None, None).attempts),
            ("pending", 0)
        );
        assert_eq!(view(Some("pending"), Some(1)).status, "pending");
        assert_eq!(view(Some("processing"), Some(2)).status, "pending");
        assert_eq!(view(Some("completed"), Some(3)).status, "delivered");
        assert_eq!(view(Some("failed"), Some(3)).status, "failed");
        assert_eq!(
            OnFinish::from_stored(on),
            Some(OnFinish {
                url: "https://example.com/".into(),
                signing_secret: None,
            })
        );
    }

    #[test]
    fn a_signing_secret_is_stored_and_shown_redacted() {
        let signed = OnFinish {
            url: "https://hooks.example.com/done".into(),
            signing_secret: Some("callback-secret-0123".into()),
        };
        let stored = signed.validate(&PUBLIC).unwrap();
        assert_eq!(
            stored,
            r#"{"url":"https://hooks.example.com/done","signing_secret":"callback-secret-0123"}"#
        );
        assert_eq!(OnFinish::from_stored(Some(&stored)), Some(signed.clone()));
        assert_eq!(
            OnFinish::shown(Some(&stored)),
            Some(OnFinish {
                signing_secret: Some("[redacted]".into()),
                ..signed
            })
        );
        let plain = r#"{"url":"https://example.com/"}"#;
        assert_eq!(
            OnFinish::shown(Some(plain)),
            OnFinish::from_stored(Some(plain))
        );
        for bad in ["short".to_string(), "x".repeat(MAX_SECRET_BYTES + 1)] {
            let e = OnFinish {
                signing_secret: Some(bad),
                url: "https://hooks.example.com/done".into(),
            }
            .validate(&PUBLIC)
            .unwrap_err();
            assert_eq!(e.code(), "invalid_on_finish");
        }
    }

    #[test]
    fn the_body_is_the_summary_with_rfc3339_times() {
        let payload = Payload::parse(
            &json!({"url": "https://example.com/", "summary": {
                "batch_id": "b1", "key": "nightly:2026-11-21", "status": "cancelled", "total": 10,
                "completed": 4, "failed": 1, "cancelled": 5,
                "created_at": 1_795_000_000_123_i64, "finished_at": 1_795_000_060_000_i64}})
            .to_string(),
        )
        .unwrap();
        let body: Value = serde_json::from_str(&payload.body()).unwrap();
        assert_eq!(
            body,
            json!({"batch_id": "b1", "key": "nightly:2026-11-21", "status": "cancelled",
                   "total": 10, "completed": 4, "failed": 1, "cancelled": 5,
                   "created_at": "2026-11-18T11:06:40.123Z",
                   "finished_at": "2026-11-18T11:07:40.000Z"})
        );
        assert_eq!(
            payload.idempotency_key(),
            "batch:b1:2026-11-18T11:07:40.000Z"
        );
        assert!(Payload::parse("{}").is_err());
    }
}
