//! Built-in kind `webhook`: POST a signed JSON body to the subject's URL.
//! 2xx = done; 408, 425, 429, 5xx, timeout and network errors = retry; any other
//! status = permanent failure.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use url::Url;

use super::outbound::{Outbound, Request, Signal};
use super::{Context, Job};
use crate::core::model::{ClaimedItem, Outcome};
use crate::core::signature::constant_time_eq;
use crate::core::target::{self, TargetPolicy};

pub struct Webhook;

/// The subject payload of a webhook.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookPayload {
    pub url: String,
    #[serde(default)]
    pub data: Value,
    /// Signs this subject's deliveries instead of `WEBHOOK_SECRET`, so a receiver
    /// holding it cannot forge deliveries to other receivers. Never listed.
    #[serde(default)]
    pub signing_secret: Option<String>,
}

/// The JSON body a webhook receives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delivery<'a> {
    pub item_id: i64,
    pub batch_id: &'a str,
    pub subject_id: &'a str,
    pub attempt: i64,
    pub data: &'a Value,
}

/// The shortest signing secret accepted, as for the Worker's own secrets.
pub const MIN_SECRET_CHARS: usize = 16;
/// What `GET /subjects` shows instead of a signing secret. Shorter than
/// [`MIN_SECRET_CHARS`], so writing a listed payload back unchanged is refused
/// rather than silently replacing the secret.
pub const REDACTED: &str = "[redacted]";

/// Parse and validate a payload: its shape, its URL as the runtime will fetch it
/// and the target `policy` (`core::target`), its signing secret.
pub fn parse_payload(
    payload: &Value,
    policy: &TargetPolicy,
) -> Result<(WebhookPayload, Url), String> {
    let p: WebhookPayload = serde_json::from_value(payload.clone()).map_err(|e| {
        format!("webhook payload must be {{\"url\": \"http(s)://...\", \"data\": <any>, \"signing_secret\": <optional>}}: {e}")
    })?;
    let url = target::validate(&p.url, policy).map_err(|e| e.to_string())?;
    check_signing_secret(p.signing_secret.as_deref())?;
    Ok((p, url))
}

/// A subject's own signing secret, if it has one, must be long enough.
pub fn check_signing_secret(secret: Option<&str>) -> Result<(), String> {
    match secret {
        Some(s) if s.chars().count() < MIN_SECRET_CHARS => Err(format!(
            "signing_secret must be at least {MIN_SECRET_CHARS} characters"
        )),
        _ => Ok(()),
    }
}

/// Show a payload's `signing_secret` as [`REDACTED`] (webhook and multi payloads).
pub fn redact_signing_secret(payload: &mut Value) {
    if let Some(secret) = payload.get_mut("signing_secret").filter(|v| !v.is_null()) {
        *secret = Value::from(REDACTED);
    }
}

/// The secret that signs a delivery: the subject's own (`own`), or `default`
/// (`WEBHOOK_SECRET`). A subject secret equal to a dispatch secret would hand its
/// receiver the power to forge `POST /internal/run`: refused.
pub fn signing_secret<'a>(
    own: Option<&'a str>,
    default: &'a str,
    dispatch_secrets: &[&str],
) -> Result<&'a str, String> {
    match own {
        None => Ok(default),
        Some(own)
            if dispatch_secrets
                .iter()
                .any(|d| constant_time_eq(own.as_bytes(), d.as_bytes())) =>
        {
            Err("signing_secret must differ from DISPATCH_SECRET".into())
        }
        Some(own) => Ok(own),
    }
}

/// The request body for one delivery.
pub fn delivery_body(item: &ClaimedItem, data: &Value) -> String {
    let delivery = Delivery {
        item_id: item.item_id,
        batch_id: &item.batch_id,
        subject_id: &item.subject_id,
        attempt: item.attempt,
        data,
    };
    serde_json::to_string(&delivery).expect("serialising plain data cannot fail")
}

