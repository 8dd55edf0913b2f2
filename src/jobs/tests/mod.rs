//! The registry, and each built-in kind's run path through the in-memory
//! outbound seam (`memory::MemoryOutbound`): what it sends, and what each answer
//! (or none) becomes.

use serde_json::{json, Value};

use super::memory::{Answer, Ended, MemoryOutbound, Sent};
use super::*;
use crate::core::security::signature;

const POLICY: TargetPolicy = TargetPolicy::PUBLIC;
/// 2026-11-24T12:00:00Z, in ms.
const NOW: i64 = 1_795_521_600_000;
const WEBHOOK_SECRET: &str = "webhook-secret-0123456789";

fn config() -> RunConfig {
    RunConfig {
        invocation: None,
        webhook_secret: WEBHOOK_SECRET.into(),
        dispatch_secrets: vec!["dispatch-secret-0123456789".into()],
        allow_private_targets: false,
        own_hostnames: Vec::new(),
        job_timeout_ms: 10_000,
        service_bindings: vec!["HANDLER".into(), "GONE".into()],
    }
}

fn item(kind: &str, payload: Value) -> ClaimedItem {
    ClaimedItem {
        item_id: 42,
        lease_token: "lease".into(),
        batch_id: "b1".into(),
        subject_id: "s1".into(),
        attempt: 2,
        max_attempts: 5,
        kind: kind.into(),
        payload: payload.to_string(),
        receipts: None,
        given_back: 0,
        limits: None,
        start_at: 0,
        refused_since: None,
    }
}

/// Run `item` with the built-in kinds against `out`.
fn run(out: &MemoryOutbound, item: &ClaimedItem) -> Ran {
    run_with(&Jobs::builtin(), out, item, &config())
}

fn run_with(jobs: &Jobs, out: &MemoryOutbound, item: &ClaimedItem, cfg: &RunConfig) -> Ran {
    out.block_on(jobs.run(item, cfg, out, None))
}

fn webhook(url: &str) -> ClaimedItem {
    item("webhook", json!({"url": url, "data": {"n": 1}}))
}

fn header<'a>(sent: &'a Sent, name: &str) -> &'a str {
    sent.request.header_value(name).unwrap_or_default()
}

/// The delivery's signature checks out with `secret` at the virtual time.
fn assert_signed(sent: &Sent, secret: &str) {
    let body = sent.request.body.as_deref().unwrap_or_default();
    let now_secs = sent.at_ms / 1_000;
    signature::verify(
        secret,
        Some(header(sent, "Fanout-Signature")),
        now_secs,
        body.as_bytes(),
    )
    .unwrap_or_else(|e| panic!("bad signature: {e:?}"));
}

// --- the registry ---------------------------------------------------------------

#[test]
fn unknown_kinds_name_the_known_ones() {
    let jobs = Jobs::builtin();
    let err = jobs
        .check_payload("email", &json!({}), &POLICY)
        .unwrap_err();
    assert_eq!(
        err,
        "unknown kind \"email\"; known kinds: webhook, multi, service, noop"
    );
    // Internal kinds run, but no subject or item may name them.
    assert!(jobs.knows("callback"));
    let err = jobs
        .check_payload("callback", &json!({"url": "https://example.com/"}), &POLICY)
        .unwrap_err();
    assert!(err.starts_with("unknown kind \"callback\""), "{err}");
}

#[test]
fn known_kinds_validate_their_payload() {
    let jobs = Jobs::builtin();
    let check = |kind, payload| jobs.check_payload(kind, &payload, &POLICY);
    assert!(check("webhook", json!({"url": "https://example.com/x"})).is_ok());
    assert!(check("webhook", json!({"url": "ftp://example.com/x"})).is_err());
    assert!(check("noop", json!({})).is_ok());
    assert!(check("noop", json!([])).is_err());
    let channels = json!({"channels": [{"name": "email", "url": "https://example.com/e"}]});
    assert!(check("multi", channels).is_ok());
    assert!(check("multi", json!({"channels": []})).is_err());
}

