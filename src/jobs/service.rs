//! Built-in kind `service`: the item runs in another Worker, written in any
//! language, reached through a service binding. Payload
//! `{"service": "<binding name>", "path": "/optional/path", "data": <any JSON>}`;
//! the binding must be listed in `SERVICE_BINDINGS` (and bound to this Worker).
//! Each run POSTs [`ServiceDelivery`] (`item_id`, `batch_id`, `subject_id`,
//! `attempt`, `max_attempts`, `delivered`, `data`) with `Content-Type:
//! application/json` and `Idempotency-Key: <item_id>`. An answer that speaks
//! the protocol (`channels`, `after_seconds`, `slow_down`) is the handler's
//! word: channels are recorded as a `multi` item's and the outcome follows
//! `multi`'s rule (`core::receipts`), a delay is its item's alone, and only
//! `slow_down` refuses for the binding; any other answer (a bare status, the
//! platform's own error) maps as a webhook's, the receiver's word included
//! ([`classify_service_answer`]). The drain calls the binding
//! itself (`runs_in_drain`): a `SELF` child in between would cost a second
//! invocation per item (docs/architecture/jobs-and-http.md). `POST /probe` mode `service` runs
//! it too, as [`probe_call`]s that no handler can take for real items.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use url::Url;

use super::outbound::{Request, Response, ServiceError};
use super::webhook::{classify_answer, classify_status, read_word, Answered, WAIT_CAP_MS};
use super::{Context, Job};
use crate::core::batch::model::{ClaimedItem, Outcome, RefusedBy};
use crate::core::batch::receipts::{self, ChannelResults, Receipts};
use crate::core::security::target::TargetPolicy;

pub struct Service;

/// The URL a call carries: a service binding ignores the host, the bound Worker
/// sees the path (and query).
pub const ORIGIN: &str = "https://cron-fanout.internal";

/// Longest `path` accepted.
pub const MAX_PATH_BYTES: usize = 1_024;

/// The subject payload of a `service` item.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServicePayload {
    /// The binding's name, as `wrangler.toml` declares it.
    pub service: String,
    /// Path (and query) of the call; `/` when left out.
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub data: Value,
}

/// Parse a payload: its shape, its binding (one of `callable`), its path. Gives
/// back the payload and the URL of the call.
pub fn parse_payload(
    payload: &Value,
    callable: &[String],
) -> Result<(ServicePayload, Url), String> {
    let p: ServicePayload = serde_json::from_value(payload.clone()).map_err(|e| {
        format!("service payload must be {{\"service\": \"<binding name>\", \"path\": \"/optional/path\", \"data\": <any>}}: {e}")
    })?;
    if !callable.contains(&p.service) {
        let listed = if callable.is_empty() {
            "none".to_string()
        } else {
            callable.join(", ")
        };
        return Err(format!(
            "service {:?} is not a binding this Worker may call: SERVICE_BINDINGS must list it and the Worker must be bound to it ([[services]] in wrangler.toml); callable: {listed}",
            p.service
        ));
    }
    let url = call_url(p.path.as_deref().unwrap_or("/"))?;
    Ok((p, url))
}

/// The URL of a call to `path`: an absolute path with an optional query, no
/// fragment, whitespace or control characters, at most [`MAX_PATH_BYTES`].
pub fn call_url(path: &str) -> Result<Url, String> {
    let bad = |why: &str| Err(format!("path {why}, got {path:?}"));
    if path.len() > MAX_PATH_BYTES {
        return bad(&format!("must be at most {MAX_PATH_BYTES} bytes"));
    }
    if !path.starts_with('/') || path.starts_with("//") {
        return bad("must start with a single /");
    }
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("must not contain whitespace or control characters");
    }
    if path.contains('#') {
        return bad("must not contain a fragment (#)");
    }
    let url = Url::parse(&format!("{ORIGIN}{path}"))
        .or_else(|e| bad(&format!("is not a valid URL path ({e})")))?;
    // The path must stay a path: nothing in it may reach the URL's other parts.
    if url.origin().ascii_serialization() != ORIGIN {
        return bad("must stay a path");
    }
    Ok(url)
}

/// The JSON body a handler receives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceDelivery<'a> {
    pub item_id: i64,
    pub batch_id: &'a str,
    pub subject_id: &'a str,
    /// 1-based; the last is `max_attempts`.
    pub attempt: i64,
    pub max_attempts: i64,
    /// The channels earlier attempts delivered (`[]` at first), in name order:
    /// the handler sends only the others.
    pub delivered: Vec<&'a str>,
    pub data: &'a Value,
}

