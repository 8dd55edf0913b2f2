//! The example of docs/guides/own-kind.md ("Write your own job kind"), compiled and run: the
//! text between the markers is the one the page shows, word for word.

// example:start
use cron_fanout::core::target::{self, TargetPolicy};
use cron_fanout::jobs::{Context, Job, Outcome, Policy, Request};
use cron_fanout::Fanout;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// `{"feed_url": "https://…/feed.xml", "notify_url": "https://…"}`: tell
/// `notify_url` when the feed changed since the last run (its hash is kept per
/// subject in the KV namespace `FEEDS`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedPayload {
    pub feed_url: String,
    pub notify_url: String,
}

pub struct FeedCheck;

impl Job for FeedCheck {
    type Payload = FeedPayload;

    fn name(&self) -> &'static str {
        "feed_check"
    }

    // Runs when subjects and items are written: a bad payload is a 400.
    fn validate(&self, p: &FeedPayload, targets: &TargetPolicy) -> Result<(), String> {
        target::validate_field("feed_url", &p.feed_url, targets)?;
        target::validate_field("notify_url", &p.notify_url, targets)?;
        Ok(())
    }

    async fn run(&self, ctx: &Context<'_>, p: FeedPayload) -> Outcome {
        // A GET reads the answer's body (up to 64 KiB unless told otherwise).
        let feed = match ctx.fetch(Request::get(&p.feed_url)).await {
            Ok(r) if (200..300).contains(&r.status) => r,
            Ok(r) => return Outcome::Retry(format!("feed: HTTP {}", r.status)),
            Err(e) => return Outcome::Retry(format!("feed: {e}")),
        };
        let hash = match feed.text() {
            Ok(text) => hex::encode(Sha256::digest(text)),
            Err(e) => return Outcome::Fail(format!("feed: {e}")),
        };
        // The Worker's KV binding: its Env on the Worker, the harness's on the host.
        let seen = match ctx.kv("FEEDS") {
            Ok(kv) => kv,
            Err(e) => return Outcome::Fail(e),
        };
        let subject = &ctx.item.subject_id;
        match seen.get(subject).await {
            Ok(Some(last)) if last == hash => return Outcome::Done,
            Ok(_) => {}
            Err(e) => return Outcome::Retry(e),
        }
        let body =
            serde_json::json!({ "subject": subject, "feed_url": p.feed_url, "sha256": hash });
        let notify = Request::post_json(&p.notify_url, body.to_string())
            .header("Idempotency-Key", &format!("{subject}:{hash}"));
        match ctx.fetch(notify).await {
            Ok(r) if (200..300).contains(&r.status) => {}
            Ok(r) if r.status == 429 || r.status >= 500 => {
                return Outcome::Retry(format!("notify: HTTP {}", r.status))
            }
            Ok(r) => return Outcome::Fail(format!("notify: HTTP {}", r.status)),
            Err(e) => return Outcome::Retry(format!("notify: {e}")),
        }
        match seen.put(subject, &hash).await {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Retry(e),
        }
    }

    // A GET, a KV read, a POST and a KV write: counted in inline mode's budget.
    fn subrequests_per_run(&self) -> i64 {
        4
    }

    // Optional: its own settings, here a run may take 5 s (not JOB_TIMEOUT_MS).
    fn policy(&self) -> Policy {
        Policy {
            timeout_ms: Some(5_000),
            ..Policy::default()
        }
    }

    // Optional: the limit keys its items hold, here `feeds` on every item, so
    // `PUT /limits/feeds` paces every feed check (flow control).
    fn limit_keys(&self, _: &FeedPayload) -> Vec<String> {
        vec!["feeds".into()]
    }
}

/// The orchestrator with this Worker's kinds: the built-in ones and `feed_check`.
pub fn fanout() -> Fanout {
    Fanout::new().job(FeedCheck)
}
// example:end

use cron_fanout::testing::{self, Answer, Harness};
use serde_json::json;

const FEED: &str = "https://example.com/feed.xml";
const NOTIFY: &str = "https://hooks.example.com/changed";