#[test]
fn only_multi_has_channels_and_the_inline_cost_is_its_worst() {
    let jobs = Jobs::builtin();
    assert!(jobs.has_channels("multi"));
    for kind in ["webhook", "service", "noop", "callback", "unknown"] {
        assert!(!jobs.has_channels(kind), "{kind}");
    }
    assert_eq!(
        jobs.max_subrequests_per_run(),
        crate::core::batch::receipts::MAX_CHANNELS as i64
    );
}

/// A user's kind: typed payload, its own validation, policy and limit keys.
struct Greet;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GreetPayload {
    name: String,
}

impl Job for Greet {
    type Payload = GreetPayload;

    fn name(&self) -> &'static str {
        "greet"
    }

    fn validate(&self, p: &GreetPayload, _targets: &TargetPolicy) -> Result<(), String> {
        if p.name.is_empty() {
            return Err("name must not be empty".into());
        }
        Ok(())
    }

    async fn run(&self, ctx: &Context<'_>, p: GreetPayload) -> Outcome {
        let url = format!("https://greet.test/{}", p.name);
        match ctx.fetch(Request::post_json(&url, "{}".into())).await {
            Ok(r) if r.status == 200 => Outcome::Done,
            Ok(r) => Outcome::Retry(format!("HTTP {}", r.status)),
            Err(e) => Outcome::Retry(e),
        }
    }

    fn policy(&self) -> Policy {
        Policy {
            timeout_ms: Some(2_000),
            max_attempts: Some(3),
            ..Policy::default()
        }
    }

    fn limit_keys(&self, p: &GreetPayload) -> Vec<String> {
        vec!["greet.test".into(), format!("user:{}", p.name)]
    }
}

#[test]
fn a_kinds_limit_keys_are_read_from_the_payload_and_merged_after_the_items_own() {
    let jobs = Jobs::builtin().with(Greet);
    let from_kind = jobs
        .check_item("greet", &json!({"name": "ada"}), &POLICY)
        .unwrap();
    assert_eq!(from_kind, ["greet.test", "user:ada"]);
    assert_eq!(
        jobs.check_item("noop", &json!({}), &POLICY).unwrap(),
        Vec::<String>::new(),
        "none by default"
    );
    // What `POST /batches` stores for an item: its own keys, then the kind's, each once.
    use crate::core::batch::requests::{parse_json, validate_create_batch, CreateBatch};
    let body = json!({"items": [{"subject_id": "a", "kind": "greet", "payload": {"name": "ada"},
                                 "limits": ["tenant:x", "user:ada"]}]});
    let request =
        validate_create_batch(parse_json(body.to_string().as_bytes()).unwrap(), &|k, p| {
            jobs.check_item(k, p, &POLICY)
        })
        .unwrap();
    let CreateBatch::FromItems { items, .. } = request else {
        panic!("explicit items")
    };
    assert_eq!(items[0].keys, ["tenant:x", "user:ada", "greet.test"]);
    // A name that makes no key: the write is refused.
    let body = json!({"items": [{"subject_id": "a", "kind": "greet", "payload": {"name": "a b"}}]});
    let e = validate_create_batch(parse_json(body.to_string().as_bytes()).unwrap(), &|k, p| {
        jobs.check_item(k, p, &POLICY)
    })
    .unwrap_err();
    assert_eq!(e.code(), "invalid_limits");
}

#[test]
fn a_registered_kind_is_validated_like_a_built_in_one() {
    let jobs = Jobs::builtin().with(Greet);
    assert_eq!(
        jobs.names(),
        ["webhook", "multi", "service", "noop", "greet"]
    );
    assert!(jobs
        .check_payload("greet", &json!({"name": "ada"}), &POLICY)
        .is_ok());
    let err = jobs
        .check_payload("greet", &json!({"name": ""}), &POLICY)
        .unwrap_err();
    assert_eq!(err, "name must not be empty");
    let err = jobs
        .check_payload("greet", &json!({"nom": "ada"}), &POLICY)
        .unwrap_err();
    assert!(
        err.starts_with("greet payload: unknown field `nom`"),
        "{err}"
    );
    // Not registered: unknown, as before.
    assert!(Jobs::builtin()
        .check_payload("greet", &json!({"name": "a"}), &POLICY)
        .is_err());
}