/// Map an HTTP status to an outcome. Redirects are never followed (a 301/302/303
/// would turn the POST into a body-less GET, and the signature would go wherever
/// `Location` points): a 3xx is a permanent failure that says so.
pub fn classify_status(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Done,
        300..=399 => Outcome::Fail(format!("HTTP {status}: redirects are not followed")),
        408 | 425 | 429 | 500..=599 => Outcome::Retry(format!("HTTP {status}")),
        _ => Outcome::Fail(format!("HTTP {status}")),
    }
}

impl Job for Webhook {
    type Payload = Value;

    fn name(&self) -> &'static str {
        "webhook"
    }

    fn validate(&self, payload: &Value, targets: &TargetPolicy) -> Result<(), String> {
        parse_payload(payload, targets).map(|_| ())
    }

    async fn run(&self, ctx: &Context<'_>, payload: Value) -> Outcome {
        run(ctx, &payload).await
    }

    fn redact(&self, payload: &mut Value) {
        redact_signing_secret(payload);
    }
}

async fn run(ctx: &Context<'_>, payload: &Value) -> Outcome {
    // Checked again here, not only when the subject was written: settings change
    // (ALLOW_PRIVATE_TARGETS back to false), and queued items keep their payload.
    let dispatch_secrets = ctx.config.dispatch_keys();
    let checked = parse_payload(payload, &ctx.config.policy()).and_then(|(p, url)| {
        let own = p.signing_secret.as_deref();
        let secret = signing_secret(own, &ctx.config.webhook_secret, &dispatch_secrets)?;
        Ok((p.data, url, secret.to_string()))
    });
    let (data, url, secret) = match checked {
        Ok(checked) => checked,
        Err(e) => return Outcome::Fail(format!("not sent: {e}")),
    };
    let body = delivery_body(ctx.item, &data);
    let key = ctx.item.item_id.to_string();
    post_signed(ctx.outbound(), &ctx.signal, &url, body, &key, &secret).await
}