/// The text of `source` between the lines `// <name>:start` and `// <name>:end`.
fn marked<'a>(source: &'a str, name: &str) -> &'a str {
    source
        .split(&format!("// {name}:start\n"))
        .nth(1)
        .and_then(|rest| rest.split(&format!("// {name}:end")).next())
        .unwrap_or_else(|| panic!("no {name} markers"))
}

/// docs/guides/own-kind.md has `code` as a Rust block of its own; else `failure`.
fn assert_the_page_shows(code: &str, failure: &str) {
    let page = include_str!("../docs/guides/own-kind.md");
    assert!(page.contains(&format!("```rust\n{code}```")), "{failure}");
}

#[test]
fn the_page_shows_this_example_word_for_word() {
    assert_the_page_shows(
        marked(include_str!("write_a_job_kind.rs"), "example"),
        "docs/guides/own-kind.md must show the example of tests/write_a_job_kind.rs as it is",
    );
}

/// The Worker's `#[event]` functions on the page are those of
/// `examples/hello-kind`, which is built for the Worker and run end to end.
#[test]
fn the_page_shows_the_event_functions_of_the_example_worker_word_for_word() {
    assert_the_page_shows(
        marked(include_str!("../examples/hello-kind/src/lib.rs"), "events"),
        "docs/guides/own-kind.md must show the event functions of examples/hello-kind as they are",
    );
}

#[test]
fn the_example_kind_validates_its_payload_at_write_time() {
    let ok = json!({"feed_url": FEED, "notify_url": NOTIFY});
    assert!(testing::check(&FeedCheck, ok).is_ok());
    let private = json!({"feed_url": FEED, "notify_url": "http://10.0.0.1/"});
    assert!(testing::check(&FeedCheck, private)
        .unwrap_err()
        .starts_with("notify_url host 10.0.0.1"));
    let extra = json!({"feed_url": FEED, "notify_url": NOTIFY, "x": 1});
    assert!(testing::check(&FeedCheck, extra).is_err());
}

#[test]
fn the_example_kinds_items_hold_its_limit_keys() {
    let ok = json!({"feed_url": FEED, "notify_url": NOTIFY});
    assert_eq!(testing::check(&FeedCheck, ok).unwrap(), ["feeds"]);
}

#[test]
fn the_example_kind_notifies_a_changed_feed_once() {
    let h = Harness::new();
    h.bind_kv("FEEDS")
        .answer(FEED, Answer::status(503))
        .answer(FEED, Answer::status(200).body("<rss/>"))
        .answer(NOTIFY, Answer::status(204))
        .answer(FEED, Answer::status(200).body("<rss/>"))
        .answer(FEED, Answer::hang());
    let item = || testing::item(json!({"feed_url": FEED, "notify_url": NOTIFY})).subject("ada");
    let run = || h.run_in(fanout().jobs(), item().kind("feed_check")).outcome;
    assert_eq!(run(), Outcome::Retry("feed: HTTP 503".into()));
    assert_eq!(run(), Outcome::Done);
    // sha256("<rss/>")
    let hash = h.kv_value("FEEDS", "ada").unwrap();
    assert_eq!(hash.len(), 64);
    let sent = h.sent();
    assert_eq!(
        sent[2].request.body.as_deref(),
        Some(format!(r#"{{"feed_url":"{FEED}","sha256":"{hash}","subject":"ada"}}"#).as_str())
    );
    // The same feed again: nobody told.
    assert_eq!(run(), Outcome::Done);
    assert_eq!(h.sent().len(), 4);
    // Its own timeout, not JOB_TIMEOUT_MS.
    assert_eq!(run(), Outcome::Retry("timed out after 5000 ms".into()));
}

#[test]
fn the_example_kind_without_its_kv_binding_fails_saying_so() {
    let h = Harness::new();
    h.answer(FEED, Answer::status(200).body("<rss/>"));
    let item = testing::item(json!({"feed_url": FEED, "notify_url": NOTIFY}));
    assert_eq!(
        h.run(&FeedCheck, item).outcome,
        Outcome::Fail(r#"no KV namespace is bound as "FEEDS""#.into())
    );
}