#[test]
fn a_registered_kind_runs_through_the_seam() {
    let jobs = Jobs::builtin().with(Greet);
    let out = MemoryOutbound::new(NOW);
    out.answer("https://greet.test/ada", Answer::status(503))
        .answer("https://greet.test/ada", Answer::status(200));
    let greet = item("greet", json!({"name": "ada"}));
    assert_eq!(
        run_with(&jobs, &out, &greet, &config()).outcome,
        Outcome::Retry("HTTP 503".into())
    );
    assert_eq!(
        run_with(&jobs, &out, &greet, &config()),
        Outcome::Done.into()
    );
    // A stored payload it cannot read fails for good, without running.
    let bad = ClaimedItem {
        payload: "{\"x\": 1}".into(),
        ..greet
    };
    let ran = run_with(&jobs, &out, &bad, &config());
    assert!(
        matches!(&ran.outcome, Outcome::Fail(r) if r.starts_with("not run: greet payload")),
        "{ran:?}"
    );
    assert_eq!(out.sent().len(), 2);
}

#[test]
fn registering_refuses_taken_names_bad_names_and_bad_policies() {
    let mut jobs = Jobs::builtin();
    assert!(jobs.register(Greet).is_ok());
    assert_eq!(
        jobs.register(Greet).unwrap_err().0,
        "job kind \"greet\" is already registered"
    );
    struct Named(&'static str, Policy);
    impl Job for Named {
        type Payload = Value;
        fn name(&self) -> &'static str {
            self.0
        }
        async fn run(&self, _: &Context<'_>, _: Value) -> Outcome {
            Outcome::Done
        }
        fn policy(&self) -> Policy {
            self.1
        }
    }
    let ok = Policy::default();
    for taken in ["webhook", "callback"] {
        assert!(jobs.register(Named(taken, ok)).is_err(), "{taken}");
    }
    assert!(jobs.register(Named("", ok)).is_err());
    let bad = [
        Policy {
            max_attempts: Some(0),
            ..ok
        },
        Policy {
            max_attempts: Some(101),
            ..ok
        },
        Policy {
            timeout_ms: Some(0),
            ..ok
        },
        Policy {
            retry_base_ms: Some(10),
            retry_max_ms: Some(5),
            ..ok
        },
    ];
    for policy in bad {
        let err = jobs.register(Named("k", policy)).unwrap_err().0;
        assert!(err.starts_with("job kind \"k\": "), "{err}");
    }
    assert_eq!(jobs.names().len(), 5);
}

#[test]
fn a_kinds_policy_overrides_the_global_settings_within_the_lease() {
    let global = RetryPolicy {
        base_ms: 60_000,
        max_ms: 1_800_000,
    };
    let p = Policy {
        max_attempts: Some(3),
        timeout_ms: Some(2_000),
        retry_base_ms: Some(1_000),
        retry_max_ms: None,
    };
    assert_eq!(p.max_attempts(5), 3);
    assert_eq!(
        p.retry(global),
        RetryPolicy {
            base_ms: 1_000,
            max_ms: 1_800_000
        }
    );
    assert_eq!(p.timeout_ms(10_000), 2_000);
    // Leases are sized from JOB_TIMEOUT_MS: a longer own timeout is clamped to it.
    assert_eq!(p.timeout_ms(1_500), 1_500);
    // A cap below the global base caps the base too.
    let capped = Policy {
        retry_max_ms: Some(5_000),
        ..Policy::default()
    };
    assert_eq!(
        capped.retry(global),
        RetryPolicy {
            base_ms: 5_000,
            max_ms: 5_000
        }
    );
    assert_eq!(Policy::default().retry(global), global);
    assert_eq!(Policy::default().max_attempts(5), 5);
}

#[test]
fn a_run_past_its_kinds_timeout_is_retried_and_its_fetch_aborted() {
    let jobs = Jobs::builtin().with(Greet);
    let out = MemoryOutbound::new(NOW);
    out.answer("https://greet.test/ada", Answer::hang());
    let ran = run_with(
        &jobs,
        &out,
        &item("greet", json!({"name": "ada"})),
        &config(),
    );
    assert_eq!(ran, Outcome::Retry("timed out after 2000 ms".into()).into());
    assert_eq!(out.now(), NOW + 2_000);
    assert_eq!(out.sent()[0].ended, Ended::Aborted);
}