/// The request body of one call.
pub fn delivery_body(item: &ClaimedItem, delivered: Vec<&str>, data: &Value) -> String {
    let delivery = ServiceDelivery {
        item_id: item.item_id,
        batch_id: &item.batch_id,
        subject_id: &item.subject_id,
        attempt: item.attempt,
        max_attempts: item.max_attempts,
        delivered,
        data,
    };
    serde_json::to_string(&delivery).expect("serialising plain data cannot fail")
}

/// What a handler's answer means for its item: its outcome, its retry's wait,
/// and whose word that wait is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerAnswer {
    pub outcome: Outcome,
    pub retry_after_ms: Option<i64>,
    pub said: Said,
}

/// Whose word a handler's answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Said {
    /// An answer that does not speak the protocol (a bare status: the
    /// platform's own error, or a handler that sends none of its fields): read
    /// as any receiver's, so a `429` or a `503` with a wait is a refusal that
    /// pauses and teaches the item's keys (`service:<binding>` among them).
    Receiver { refused: bool },
    /// The handler's word on its own item (`channels`, `after_seconds`): its
    /// wait delays this item alone and the retry spends its attempt.
    Handler,
    /// The handler's `slow_down`: a refusal of the whole binding, which pauses
    /// and teaches `service:<binding>` only. `with_failure`: a channel failed
    /// beside it, which spends the attempt.
    SlowDown { with_failure: bool },
}

impl HandlerAnswer {
    /// Hand the wait (and a refusal) to the run and give the outcome.
    pub fn apply(self, ctx: &Context<'_>, binding: &str) -> Outcome {
        match self.said {
            Said::Receiver { refused } => Answered {
                outcome: self.outcome,
                retry_after_ms: self.retry_after_ms,
                refused,
                paced: None,
            }
            .apply(ctx),
            Said::Handler => {
                if let Some(ms) = self.retry_after_ms {
                    ctx.delay_retry(ms);
                }
                self.outcome
            }
            Said::SlowDown { with_failure } => {
                if let Some(ms) = self.retry_after_ms {
                    ctx.retry_after(ms);
                }
                let keys = crate::core::flow::limits::service_key(binding).map(|k| vec![k]);
                ctx.note_refusal(RefusedBy { keys, with_failure });
                self.outcome
            }
        }
    }
}

impl From<Answered> for HandlerAnswer {
    fn from(a: Answered) -> HandlerAnswer {
        HandlerAnswer {
            outcome: a.outcome,
            retry_after_ms: a.retry_after_ms,
            said: Said::Receiver { refused: a.refused },
        }
    }
}

/// What a handler's answer means, and the channels it reports. An answer whose
/// body is a JSON object with any of the protocol's members (`channels`,
/// `after_seconds`, `slow_down`; any status) is the handler's word: each
/// channel is recorded (`receipts::parse_reported`: the item's `stored`
/// receipts bound their number) and the outcome is `multi`'s rule over them,
/// with a status other than 2xx (the handler's own retry or failure beside
/// them) one more entry of it; a retry waits the longest `after_seconds` asked
/// (the item's, a retried channel's), else the answer's `Retry-After`, for this
/// item alone; `slow_down` makes it a refusal of the binding
/// ([`Said::SlowDown`]). A malformed member, or a body that mentions one but is
/// not JSON (cut short, say), is a retry that says so and records nothing:
/// never a loss. Any other answer maps as a webhook's, the receiver's word
/// included ([`Said::Receiver`]). Read at `now_ms`.
pub fn classify_service_answer(
    response: &Response,
    stored: &Receipts,
    now_ms: i64,
) -> (HandlerAnswer, Option<ChannelResults>) {
    let said = match protocol(&response.text_read()) {
        None => return (classify_answer(response, now_ms).into(), None),
        Some(said) => said.and_then(|p| {
            let channels = match &p.channels {
                Some(value) => Some(receipts::parse_reported(value, stored)?),
                None => None,
            };
            Ok((p, channels))
        }),
    };
    let own_wait = || read_word(response, now_ms).wait_ms(now_ms);
    let (protocol, channels) = match said {
        Ok(read) => read,
        Err(e) => {
            let outcome = Outcome::Retry(format!("malformed answer: {e}"));
            let answer = HandlerAnswer {
                outcome,
                retry_after_ms: own_wait(),
                said: Said::Handler,
            };
            return (answer, None);
        }
    };
    let status = response.status;
    let own = match protocol.slow_down_ms {
        Some(_) => Outcome::Retry(format!("slow down (HTTP {status})")),
        None => classify_status(status),
    };
    let own = (own != Outcome::Done).then_some(own);
    let outcome = match &channels {
        Some(channels) => receipts::outcome_beside(own.as_ref(), channels),
        None => own.unwrap_or(Outcome::Done),
    };
    let retried = matches!(outcome, Outcome::Retry(_));
    let with_failure = channels
        .iter()
        .flat_map(|c| c.values())
        .any(|o| *o != Outcome::Done);
    let (retry_after_ms, said) = match protocol.slow_down_ms {
        Some(ms) => (Some(ms), Said::SlowDown { with_failure }),
        None => (protocol.after_ms.or_else(own_wait), Said::Handler),
    };
    let answer = HandlerAnswer {
        outcome,
        retry_after_ms: retry_after_ms.filter(|_| retried),
        said,
    };
    (answer, channels)
}

