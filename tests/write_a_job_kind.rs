//! The example of docs/api.md ("Write your own job kind"), compiled and run: the
//! text between the markers is the one the page shows, word for word.

// example:start
use cron_fanout::core::target::{self, TargetPolicy};
use cron_fanout::jobs::{Context, Job, Outcome, Policy, Request};
use cron_fanout::Fanout;
use serde::Deserialize;

/// `{"url": "https://…", "user": "ada"}`: tell one user's endpoint it is time.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NudgePayload {
    pub url: String,
    pub user: String,
}

pub struct Nudge;

impl Job for Nudge {
    type Payload = NudgePayload;

    fn name(&self) -> &'static str {
        "nudge"
    }

    // Runs when subjects and items are written: a bad payload is a 400.
    fn validate(&self, p: &NudgePayload, targets: &TargetPolicy) -> Result<(), String> {
        target::validate(&p.url, targets).map_err(|e| e.to_string())?;
        Ok(())
    }

    async fn run(&self, ctx: &Context<'_>, p: NudgePayload) -> Outcome {
        let body = serde_json::json!({ "user": p.user, "attempt": ctx.item.attempt });
        let request = Request::post_json(&p.url, body.to_string())
            .header("Idempotency-Key", &ctx.item.item_id.to_string());
        match ctx.fetch(request).await {
            Ok(r) if (200..300).contains(&r.status) => Outcome::Done,
            Ok(r) if r.status == 429 || r.status >= 500 => {
                Outcome::Retry(format!("HTTP {}", r.status))
            }
            Ok(r) => Outcome::Fail(format!("HTTP {}", r.status)),
            Err(e) => Outcome::Retry(e),
        }
    }

    // Optional: its own settings, here a run may take 2 s (not JOB_TIMEOUT_MS).
    fn policy(&self) -> Policy {
        Policy {
            timeout_ms: Some(2_000),
            ..Policy::default()
        }
    }
}

/// The orchestrator with this Worker's kinds: the built-in ones and `nudge`.
pub fn fanout() -> Fanout {
    Fanout::new().job(Nudge)
}
// example:end

use cron_fanout::core::model::ClaimedItem;
use cron_fanout::jobs::memory::{Answer, MemoryOutbound};
use cron_fanout::jobs::{Ran, RunConfig};
use serde_json::json;

const PUBLIC: TargetPolicy = TargetPolicy {
    allow_private: false,
    own_host: None,
    own_hostnames: &[],
    services: &[],
};

fn item(payload: serde_json::Value) -> ClaimedItem {
    ClaimedItem {
        item_id: 7,
        lease_token: "t".into(),
        batch_id: "b".into(),
        subject_id: "ada".into(),
        attempt: 1,
        max_attempts: 3,
        kind: "nudge".into(),
        payload: payload.to_string(),
        receipts: None,
    }
}

fn run(out: &MemoryOutbound, item: &ClaimedItem) -> Ran {
    let cfg = RunConfig {
        job_timeout_ms: 10_000,
        ..RunConfig::default()
    };
    out.block_on(fanout().jobs().run(item, &cfg, out, None))
}

/// The text of `source` between the lines `// <name>:start` and `// <name>:end`.
fn marked<'a>(source: &'a str, name: &str) -> &'a str {
    source
        .split(&format!("// {name}:start\n"))
        .nth(1)
        .and_then(|rest| rest.split(&format!("// {name}:end")).next())
        .unwrap_or_else(|| panic!("no {name} markers"))
}

/// docs/api.md has `code` as a Rust block of its own; else `failure`.
fn assert_the_page_shows(code: &str, failure: &str) {
    let page = include_str!("../docs/api.md");
    assert!(page.contains(&format!("```rust\n{code}```")), "{failure}");
}

#[test]
fn the_page_shows_this_example_word_for_word() {
    assert_the_page_shows(
        marked(include_str!("write_a_job_kind.rs"), "example"),
        "docs/api.md must show the example of tests/write_a_job_kind.rs as it is",
    );
}

/// The Worker's `#[event]` functions on the page are those of
/// `examples/hello-kind`, which is built for the Worker and run end to end.
#[test]
fn the_page_shows_the_event_functions_of_the_example_worker_word_for_word() {
    assert_the_page_shows(
        marked(include_str!("../examples/hello-kind/src/lib.rs"), "events"),
        "docs/api.md must show the event functions of examples/hello-kind as they are",
    );
}

#[test]
fn the_example_kind_validates_its_payload_at_write_time() {
    let fanout = fanout();
    let jobs = fanout.jobs();
    let ok = json!({"url": "https://example.com/nudge", "user": "ada"});
    assert!(jobs.check_payload("nudge", &ok, &PUBLIC).is_ok());
    let private = json!({"url": "http://10.0.0.1/", "user": "ada"});
    assert!(jobs.check_payload("nudge", &private, &PUBLIC).is_err());
    let extra = json!({"url": "https://example.com/", "user": "ada", "x": 1});
    assert!(jobs.check_payload("nudge", &extra, &PUBLIC).is_err());
}

#[test]
fn the_example_kind_runs_on_the_host_through_the_seam() {
    let out = MemoryOutbound::new(0);
    out.answer("https://example.com/nudge", Answer::status(503))
        .answer("https://example.com/nudge", Answer::status(204))
        .answer("https://example.com/nudge", Answer::hang());
    let it = item(json!({"url": "https://example.com/nudge", "user": "ada"}));
    assert_eq!(run(&out, &it).outcome, Outcome::Retry("HTTP 503".into()));
    assert_eq!(run(&out, &it).outcome, Outcome::Done);
    // Its own timeout, not JOB_TIMEOUT_MS.
    assert_eq!(
        run(&out, &it).outcome,
        Outcome::Retry("timed out after 2000 ms".into())
    );
    let sent = out.sent();
    assert_eq!(sent[0].request.header_value("Idempotency-Key"), Some("7"));
    assert_eq!(
        sent[0].request.body.as_deref(),
        Some(r#"{"attempt":1,"user":"ada"}"#)
    );
}