// --- webhook ------------------------------------------------------------------

#[test]
fn a_webhook_answered_2xx_is_done_and_was_signed_with_its_idempotency_key() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://hooks.test/a", Answer::status(204).after(300));
    let ran = run(&out, &webhook("https://hooks.test/a"));
    assert_eq!(ran, Outcome::Done.into());
    let sent = out.sent();
    assert_eq!(sent.len(), 1);
    let s = &sent[0];
    assert_eq!(s.request.method, "POST");
    assert_eq!(header(s, "Content-Type"), "application/json");
    assert_eq!(header(s, "Idempotency-Key"), "42");
    let body: Value = serde_json::from_str(s.request.body.as_deref().unwrap()).unwrap();
    assert_eq!(
        body,
        json!({"item_id": 42, "batch_id": "b1", "subject_id": "s1", "attempt": 2, "data": {"n": 1}})
    );
    assert_signed(s, WEBHOOK_SECRET);
    // No secret of the Worker travels in a header.
    for (_, v) in &s.request.headers {
        assert!(
            !v.contains(WEBHOOK_SECRET) && !v.contains("dispatch-secret"),
            "{v}"
        );
    }
}

#[test]
fn a_webhook_retries_on_408_425_429_5xx_and_network_errors() {
    for status in [408, 425, 429, 500, 502, 503, 599] {
        let out = MemoryOutbound::new(NOW);
        out.answer("https://hooks.test/a", Answer::status(status));
        let ran = run(&out, &webhook("https://hooks.test/a"));
        assert_eq!(
            ran.outcome,
            Outcome::Retry(format!("HTTP {status}")),
            "{status}"
        );
    }
    let out = MemoryOutbound::new(NOW);
    out.answer("https://hooks.test/a", Answer::error("connection refused"));
    let ran = run(&out, &webhook("https://hooks.test/a"));
    assert_eq!(
        ran.outcome,
        Outcome::Retry("network error: connection refused".into())
    );
}

#[test]
fn a_webhook_with_no_answer_times_out_as_a_retry_and_its_fetch_is_aborted() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://hooks.test/a", Answer::hang());
    let ran = run(&out, &webhook("https://hooks.test/a"));
    assert_eq!(
        ran,
        Outcome::Retry("timed out after 10000 ms".into()).into()
    );
    assert_eq!(out.now(), NOW + 10_000);
    assert_eq!(out.sent()[0].ended, Ended::Aborted);
}

#[test]
fn a_webhook_fails_for_good_on_3xx_and_other_4xx() {
    for status in [400, 401, 404, 410, 422] {
        let out = MemoryOutbound::new(NOW);
        out.answer("https://hooks.test/a", Answer::status(status).body("nope"));
        let ran = run(&out, &webhook("https://hooks.test/a"));
        assert_eq!(
            ran.outcome,
            Outcome::Fail(format!("HTTP {status}: nope")),
            "{status}"
        );
    }
    for status in [301, 302, 303, 307, 308] {
        let out = MemoryOutbound::new(NOW);
        out.answer(
            "https://hooks.test/a",
            Answer::status(status).header("Location", "https://elsewhere.test/"),
        );
        let ran = run(&out, &webhook("https://hooks.test/a"));
        assert_eq!(
            ran.outcome,
            Outcome::Fail(format!("HTTP {status}: redirects are not followed"))
        );
        // Not followed: one request, to the subject's URL only.
        assert_eq!(out.sent().len(), 1);
    }
}