/// The protocol's members of an answer's body, as read: `channels` still to
/// check, each retried channel's `after_seconds` taken out of it.
#[derive(Debug, Default)]
struct Protocol {
    channels: Option<Value>,
    /// The longest `after_seconds` asked, the item's or a retried channel's.
    after_ms: Option<i64>,
    /// `slow_down.after_seconds`.
    slow_down_ms: Option<i64>,
}

/// The members a handler's answer may carry.
const MEMBERS: [&str; 3] = ["channels", "after_seconds", "slow_down"];

/// The protocol's members of an answer's body: `None` when the body is no JSON
/// object with one (the status alone decides, as a receiver's).
fn protocol(body: &str) -> Option<Result<Protocol, String>> {
    if !body.trim_start().starts_with('{') {
        return None;
    }
    let mut answer = match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(answer)) => answer,
        Ok(_) => return None,
        Err(e) => {
            let mentioned = MEMBERS
                .iter()
                .find(|m| body.contains(&format!("\"{m}\"")))?;
            return Some(Err(format!("{mentioned}: the answer is not JSON ({e})")));
        }
    };
    if !MEMBERS.iter().any(|m| answer.contains_key(*m)) {
        return None;
    }
    Some(read_protocol(&mut answer))
}

fn read_protocol(answer: &mut serde_json::Map<String, Value>) -> Result<Protocol, String> {
    let mut p = Protocol {
        after_ms: answer
            .get("after_seconds")
            .map(|v| seconds_ms("after_seconds", v))
            .transpose()?,
        ..Protocol::default()
    };
    if let Some(slow) = answer.get("slow_down") {
        let secs = slow
            .get("after_seconds")
            .ok_or_else(|| "slow_down must be {\"after_seconds\": <seconds>}".to_string())?;
        p.slow_down_ms = Some(seconds_ms("slow_down.after_seconds", secs)?);
    }
    if let Some(mut channels) = answer.remove("channels") {
        for (name, entry) in channels.as_object_mut().into_iter().flatten() {
            let Some(after) = entry
                .as_object_mut()
                .and_then(|e| e.remove("after_seconds"))
            else {
                continue;
            };
            let field = format!("channels[{}].after_seconds", Value::from(name.as_str()));
            let ms = seconds_ms(&field, &after)?;
            if entry.get("outcome") == Some(&Value::from("retry")) {
                p.after_ms = p.after_ms.max(Some(ms));
            }
        }
        p.channels = Some(channels);
    }
    Ok(p)
}

/// A number of seconds ≥ 0 as ms, rounded up and capped at the wait cap.
fn seconds_ms(field: &str, value: &Value) -> Result<i64, String> {
    match value.as_f64() {
        Some(secs) if secs.is_finite() && secs >= 0.0 => {
            Ok((secs * 1_000.0).ceil().min(WAIT_CAP_MS as f64) as i64)
        }
        _ => Err(format!(
            "{field} must be a number of seconds ≥ 0, got {value}"
        )),
    }
}

/// The header that marks a probe's call: a handler answers it 2xx without
/// doing any work (docs/api.md).
pub const PROBE_HEADER: &str = "Fanout-Probe";

/// Call `n` (from 1) of `POST /probe` mode `service` to `binding`: item id `-n`.
/// Real item ids are SQLite AUTOINCREMENT values, from 1, so no item has an id
/// below 1; its `Idempotency-Key` is `probe:<n>` and it carries [`PROBE_HEADER`],
/// so a handler that dedupes on the key never takes a real item for a probe's.
pub fn probe_call(binding: &str, n: i64) -> ClaimedItem {
    ClaimedItem {
        item_id: -n,
        lease_token: "probe".into(),
        batch_id: "probe".into(),
        subject_id: format!("probe-{n}"),
        attempt: 1,
        max_attempts: 1,
        kind: "service".into(),
        payload: json!({"service": binding, "path": "/probe", "data": null}).to_string(),
        receipts: None,
        given_back: 0,
        limits: None,
        start_at: 0,
        refused_since: None,
    }
}

