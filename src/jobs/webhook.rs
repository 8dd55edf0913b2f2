//! Built-in kind `webhook`: POST a signed JSON body to the subject's URL.
//! 2xx = done; 408, 425, 429, 5xx, timeout and network errors = retry (the
//! receiver's word, `core::receiver`, sets its delay); a 403 its receiver
//! marks as a rate limit = a retry too; any other status = permanent failure,
//! with the status and up to 200 bytes of the answer's text. A 429, such a
//! 403, or a 503 with a wait is a refusal: it spends no attempt.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use url::Url;

use super::outbound::{Outbound, Request, Response, Signal};
use super::{Context, Job};
use crate::core::batch::model::{cut_on_char_boundary, ClaimedItem, Outcome, RefusedBy};
use crate::core::flow::receiver;
use crate::core::security::signature::constant_time_eq;
use crate::core::security::target::{self, TargetPolicy};

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

impl From<Outcome> for Answered {
    fn from(outcome: Outcome) -> Answered {
        Answered {
            outcome,
            retry_after_ms: None,
            refused: false,
            paced: None,
        }
    }
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
/// What `GET /subjects` shows instead of a signing secret.
pub use crate::core::security::secrets::REDACTED;

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

/// Bytes of a failed answer's text kept in its reason (`last_error`).
pub const MAX_ANSWER_TEXT_BYTES: usize = 200;

/// What an answer (or none) means: its outcome and, for a retry, the delay its
/// receiver asks for and whether it refused. How `webhook` answers map; any
/// kind that POSTs to a receiver of its own (`service`) maps them the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub outcome: Outcome,
    pub retry_after_ms: Option<i64>,
    /// A retry its receiver refused (`core::receiver`): spends no attempt, and
    /// pauses and teaches the item's keys.
    pub refused: bool,
    /// What the answer's announced budget asks of the item's keys (`core::flow::pace`).
    pub paced: Option<crate::core::flow::pace::Paced>,
}

impl Answered {
    /// Hand the delay and the refusal to the run (`Context::retry_after`) and
    /// give the outcome.
    pub fn apply(self, ctx: &Context<'_>) -> Outcome {
        if let Some(ms) = self.retry_after_ms {
            ctx.retry_after(ms);
        }
        if self.refused {
            ctx.note_refusal(RefusedBy::default());
        }
        if let Some(paced) = self.paced {
            ctx.note_paced(paced);
        }
        self.outcome
    }
}

/// The cap the reader applies to a receiver's wait: `RETRY_MAX_MS`'s ceiling.
/// The drain caps it again at the item's kind's own retry cap (`retry::defer`).
pub const WAIT_CAP_MS: i64 = 7 * 86_400_000;

/// Map an answer received at `now_ms`: [`classify_word`], a permanent
/// failure's reason followed by the first [`MAX_ANSWER_TEXT_BYTES`] of the
/// answer's text (on one line), and a retry's wait and refusal ([`answered`]).
pub fn classify_answer(response: &Response, now_ms: i64) -> Answered {
    let word = read_word(response, now_ms);
    let outcome = match classify_word(response.status, &word) {
        Outcome::Fail(reason) => match answer_text(&response.text_read()) {
            Some(text) => Outcome::Fail(format!("{reason}: {text}")),
            None => Outcome::Fail(reason),
        },
        other => other,
    };
    with_word(outcome, &word, now_ms)
}

/// [`classify_status`] with the receiver's word on it: a status that would be a
/// permanent failure but that its receiver means as a refusal (a `403` with a
/// rate-limit signal, `core::receiver`) is a retry.
pub fn classify_word(status: u16, word: &receiver::Word) -> Outcome {
    match classify_status(status) {
        Outcome::Fail(_) if word.refusal => Outcome::Retry(format!("HTTP {status}: rate limited")),
        other => other,
    }
}

/// `outcome` (a retry or not, decided already) with the receiver's word on
/// it, read at `now_ms`: a retry takes the wait the answer names and says
/// whether it was a refusal.
pub fn answered(outcome: Outcome, response: &Response, now_ms: i64) -> Answered {
    with_word(outcome, &read_word(response, now_ms), now_ms)
}

/// The receiver's word on an answer (`core::receiver::read`).
pub fn read_word(response: &Response, now_ms: i64) -> receiver::Word {
    receiver::read(
        response.status,
        &response.headers,
        &response.body,
        now_ms,
        WAIT_CAP_MS,
    )
}

fn with_word(outcome: Outcome, word: &receiver::Word, now_ms: i64) -> Answered {
    let retry = matches!(outcome, Outcome::Retry(_));
    Answered {
        retry_after_ms: word.wait_ms(now_ms).filter(|_| retry),
        refused: word.refusal && retry,
        paced: crate::core::flow::pace::paced(word, now_ms),
        outcome,
    }
}

