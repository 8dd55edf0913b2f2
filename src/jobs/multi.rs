//! Built-in kind `multi`: one item, several channels (email, push, …), each a
//! signed webhook to its own URL. A run sends every channel not yet delivered
//! (the claim carries the item's receipts), all at once, and reports each
//! channel's result with the outcome (`core::receipts`): done when every channel
//! is delivered, a permanent failure when one fails permanently, otherwise a
//! retry that sends only what is still missing. Each channel's answer is
//! classified like a webhook's; a channel with no answer by the channel deadline
//! (`core::timing::channel_deadline_ms`, a little under `JOB_TIMEOUT_MS`) is
//! given up as timed out, a transient failure of that channel alone. A
//! channel's receiver refusing (`core::receiver`) pauses and teaches that
//! channel's `host:` key only: the other channels' answers and receipts stand,
//! and when refusals are the run's only failures it spends no attempt.

use std::collections::HashSet;

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

use std::cell::RefCell;

use futures::future::{join_all, select, Either};

use super::webhook::{
    check_signing_secret, post_signed_answer, redact_signing_secret, signing_secret, Answered,
};
use super::{Context, Job, Outcome, RefusedBy};
use crate::core::batch::model::ClaimedItem;
use crate::core::batch::receipts::{self, ChannelResults, MAX_CHANNELS};
use crate::core::drain::timing::channel_deadline_ms;
use crate::core::flow::pace::Paced;
use crate::core::security::target::{self, TargetPolicy};

pub struct Multi;

/// The payload of a multi-channel item.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiPayload {
    pub channels: Vec<Channel>,
    #[serde(default)]
    pub data: Value,
    /// Signs every channel's deliveries instead of `WEBHOOK_SECRET` (as a
    /// webhook's). Never listed.
    #[serde(default)]
    pub signing_secret: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Channel {
    /// Unique within the item; the id rules, at most
    /// [`receipts::MAX_CHANNEL_NAME_CHARS`] characters.
    pub name: String,
    pub url: String,
}

/// The JSON body one channel's receiver gets: a webhook delivery with the channel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChannelDelivery<'a> {
    pub item_id: i64,
    pub batch_id: &'a str,
    pub subject_id: &'a str,
    pub attempt: i64,
    pub channel: &'a str,
    pub data: &'a Value,
}

/// What an `Idempotency-Key` cannot carry raw: controls, `%`, and non-ASCII
/// (header values are byte strings), percent-encoded as UTF-8.
const KEY_ESCAPES: &AsciiSet = &CONTROLS.add(b'%');

/// Parse and validate a payload: its shape, 1 to [`MAX_CHANNELS`] channels with
/// unique valid names, each URL as a webhook target under `policy`, the signing
/// secret. Returns the payload and each channel's checked URL, in order.
pub fn parse_payload(
    payload: &Value,
    policy: &TargetPolicy,
) -> Result<(MultiPayload, Vec<Url>), String> {
    let p: MultiPayload = serde_json::from_value(payload.clone()).map_err(|e| {
        format!("multi payload must be {{\"channels\": [{{\"name\": \"…\", \"url\": \"http(s)://…\"}}, …], \"data\": <any>, \"signing_secret\": <optional>}}: {e}")
    })?;
    if p.channels.is_empty() || p.channels.len() > MAX_CHANNELS {
        return Err(format!(
            "channels must hold 1 to {MAX_CHANNELS} channels, got {}",
            p.channels.len()
        ));
    }
    let mut seen = HashSet::new();
    let mut urls = Vec::with_capacity(p.channels.len());
    for (i, c) in p.channels.iter().enumerate() {
        let field = format!("channels[{i}].name");
        receipts::check_name(&field, &c.name)?;
        if !seen.insert(c.name.as_str()) {
            return Err(format!("{field} {:?} appears twice", c.name));
        }
        let url = target::validate(&c.url, policy).map_err(|e| format!("channels[{i}].{e}"))?;
        urls.push(url);
    }
    check_signing_secret(p.signing_secret.as_deref())?;
    Ok((p, urls))
}