/// POST a signed JSON `body` to a checked `url` with this `Idempotency-Key`, the
/// way every delivery goes out (webhooks, multi-channel items' channels,
/// completion callbacks): `Fanout-Signature` with `secret`, redirects not
/// followed (the seam never follows them), aborted with `signal` (the job's,
/// or a channel's). The answer's status is the outcome ([`classify_status`]).
pub async fn post_signed(
    outbound: &dyn Outbound,
    signal: &Signal,
    url: &Url,
    body: String,
    idempotency_key: &str,
    secret: &str,
) -> Outcome {
    let now_secs = outbound.now_ms() / 1_000;
    let signature = crate::core::signature::sign(secret, now_secs, body.as_bytes());
    // The URL as parsed and checked, not the raw text.
    let request = Request::post_json(url.as_str(), body)
        .header("Idempotency-Key", idempotency_key)
        .header("Fanout-Signature", &signature);
    match outbound.fetch(request, signal).await {
        Ok(response) => classify_status(response.status),
        Err(e) => Outcome::Retry(format!("network error: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DEV: TargetPolicy = TargetPolicy {
        allow_private: true,
        own_host: None,
        own_hostnames: &[],
        services: &[],
    };
    const PROD: TargetPolicy = TargetPolicy {
        allow_private: false,
        own_host: None,
        own_hostnames: &[],
        services: &[],
    };

    #[test]
    fn accepts_http_and_https_urls_with_optional_data() {
        let (p, url) =
            parse_payload(&json!({"url": "http://127.0.0.1:9000/hook/a?x=1"}), &DEV).unwrap();
        assert_eq!(p.data, Value::Null);
        assert_eq!(url.as_str(), "http://127.0.0.1:9000/hook/a?x=1");
        let (p, _) = parse_payload(
            &json!({"url": "https://example.com", "data": {"n": 1}}),
            &PROD,
        )
        .unwrap();
        assert_eq!(p.data, json!({"n": 1}));
    }

    #[test]
    fn rejects_other_schemes_missing_hosts_and_extra_fields() {
        for bad in [
            json!({"url": "ftp://example.com"}),
            json!({"url": "javascript:alert(1)"}),
            json!({"url": "https://"}),
            json!({"url": "https:// example.com"}),
            json!({"url": "https://user:pw@example.com"}),
            json!({"url": 5}),
            json!({"data": 1}),
            json!({"url": "https://example.com", "method": "GET"}),
            json!("https://example.com"),
        ] {
            assert!(parse_payload(&bad, &DEV).is_err(), "{bad}");
        }
    }

    #[test]
    fn private_targets_depend_on_the_policy() {
        let local = json!({"url": "http://127.0.0.1:9000/hook"});
        assert!(parse_payload(&local, &DEV).is_ok());
        let err = parse_payload(&local, &PROD).unwrap_err();
        assert!(
            err.contains("loopback") && err.contains("ALLOW_PRIVATE_TARGETS"),
            "{err}"
        );
    }

    #[test]
    fn a_subjects_own_secret_signs_its_deliveries() {
        let parse = |v: Value| parse_payload(&v, &PROD).map(|(p, _)| p);
        let plain = parse(json!({"url": "https://example.com"})).unwrap();
        assert_eq!(
            signing_secret(plain.signing_secret.as_deref(), "global-secret", &[]),
            Ok("global-secret")
        );
        let own =
            parse(json!({"url": "https://example.com", "signing_secret": "subject-secret-0123"}))
                .unwrap();
        assert_eq!(
            signing_secret(
                own.signing_secret.as_deref(),
                "global-secret",
                &["dispatch-secret-01"]
            ),
            Ok("subject-secret-0123")
        );
        let err = signing_secret(
            own.signing_secret.as_deref(),
            "global-secret",
            &["x", "subject-secret-0123"],
        )
        .unwrap_err();
        assert!(err.contains("DISPATCH_SECRET"), "{err}");
        for short in ["", "short", REDACTED] {
            let err =
                parse(json!({"url": "https://example.com", "signing_secret": short})).unwrap_err();
            assert!(err.contains("at least 16"), "{err}");
        }
    }

    #[test]
    fn listed_payloads_hide_the_signing_secret_only() {
        let mut p = json!({"url": "https://example.com", "data": {"signing_secret": "kept"}, "signing_secret": "subject-secret-0123"});
        Webhook.redact(&mut p);
        assert_eq!(
            p,
            json!({"url": "https://example.com", "data": {"signing_secret": "kept"}, "signing_secret": REDACTED})
        );
        let mut none = json!({"url": "https://example.com"});
        Webhook.redact(&mut none);
        assert_eq!(none, json!({"url": "https://example.com"}));
    }

    #[test]
    fn status_classes_follow_the_documented_table() {
        assert_eq!(classify_status(200), Outcome::Done);
        assert_eq!(classify_status(204), Outcome::Done);
        for s in [408, 425, 429, 500, 503, 599] {
            assert_eq!(classify_status(s), Outcome::Retry(format!("HTTP {s}")));
        }
        for s in [400, 401, 404, 410, 422] {
            assert_eq!(classify_status(s), Outcome::Fail(format!("HTTP {s}")));
        }
        for s in [300, 301, 302, 303, 307, 308] {
            assert_eq!(
                classify_status(s),
                Outcome::Fail(format!("HTTP {s}: redirects are not followed"))
            );
        }
    }

    #[test]
    fn delivery_body_has_exactly_the_documented_fields() {
        let item = ClaimedItem {
            item_id: 42,
            lease_token: "secret-token".into(),
            batch_id: "b1".into(),
            subject_id: "s1".into(),
            attempt: 2,
            max_attempts: 5,
            kind: "webhook".into(),
            payload: "{}".into(),
            receipts: None,
        };
        let body: Value = serde_json::from_str(&delivery_body(&item, &json!({"k": "v"}))).unwrap();
        assert_eq!(
            body,
            json!({"item_id": 42, "batch_id": "b1", "subject_id": "s1", "attempt": 2, "data": {"k": "v"}})
        );
    }
}