/// The start of an answer's text as one trimmed line (control characters as
/// spaces), cut on a character boundary; `None` when blank.
fn answer_text(body: &str) -> Option<String> {
    let line: String = cut_on_char_boundary(body, MAX_ANSWER_TEXT_BYTES)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let line = line.trim();
    (!line.is_empty()).then(|| line.to_string())
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

    /// `host:<hostname>` of its URL: every item to one receiver holds one key,
    /// which its refusals pause and a limit may govern.
    fn limit_keys(&self, payload: &Value) -> Vec<String> {
        let url = payload.get("url").and_then(Value::as_str).unwrap_or("");
        crate::core::flow::limits::host_key(url)
            .into_iter()
            .collect()
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
    post_signed_answer(ctx.outbound(), &ctx.signal, &url, body, &key, &secret)
        .await
        .apply(ctx)
}

/// POST a signed JSON `body` to a checked `url` with this `Idempotency-Key`, the
/// way every delivery goes out (webhooks, multi-channel items' channels,
/// completion callbacks): `Fanout-Signature` with `secret`, redirects not
/// followed (the seam never follows them), aborted with `signal` (the job's,
/// or a channel's). The answer is the outcome ([`classify_answer`]).
pub async fn post_signed(
    outbound: &dyn Outbound,
    signal: &Signal,
    url: &Url,
    body: String,
    idempotency_key: &str,
    secret: &str,
) -> Outcome {
    post_signed_answer(outbound, signal, url, body, idempotency_key, secret)
        .await
        .outcome
}

/// [`post_signed`] with the receiver's wait and refusal kept.
pub async fn post_signed_answer(
    outbound: &dyn Outbound,
    signal: &Signal,
    url: &Url,
    body: String,
    idempotency_key: &str,
    secret: &str,
) -> Answered {
    let now_secs = outbound.now_ms() / 1_000;
    let signature = crate::core::security::signature::sign(secret, now_secs, body.as_bytes());
    // The URL as parsed and checked, not the raw text.
    let request = Request::post_json(url.as_str(), body)
        .header("Idempotency-Key", idempotency_key)
        .header("Fanout-Signature", &signature);
    match outbound.fetch(request, signal).await {
        // Read when it came: a reset in epoch seconds is measured from then.
        Ok(response) => classify_answer(&response, outbound.now_ms()),
        Err(e) => Outcome::Retry(format!("network error: {e}")).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DEV: TargetPolicy = TargetPolicy::LOCAL;
    const PROD: TargetPolicy = TargetPolicy::PUBLIC;

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

    /// An answer with this status, text and `Retry-After`.
    fn answer(status: u16, text: &str, retry_after: Option<&str>) -> Answered {
        let mut response = Response::new(status);
        response.body = text.into();
        if let Some(value) = retry_after {
            response.headers.push(("Retry-After".into(), value.into()));
        }
        classify_answer(&response, NOW)
    }

    /// Wed, 18 Nov 2026 11:06:40 GMT.
    const NOW: i64 = 1_795_000_000_000;

    fn outcome(status: u16, text: &str, retry_after: Option<&str>) -> Outcome {
        answer(status, text, retry_after).outcome
    }

    #[test]
    fn answers_map_by_status_with_a_permanent_failures_text() {
        assert_eq!(outcome(200, "ignored", None), Outcome::Done);
        assert_eq!(outcome(204, "", Some("5")), Outcome::Done);
        // A retry's reason is its status: the next attempt may say more.
        assert_eq!(
            outcome(503, " busy \n", None),
            Outcome::Retry("HTTP 503".into())
        );
        assert_eq!(outcome(408, "", None), Outcome::Retry("HTTP 408".into()));
        assert_eq!(
            outcome(422, " bad user\n", None),
            Outcome::Fail("HTTP 422: bad user".into())
        );
        assert_eq!(
            outcome(301, "moved", None),
            Outcome::Fail("HTTP 301: redirects are not followed: moved".into())
        );
    }

    #[test]
    fn a_permanent_failures_text_is_cut_to_200_bytes_on_a_char_boundary() {
        let Outcome::Fail(reason) = outcome(400, &"é".repeat(150), None) else {
            panic!("a 400 is permanent");
        };
        let text = reason.strip_prefix("HTTP 400: ").unwrap();
        assert_eq!(text.len(), MAX_ANSWER_TEXT_BYTES);
        assert_eq!(text, "é".repeat(100));
    }

    #[test]
    fn the_receivers_wait_delays_a_retry_only() {
        assert_eq!(
            answer(429, "slow down", Some(" 2 ")),
            Answered {
                outcome: Outcome::Retry("HTTP 429".into()),
                retry_after_ms: Some(2_000),
                refused: true,
                paced: None,
            }
        );
        // Decimal seconds and an HTTP-date are waits too (RFC 9110 §10.2.3).
        for (value, ms) in [("1.5", 1_500), ("Wed, 18 Nov 2026 11:07:10 GMT", 30_000)] {
            assert_eq!(
                answer(503, "", Some(value)).retry_after_ms,
                Some(ms),
                "{value}"
            );
        }
        // A negative or a word is no wait: the backoff applies.
        for other in ["-1", "soon", ""] {
            assert_eq!(
                answer(503, "", Some(other)),
                Outcome::Retry("HTTP 503".into()).into(),
                "{other}"
            );
        }
        // On a permanent failure it means nothing.
        assert_eq!(
            answer(400, "", Some("2")),
            Outcome::Fail("HTTP 400".into()).into()
        );
    }

    #[test]
    fn a_403_is_a_refused_retry_only_with_a_rate_limit_signal() {
        let limited = answer(403, r#"{"message":"API rate limit exceeded"}"#, Some("60"));
        assert_eq!(
            limited,
            Answered {
                outcome: Outcome::Retry("HTTP 403: rate limited".into()),
                retry_after_ms: Some(60_000),
                refused: true,
                paced: None,
            }
        );
        assert_eq!(
            outcome(403, r#"{"message":"Must have admin rights"}"#, None),
            Outcome::Fail(r#"HTTP 403: {"message":"Must have admin rights"}"#.into())
        );
        // A retry without a refusal (a 500 that names a wait) is not one.
        let busy = answer(500, "", Some("5"));
        assert_eq!((busy.retry_after_ms, busy.refused), (Some(5_000), false));
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
            given_back: 0,
            limits: None,
            start_at: 0,
            refused_since: None,
        };
        let body: Value = serde_json::from_str(&delivery_body(&item, &json!({"k": "v"}))).unwrap();
        assert_eq!(
            body,
            json!({"item_id": 42, "batch_id": "b1", "subject_id": "s1", "attempt": 2, "data": {"k": "v"}})
        );
    }
}