#[test]
fn a_permanent_failure_keeps_200_bytes_of_the_answers_text_on_one_line() {
    let out = MemoryOutbound::new(NOW);
    // 249 bytes: "é" is two bytes and byte 200 falls inside one, which is not cut.
    let text = format!("unknown user\n{}", "é".repeat(118));
    out.answer("https://hooks.test/a", Answer::status(422).body(&text));
    let ran = run(&out, &webhook("https://hooks.test/a"));
    let Outcome::Fail(reason) = ran.outcome else {
        panic!("{ran:?}")
    };
    let kept = reason.strip_prefix("HTTP 422: ").expect(&reason);
    assert!(kept.starts_with("unknown user éé"), "{kept}");
    assert_eq!(kept.len(), 200 - 1, "{kept}");
    // An empty or blank answer adds nothing.
    let out = MemoryOutbound::new(NOW);
    out.answer("https://hooks.test/a", Answer::status(404).body(" \n"));
    let ran = run(&out, &webhook("https://hooks.test/a"));
    assert_eq!(ran.outcome, Outcome::Fail("HTTP 404".into()));
}

#[test]
fn a_retry_after_in_seconds_on_a_retry_answer_is_the_runs_delay() {
    let out = MemoryOutbound::new(NOW);
    out.answer(
        "https://hooks.test/a",
        Answer::status(429).header("Retry-After", "120"),
    );
    let ran = run(&out, &webhook("https://hooks.test/a"));
    assert_eq!(ran.outcome, Outcome::Retry("HTTP 429".into()));
    assert_eq!(ran.retry_after_ms, Some(120_000));
}

#[test]
fn a_retry_after_that_is_no_wait_or_on_a_failure_is_ignored() {
    let answers = [
        Answer::status(503).header("Retry-After", "-5"),
        Answer::status(503).header("Retry-After", "soon"),
        Answer::status(400).header("Retry-After", "30"),
        Answer::status(200).header("Retry-After", "30"),
    ];
    for answer in answers {
        let out = MemoryOutbound::new(NOW);
        out.answer("https://hooks.test/a", answer.clone());
        let ran = run(&out, &webhook("https://hooks.test/a"));
        assert_eq!(ran.retry_after_ms, None, "{answer:?}");
    }
}