/// `Idempotency-Key` of one channel's deliveries: `<item id>:<channel>`, the same
/// on every attempt (the name percent-encoded where a header cannot carry it).
pub fn idempotency_key(item_id: i64, channel: &str) -> String {
    format!("{item_id}:{}", utf8_percent_encode(channel, KEY_ESCAPES))
}

/// The request body of one channel's delivery.
pub fn delivery_body(item: &ClaimedItem, channel: &str, data: &Value) -> String {
    let delivery = ChannelDelivery {
        item_id: item.item_id,
        batch_id: &item.batch_id,
        subject_id: &item.subject_id,
        attempt: item.attempt,
        channel,
        data,
    };
    serde_json::to_string(&delivery).expect("serialising plain data cannot fail")
}

impl Job for Multi {
    type Payload = Value;

    fn name(&self) -> &'static str {
        "multi"
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

    /// One webhook per channel, at most.
    fn subrequests_per_run(&self) -> i64 {
        MAX_CHANNELS as i64
    }

    fn has_channels(&self) -> bool {
        true
    }

    /// `host:<hostname>` of each channel's URL, each once.
    fn limit_keys(&self, payload: &Value) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        let channels = payload.get("channels").and_then(Value::as_array);
        for c in channels.into_iter().flatten() {
            let url = c.get("url").and_then(Value::as_str).unwrap_or("");
            if let Some(k) = crate::core::flow::limits::host_key(url) {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        keys
    }
}

async fn run(ctx: &Context<'_>, payload: &Value) -> Outcome {
    // Checked again, as a webhook is: settings change, queued items do not.
    let dispatch_secrets = ctx.config.dispatch_keys();
    let checked = parse_payload(payload, &ctx.config.policy()).and_then(|(p, urls)| {
        let own = p.signing_secret.as_deref();
        let secret = signing_secret(own, &ctx.config.webhook_secret, &dispatch_secrets)?;
        let secret = secret.to_string();
        Ok((p, urls, secret))
    });
    let (payload, urls, secret) = match checked {
        Ok(checked) => checked,
        Err(e) => return Outcome::Fail(format!("not sent: {e}")),
    };
    let todo: Vec<(&Channel, &Url)> = payload
        .channels
        .iter()
        .zip(&urls)
        .filter(|(c, _)| !ctx.is_delivered(&c.name))
        .collect();
    // Every channel at once, each until it answers or the channel deadline passes
    // (one timer for all). A channel still out then is a transient failure of its
    // own, committed with the others' answers: were the job's timer
    // (`Jobs::run`) to fire first, every answer would be lost and the channels
    // already delivered sent again. The late ones' fetches are aborted (their
    // signal, and dropping them).
    let deadline_ms = channel_deadline_ms(ctx.timeout_ms);
    let channels = ctx.signal.child();
    let answers: Vec<RefCell<Option<Answered>>> = todo.iter().map(|_| RefCell::new(None)).collect();
    let sends = join_all(todo.iter().zip(&answers).map(|((c, url), answer)| {
        let body = delivery_body(ctx.item, &c.name, &payload.data);
        let key = idempotency_key(ctx.item.item_id, &c.name);
        let (secret, channels) = (secret.as_str(), &channels);
        async move {
            let answered =
                post_signed_answer(ctx.outbound(), channels, url, body, &key, secret).await;
            *answer.borrow_mut() = Some(answered);
        }
    }));
    let timer = ctx.outbound().sleep(deadline_ms);
    if let Either::Right(_) = select(std::pin::pin!(sends), timer).await {
        channels.abort();
    }
    let mut results = ChannelResults::new();
    let mut refusal = Refusal::default();
    let mut pacing = Pacing::default();
    for ((c, url), answer) in todo.iter().zip(answers) {
        let answer = answer.into_inner();
        if let Some(a) = &answer {
            refusal.note(url, a);
            pacing.note(url, a);
        }
        let outcome = receipts::answered_or_timed_out(answer.map(|a| a.outcome), deadline_ms);
        ctx.report_channel(&c.name, outcome.clone());
        results.insert(c.name.clone(), outcome);
    }
    let outcome = receipts::outcome(&results);
    if let Some((paced, keys)) = pacing.asks(&refusal.keys) {
        ctx.note_paced_keys(paced, keys);
    }
    if !refusal.keys.is_empty() {
        // A transient failure beside the refusals spends the attempt.
        let refused = results.values().filter(|o| matches!(o, Outcome::Retry(_)));
        let with_failure = refused.count() > refusal.channels;
        if let Some(ms) = refusal.wait_ms {
            ctx.retry_after(ms);
        }
        ctx.note_refusal(RefusedBy {
            keys: Some(refusal.keys),
            with_failure,
        });
    }
    outcome
}

/// What the channels' announced budgets ask of their own `host:` keys
/// (`core::flow::pace`), as one word for the run: a spent budget pauses the
/// keys of every channel whose budget is spent, until the latest reset; else
/// budget left is the least any channel has left, until the latest reset, for
/// the keys of every channel that told it (the drain weighs it against its
/// calls on their way to any of them). When channels refused, only theirs
/// count: a refusal's pause and rate are those keys' alone.
#[derive(Default)]
struct Pacing {
    asked: Vec<(String, Paced)>,
}

impl Pacing {
    fn note(&mut self, url: &Url, answer: &Answered) {
        let Some(paced) = answer.paced else { return };
        if let Some(key) = crate::core::flow::limits::host_key(url.as_str()) {
            self.asked.push((key, paced));
        }
    }