/// The request of a run: `body` with `Idempotency-Key: <item_id>` for an item,
/// or `probe:<n>` and [`PROBE_HEADER`] for a probe's call (an id below 1).
fn request(item: &ClaimedItem, url: &Url, body: String) -> Request {
    let request = Request::post_json(url.as_str(), body);
    if item.item_id < 1 {
        request
            .header("Idempotency-Key", &format!("probe:{}", -item.item_id))
            .header(PROBE_HEADER, "1")
    } else {
        request.header("Idempotency-Key", &item.item_id.to_string())
    }
}

impl Job for Service {
    type Payload = Value;

    fn name(&self) -> &'static str {
        "service"
    }

    fn validate(&self, payload: &Value, targets: &TargetPolicy) -> Result<(), String> {
        parse_payload(payload, targets.services).map(|_| ())
    }

    async fn run(&self, ctx: &Context<'_>, payload: Value) -> Outcome {
        // Checked again: SERVICE_BINDINGS may have changed since the item was
        // written, and queued items keep their payload.
        let (p, url) = match parse_payload(&payload, &ctx.config.service_bindings) {
            Ok(checked) => checked,
            Err(e) => return Outcome::Fail(format!("not sent: {e}")),
        };
        let body = delivery_body(ctx.item, ctx.delivered_channels(), &p.data);
        let mut request = request(ctx.item, &url, body);
        // A 2xx may carry the channels.
        request.read_body = true;
        let answer = ctx
            .outbound()
            .fetch_service(&p.service, request, &ctx.signal)
            .await;
        match answer {
            Ok(response) => {
                let (answered, channels) =
                    classify_service_answer(&response, ctx.receipts(), ctx.now_ms());
                for (name, outcome) in channels.into_iter().flatten() {
                    ctx.report_channel(&name, outcome);
                }
                answered.apply(ctx, &p.service)
            }
            Err(ServiceError::Unbound(name)) => Outcome::Fail(format!(
                "not sent: service binding {name:?} is listed in SERVICE_BINDINGS but not bound to this Worker"
            )),
            Err(ServiceError::Failed(e)) => Outcome::Retry(format!("service {}: {e}", p.service)),
        }
    }

    fn runs_in_drain(&self) -> bool {
        true
    }

    /// `service:<binding>`: every item to one bound Worker holds one key.
    fn limit_keys(&self, payload: &Value) -> Vec<String> {
        let binding = payload.get("service").and_then(Value::as_str).unwrap_or("");
        crate::core::flow::limits::service_key(binding)
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn callable() -> Vec<String> {
        vec!["HANDLER".into()]
    }

    #[test]
    fn a_payload_names_a_callable_binding_with_an_optional_path_and_data() {
        let (p, url) = parse_payload(&json!({"service": "HANDLER"}), &callable()).unwrap();
        assert_eq!(
            (p.data, url.as_str()),
            (Value::Null, "https://cron-fanout.internal/")
        );
        let (p, url) = parse_payload(
            &json!({"service": "HANDLER", "path": "/users/7?full=1", "data": {"n": 1}}),
            &callable(),
        )
        .unwrap();
        assert_eq!(p.data, json!({"n": 1}));
        assert_eq!((url.path(), url.query()), ("/users/7", Some("full=1")));
    }

    #[test]
    fn unknown_bindings_bad_paths_and_bad_shapes_are_refused() {
        let err = parse_payload(&json!({"service": "OTHER"}), &callable()).unwrap_err();
        assert!(
            err.contains("SERVICE_BINDINGS") && err.contains("callable: HANDLER"),
            "{err}"
        );
        let err = parse_payload(&json!({"service": "HANDLER"}), &[]).unwrap_err();
        assert!(err.contains("callable: none"), "{err}");
        for path in ["users", "//evil.example/x", "/a b", "/a\n", "/a#frag", ""] {
            let err = parse_payload(&json!({"service": "HANDLER", "path": path}), &callable())
                .unwrap_err();
            assert!(err.starts_with("path "), "{path:?}: {err}");
        }
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        assert!(parse_payload(&json!({"service": "HANDLER", "path": long}), &callable()).is_err());
        for bad in [
            json!({"service": 5}),
            json!({"path": "/"}),
            json!({"service": "HANDLER", "url": "https://example.com"}),
            json!("HANDLER"),
        ] {
            assert!(parse_payload(&bad, &callable()).is_err(), "{bad}");
        }
    }
}