#[test]
fn a_webhooks_refusal_is_a_retry_with_the_receivers_wait_and_a_plain_403_is_permanent() {
    // GitHub's primary limit: a 403 with nothing left and the reset in epoch
    // seconds, measured against the answer's Date (NOW, here).
    let out = MemoryOutbound::new(NOW);
    out.answer(
        "https://hooks.test/a",
        Answer::status(403)
            .header("Date", "Tue, 24 Nov 2026 12:00:00 GMT")
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", "1795521690")
            .body(r#"{"message":"API rate limit exceeded"}"#),
    );
    let ran = run(&out, &webhook("https://hooks.test/a"));
    assert_eq!(ran.outcome, Outcome::Retry("HTTP 403: rate limited".into()));
    assert_eq!(ran.retry_after_ms, Some(90_000));
    assert_eq!(ran.refused, Some(RefusedBy::default()));
    // Shopify's decimal Retry-After.
    let out = MemoryOutbound::new(NOW);
    out.answer(
        "https://hooks.test/a",
        Answer::status(429).header("Retry-After", "2.0"),
    );
    let ran = run(&out, &webhook("https://hooks.test/a"));
    assert_eq!(
        (ran.retry_after_ms, ran.refused.is_some()),
        (Some(2_000), true)
    );
    // A 403 without a rate-limit signal is the receiver's "no".
    let out = MemoryOutbound::new(NOW);
    out.answer(
        "https://hooks.test/a",
        Answer::status(403).body("forbidden"),
    );
    let ran = run(&out, &webhook("https://hooks.test/a"));
    assert_eq!(ran.outcome, Outcome::Fail("HTTP 403: forbidden".into()));
    assert_eq!((ran.retry_after_ms, ran.refused), (None, None));
    // A 500 is a failure, whatever wait it names.
    let out = MemoryOutbound::new(NOW);
    out.answer(
        "https://hooks.test/a",
        Answer::status(500).header("Retry-After", "5"),
    );
    let ran = run(&out, &webhook("https://hooks.test/a"));
    assert_eq!((ran.retry_after_ms, ran.refused), (Some(5_000), None));
}

#[test]
fn a_kind_of_ones_own_gets_the_receivers_word_on_what_ctx_fetch_answers() {
    let jobs = Jobs::builtin().with(Greet);
    let greet = item("greet", json!({"name": "ada"}));
    let out = MemoryOutbound::new(NOW);
    out.answer(
        "https://greet.test/ada",
        Answer::status(429).body(r#"{"retry_after":1.337,"global":false}"#),
    );
    let ran = run_with(&jobs, &out, &greet, &config());
    assert_eq!(ran.outcome, Outcome::Retry("HTTP 429".into()));
    assert_eq!(ran.retry_after_ms, Some(1_337));
    assert_eq!(ran.refused, Some(RefusedBy::default()));
    // A refusal the kind got past (it answered done) is none.
    let out = MemoryOutbound::new(NOW);
    out.answer("https://greet.test/ada", Answer::status(200));
    let ran = run_with(&jobs, &out, &greet, &config());
    assert_eq!((ran.outcome, ran.refused), (Outcome::Done, None));
}

#[test]
fn a_subjects_own_secret_signs_its_webhook() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://hooks.test/a", Answer::status(200));
    let own = "subject-secret-0123";
    let hook = item(
        "webhook",
        json!({"url": "https://hooks.test/a", "signing_secret": own}),
    );
    assert_eq!(run(&out, &hook), Outcome::Done.into());
    assert_signed(&out.sent()[0], own);
}

#[test]
fn a_webhook_is_checked_again_at_run_time_and_not_sent_when_refused() {
    let out = MemoryOutbound::new(NOW);
    // Written while ALLOW_PRIVATE_TARGETS was true; it is false now.
    let ran = run(&out, &webhook("http://127.0.0.1:9000/hook"));
    assert!(
        matches!(&ran.outcome, Outcome::Fail(r) if r.starts_with("not sent: ") && r.contains("loopback")),
        "{ran:?}"
    );
    // A subject secret equal to the dispatch secret would let its receiver forge dispatches.
    let forged = item(
        "webhook",
        json!({"url": "https://hooks.test/a", "signing_secret": "dispatch-secret-0123456789"}),
    );
    let ran = run(&out, &forged);
    assert!(
        matches!(&ran.outcome, Outcome::Fail(r) if r.contains("DISPATCH_SECRET")),
        "{ran:?}"
    );
    assert!(out.sent().is_empty());
}

/// A target written before `OWN_HOSTNAMES` named its host fails when it runs
/// (webhook, a multi channel, a callback), on any port, even with
/// `ALLOW_PRIVATE_TARGETS`; nothing is sent.
#[test]
fn a_target_written_before_own_hostnames_named_it_fails_at_run_time() {
    let own = "cron-fanout.acct.workers.dev";
    let cfg = RunConfig {
        own_hostnames: vec![own.to_string()],
        allow_private_targets: true,
        ..config()
    };
    let summary = json!({
        "batch_id": "b1", "key": "k", "status": "finished", "total": 0, "completed": 0,
        "failed": 0, "cancelled": 0, "created_at": NOW, "finished_at": NOW,
    });
    let rows = [
        webhook(&format!("https://{own}/batches")),
        webhook(&format!("https://{own}:8443/batches")),
        item(
            "multi",
            json!({"channels": [{"name": "a", "url": "https://a.test/"}, {"name": "b", "url": format!("https://{own}/")}]}),
        ),
        item(
            "callback",
            json!({"url": format!("https://{own}/cb"), "summary": summary}),
        ),
    ];
    for row in &rows {
        let out = MemoryOutbound::new(NOW);
        let ran = run_with(&Jobs::builtin(), &out, row, &cfg);
        assert!(
            matches!(&ran.outcome, Outcome::Fail(r) if r.contains("OWN_HOSTNAMES")),
            "{}: {ran:?}",
            row.payload
        );
        assert!(out.sent().is_empty(), "{}", row.payload);
        // Without the setting the same row is sent.
        let out = MemoryOutbound::new(NOW);
        out.block_on(Jobs::builtin().run(
            row,
            &RunConfig {
                allow_private_targets: true,
                ..config()
            },
            &out,
            None,
        ));
        assert!(!out.sent().is_empty(), "{}", row.payload);
    }
}

mod multi_and_callbacks;
mod service_items;