    fn asks(mut self, refused: &[String]) -> Option<(Paced, Vec<String>)> {
        if !refused.is_empty() {
            self.asked.retain(|(key, _)| refused.contains(key));
        }
        let spent = self.asked.iter().any(|(_, p)| p.until.is_some());
        // Spent: the latest pause; else the least left (the latest reset on a tie).
        let most =
            |(_, p): &&(String, Paced)| (p.until, -p.remaining.unwrap_or(i64::MAX), p.reset_at);
        let (_, mut paced) = *self.asked.iter().max_by_key(most)?;
        if !spent {
            paced.reset_at = self.asked.iter().filter_map(|(_, p)| p.reset_at).max();
        }
        // Neither spent nor any budget left: a refusal's announced rate alone
        // (its wait already pauses its keys), for every refused channel's key.
        let any_left = self.asked.iter().any(|(_, p)| p.remaining.is_some());
        let mut keys: Vec<String> = Vec::new();
        for (key, p) in &self.asked {
            let counts = if spent {
                p.until.is_some()
            } else {
                p.remaining.is_some() || !any_left
            };
            if counts && !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        Some((paced, keys))
    }
}

/// The channels of one run whose receivers refused: their `host:` keys, their
/// number, and the longest wait one asked for (the item waits for the last).
#[derive(Default)]
struct Refusal {
    keys: Vec<String>,
    channels: usize,
    wait_ms: Option<i64>,
}

impl Refusal {
    fn note(&mut self, url: &Url, answer: &Answered) {
        if !answer.refused {
            return;
        }
        self.channels += 1;
        if let Some(key) = crate::core::flow::limits::host_key(url.as_str()) {
            if !self.keys.contains(&key) {
                self.keys.push(key);
            }
        }
        self.wait_ms = self.wait_ms.max(answer.retry_after_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::batch::receipts::MAX_CHANNEL_NAME_CHARS;
    use serde_json::json;

    const DEV: TargetPolicy = TargetPolicy::LOCAL;
    const PROD: TargetPolicy = TargetPolicy::PUBLIC;

    fn channels(n: usize) -> Value {
        Value::Array(
            (0..n)
                .map(
                    |i| json!({"name": format!("c{i}"), "url": format!("https://example.com/{i}")}),
                )
                .collect(),
        )
    }

    #[test]
    fn accepts_one_to_eight_channels_with_data_and_a_secret() {
        let (p, urls) = parse_payload(
            &json!({"channels": channels(8), "data": {"n": 1}, "signing_secret": "subject-secret-0123"}),
            &PROD,
        )
        .unwrap();
        assert_eq!((p.channels.len(), urls.len()), (8, 8));
        assert_eq!(urls[3].as_str(), "https://example.com/3");
        assert_eq!(p.data, json!({"n": 1}));
        let (p, _) = parse_payload(&json!({"channels": channels(1)}), &PROD).unwrap();
        assert_eq!((p.data, p.signing_secret), (Value::Null, None));
    }

    #[test]
    fn refuses_bad_channel_lists() {
        let long = "x".repeat(MAX_CHANNEL_NAME_CHARS + 1);
        for (bad, says) in [
            (json!({"channels": []}), "1 to 8"),
            (json!({"channels": channels(9)}), "1 to 8"),
            (json!({}), "multi payload must be"),
            (
                json!({"channels": channels(1), "url": "https://example.com"}),
                "unknown field",
            ),
            (
                json!({"channels": [{"name": "a", "url": "https://example.com", "x": 1}]}),
                "unknown field",
            ),
            (
                json!({"channels": [{"name": "", "url": "https://example.com"}]}),
                "channels[0].name",
            ),
            (
                json!({"channels": [{"name": "a\nb", "url": "https://example.com"}]}),
                "control",
            ),
            (
                json!({"channels": [{"name": "..", "url": "https://example.com"}]}),
                "channels[0].name",
            ),
            (
                json!({"channels": [{"name": long, "url": "https://example.com"}]}),
                "at most 64",
            ),
            (
                json!({"channels": [{"name": "a", "url": "https://example.com/1"}, {"name": "a", "url": "https://example.com/2"}]}),
                "appears twice",
            ),
            (
                json!({"channels": [{"name": "a", "url": "ftp://example.com"}]}),
                "channels[0].url",
            ),
            (
                json!({"channels": channels(1), "signing_secret": "short"}),
                "at least 16",
            ),
        ] {
            let err = parse_payload(&bad, &DEV).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn each_channel_url_follows_the_target_policy() {
        let local = json!({"channels": [{"name": "a", "url": "https://example.com"}, {"name": "b", "url": "http://127.0.0.1:9000/x"}]});
        assert!(parse_payload(&local, &DEV).is_ok());
        let err = parse_payload(&local, &PROD).unwrap_err();
        assert!(
            err.starts_with("channels[1].url host 127.0.0.1 is"),
            "{err}"
        );
    }

    #[test]
    fn keys_name_the_item_and_the_channel_in_a_header_safe_form() {
        assert_eq!(idempotency_key(42, "email"), "42:email");
        assert_eq!(idempotency_key(42, "push: ios"), "42:push: ios");
        assert_eq!(idempotency_key(7, "ünï 100%"), "7:%C3%BCn%C3%AF 100%25");
    }

    #[test]
    fn a_channel_delivery_is_a_webhook_delivery_with_the_channel() {
        let item = ClaimedItem {
            item_id: 42,
            lease_token: "secret-token".into(),
            batch_id: "b1".into(),
            subject_id: "s1".into(),
            attempt: 2,
            max_attempts: 5,
            kind: "multi".into(),
            payload: "{}".into(),
            receipts: None,
            given_back: 0,
            limits: None,
            start_at: 0,
            refused_since: None,
        };
        let body: Value =
            serde_json::from_str(&delivery_body(&item, "push", &json!({"k": "v"}))).unwrap();
        assert_eq!(
            body,
            json!({"item_id": 42, "batch_id": "b1", "subject_id": "s1", "attempt": 2,
                   "channel": "push", "data": {"k": "v"}})
        );
    }

    #[test]
    fn listings_hide_the_signing_secret() {
        let mut p = json!({"channels": channels(1), "signing_secret": "subject-secret-0123"});
        Multi.redact(&mut p);
        assert_eq!(p["signing_secret"], json!(super::super::webhook::REDACTED));
    }
}
