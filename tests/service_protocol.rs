//! The `service` protocol's JSON Schemas (docs/schemas/, shown in docs/guides/own-worker.md)
//! say what the Worker sends and reads: a field added to the request, or a bound
//! changed on the answer, without its schema fails here.

use cron_fanout::core::model::{ClaimedItem, Outcome};
use cron_fanout::core::receipts::{self, MAX_CHANNELS, MAX_CHANNEL_NAME_CHARS, MAX_REASON_BYTES};
use cron_fanout::jobs::service::delivery_body;
use serde_json::{json, Value};

const REQUEST: &str = include_str!("../docs/schemas/service-request.schema.json");
const ANSWER: &str = include_str!("../docs/schemas/service-answer.schema.json");

fn schema(text: &str) -> Value {
    serde_json::from_str(text).expect("a schema is JSON")
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

fn strings(v: &Value) -> Vec<String> {
    let mut s: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    s.sort();
    s
}

#[test]
fn the_page_shows_both_schemas_word_for_word() {
    let page = include_str!("../docs/guides/own-worker.md");
    for (file, text) in [
        ("service-request.schema.json", REQUEST),
        ("service-answer.schema.json", ANSWER),
    ] {
        assert!(
            page.contains(&format!("```json\n{text}```")),
            "docs/guides/own-worker.md must show docs/schemas/{file} as it is"
        );
    }
}

#[test]
fn the_request_schema_requires_every_field_the_worker_sends_and_no_other() {
    let mut item = ClaimedItem::new(42, "b1", "ada", "service", "{}", 5, "t");
    item.attempt = 2;
    let sent: Value =
        serde_json::from_str(&delivery_body(&item, vec!["discord"], &json!({"n": 1}))).unwrap();
    let s = schema(REQUEST);
    assert_eq!(keys(&sent), keys(&s["properties"]));
    assert_eq!(keys(&sent), strings(&s["required"]));
    assert_eq!(
        s["properties"]["delivered"]["maxItems"],
        json!(MAX_CHANNELS)
    );
}

#[test]
fn the_answer_schema_has_the_bounds_and_outcomes_the_worker_reads() {
    let s = schema(ANSWER);
    let channels = &s["properties"]["channels"];
    assert_eq!(channels["maxProperties"], json!(MAX_CHANNELS));
    assert_eq!(
        channels["propertyNames"]["maxLength"],
        json!(MAX_CHANNEL_NAME_CHARS)
    );
    let [done, failing] = s["$defs"]["outcome"]["oneOf"]
        .as_array()
        .unwrap()
        .as_slice()
    else {
        panic!("two shapes of outcome");
    };
    assert_eq!(done["properties"]["outcome"]["const"], json!("done"));
    assert_eq!(
        strings(&failing["properties"]["outcome"]["enum"]),
        ["fail", "retry"]
    );
    assert_eq!(
        failing["properties"]["reason"]["maxLength"],
        json!(MAX_REASON_BYTES)
    );
    // Each shape's example is what the Worker reads as that outcome.
    let read = |v: Value| receipts::parse_reported(&json!({"c": v}), &Default::default());
    assert_eq!(
        read(json!({"outcome": "done"})).unwrap()["c"],
        Outcome::Done
    );
    assert_eq!(
        read(json!({"outcome": "retry", "reason": "429"})).unwrap()["c"],
        Outcome::Retry("429".into())
    );
    assert_eq!(
        read(json!({"outcome": "fail", "reason": "HTTP 400"})).unwrap()["c"],
        Outcome::Fail("HTTP 400".into())
    );
    assert!(
        read(json!({"outcome": "retry"})).is_err(),
        "a retry's reason is required"
    );
}

#[test]
fn the_answer_schemas_delays_are_read_as_the_item_s_own_and_slow_down_as_the_binding_s() {
    use cron_fanout::jobs::service::{classify_service_answer, Said};
    use cron_fanout::jobs::Response;
    let s = schema(ANSWER);
    assert_eq!(
        keys(&s["properties"]),
        ["after_seconds", "channels", "slow_down"]
    );
    let read = |body: Value| {
        let answer = Response::with_body(503, body.to_string());
        classify_service_answer(&answer, &Default::default(), 0).0
    };
    let own = read(json!({"after_seconds": 40}));
    assert_eq!(
        (own.retry_after_ms, own.said),
        (Some(40_000), Said::Handler)
    );
    let channel =
        read(json!({"channels": {"t": {"outcome": "retry", "reason": "x", "after_seconds": 2}}}));
    assert_eq!(
        (channel.retry_after_ms, channel.said),
        (Some(2_000), Said::Handler)
    );
    let slow = read(json!({"slow_down": {"after_seconds": 30}}));
    assert_eq!(
        (slow.retry_after_ms, slow.said),
        (
            Some(30_000),
            Said::SlowDown {
                with_failure: false
            }
        )
    );
}
