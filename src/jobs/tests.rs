//! The registry, and each built-in kind's run path through the in-memory
//! outbound seam (`memory::MemoryOutbound`): what it sends, and what each answer
//! (or none) becomes.

use serde_json::{json, Value};

use super::memory::{Answer, Ended, MemoryOutbound, Sent};
use super::*;
use crate::core::signature;

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
        crate::core::receipts::MAX_CHANNELS as i64
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
    use crate::core::requests::{parse_json, validate_create_batch, CreateBatch};
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

// --- multi --------------------------------------------------------------------

fn multi(channels: &[&str]) -> ClaimedItem {
    let channels: Vec<Value> = channels
        .iter()
        .map(|c| json!({"name": c, "url": format!("https://{c}.test/")}))
        .collect();
    item("multi", json!({"channels": channels, "data": {"n": 1}}))
}

#[test]
fn multi_sends_every_channel_signed_with_its_own_key_and_reports_each() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", Answer::status(200).after(100))
        .answer("https://push.test/", Answer::status(202).after(300));
    let ran = run(&out, &multi(&["email", "push"]));
    assert_eq!(ran.outcome, Outcome::Done);
    let channels = ran.channels.expect("multi reports its channels");
    assert_eq!(channels.get("email"), Some(&Outcome::Done));
    assert_eq!(channels.get("push"), Some(&Outcome::Done));
    let sent = out.sent();
    // All at once, not one after the other.
    assert_eq!(sent.iter().map(|s| s.at_ms).collect::<Vec<_>>(), [NOW, NOW]);
    assert_eq!(out.now(), NOW + 300);
    for (s, channel) in sent.iter().zip(["email", "push"]) {
        assert_eq!(header(s, "Idempotency-Key"), format!("42:{channel}"));
        let body: Value = serde_json::from_str(s.request.body.as_deref().unwrap()).unwrap();
        assert_eq!(body["channel"], json!(channel));
        assert_signed(s, WEBHOOK_SECRET);
    }
}

#[test]
fn a_channels_refusal_names_its_host_key_and_the_others_keep_their_answers() {
    // Discord refuses the push channel; email is delivered.
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", Answer::status(200))
        .answer(
            "https://push.test/",
            Answer::status(429)
                .header("Retry-After", "2")
                .header("X-RateLimit-Reset-After", "1.337"),
        );
    let ran = run(&out, &multi(&["email", "push"]));
    assert_eq!(ran.outcome, Outcome::Retry("channel push: HTTP 429".into()));
    let channels = ran.channels.expect("every channel's answer");
    assert_eq!(channels.get("email"), Some(&Outcome::Done));
    assert_eq!(ran.retry_after_ms, Some(2_000));
    assert_eq!(
        ran.refused,
        Some(RefusedBy {
            keys: Some(vec!["host:push.test".into()]),
            with_failure: false,
        })
    );
    // Beside another channel's transient failure, the attempt is spent.
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", Answer::status(502))
        .answer("https://push.test/", Answer::status(429))
        .answer(
            "https://sms.test/",
            Answer::status(429).header("Retry-After", "9"),
        );
    let ran = run(&out, &multi(&["email", "push", "sms"]));
    assert_eq!(ran.retry_after_ms, Some(9_000));
    assert_eq!(
        ran.refused,
        Some(RefusedBy {
            keys: Some(vec!["host:push.test".into(), "host:sms.test".into()]),
            with_failure: true,
        })
    );
    // A channel's permanent failure fails the item: no refusal to speak of.
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", Answer::status(404))
        .answer("https://push.test/", Answer::status(429));
    let ran = run(&out, &multi(&["email", "push"]));
    assert!(matches!(ran.outcome, Outcome::Fail(_)), "{ran:?}");
    assert_eq!(ran.refused, None);
}

#[test]
fn a_hanging_channel_times_out_alone_and_the_others_are_reported() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", Answer::status(200).after(50))
        .answer("https://push.test/", Answer::hang())
        .answer("https://sms.test/", Answer::status(400).after(70));
    let ran = run(&out, &multi(&["email", "push", "sms"]));
    let channels = ran.channels.expect("every channel's result, in time");
    assert_eq!(channels.get("email"), Some(&Outcome::Done));
    assert_eq!(
        channels.get("push"),
        Some(&Outcome::Retry("timed out after 9500 ms".into()))
    );
    assert_eq!(channels.get("sms"), Some(&Outcome::Fail("HTTP 400".into())));
    // One permanent failure fails the item; the reason names each channel.
    assert_eq!(
        ran.outcome,
        Outcome::Fail("channel sms: HTTP 400; channel push: timed out after 9500 ms".into())
    );
    // Given up at the channel deadline, before the job's own timer (10 s).
    assert_eq!(out.now(), NOW + 9_500);
    let ended: Vec<Ended> = out.sent().iter().map(|s| s.ended).collect();
    assert_eq!(ended, [Ended::Answered, Ended::Aborted, Ended::Answered]);
}

#[test]
fn a_retry_of_multi_sends_only_the_channels_not_yet_delivered() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://push.test/", Answer::status(200));
    let mut retry = multi(&["email", "push"]);
    retry.receipts = Some(
        json!({"email": {"status": "delivered", "at": NOW - 60_000},
               "push": {"status": "pending", "error": "HTTP 503"}})
        .to_string(),
    );
    let ran = run(&out, &retry);
    assert_eq!(ran.outcome, Outcome::Done);
    let sent: Vec<String> = out.sent().into_iter().map(|s| s.request.url).collect();
    assert_eq!(sent, ["https://push.test/"]);
    let channels = ran.channels.unwrap();
    assert_eq!(channels.keys().collect::<Vec<_>>(), ["push"]);
}

#[test]
fn multi_retries_while_a_channel_fails_transiently() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", Answer::status(200))
        .answer("https://push.test/", Answer::status(503));
    let ran = run(&out, &multi(&["email", "push"]));
    assert_eq!(ran.outcome, Outcome::Retry("channel push: HTTP 503".into()));
    assert_eq!(ran.channels.unwrap().get("email"), Some(&Outcome::Done));
}

// --- callback -----------------------------------------------------------------

#[test]
fn a_callback_posts_the_batch_summary_signed_with_the_webhook_secret() {
    let summary = json!({
        "batch_id": "b1", "key": "daily:2026-11-24", "status": "finished",
        "total": 3, "completed": 2, "failed": 1, "cancelled": 0,
        "created_at": NOW - 3_600_000, "finished_at": NOW - 1_000,
    });
    let row = item(
        "callback",
        json!({"url": "https://done.test/cb", "summary": summary}),
    );
    let payload = crate::core::callback::Payload::parse(&row.payload).unwrap();
    let out = MemoryOutbound::new(NOW);
    out.answer("https://done.test/cb", Answer::status(200));
    assert_eq!(run(&out, &row), Outcome::Done.into());
    let sent = out.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].request.body.as_deref(),
        Some(payload.body().as_str())
    );
    let body: Value = serde_json::from_str(&payload.body()).unwrap();
    assert_eq!(body["finished_at"], json!("2026-11-24T11:59:59.000Z"));
    assert_eq!(
        header(&sent[0], "Idempotency-Key"),
        payload.idempotency_key()
    );
    assert_signed(&sent[0], WEBHOOK_SECRET);
    // Answered like a webhook.
    out.answer("https://done.test/cb", Answer::status(503));
    assert_eq!(run(&out, &row).outcome, Outcome::Retry("HTTP 503".into()));
}

#[test]
fn a_callback_with_its_own_signing_secret_is_signed_with_it_not_the_webhook_secret() {
    let summary = json!({
        "batch_id": "b1", "key": "k", "status": "finished", "total": 1, "completed": 1,
        "failed": 0, "cancelled": 0, "created_at": NOW, "finished_at": NOW,
    });
    let own = "callback-secret-0123456789";
    let row = item(
        "callback",
        json!({"url": "https://done.test/cb", "signing_secret": own, "summary": summary}),
    );
    let out = MemoryOutbound::new(NOW);
    out.answer("https://done.test/cb", Answer::status(200));
    assert_eq!(run(&out, &row), Outcome::Done.into());
    let sent = &out.sent()[0];
    assert_signed(sent, own);
    let body = sent.request.body.as_deref().unwrap_or_default();
    let header = Some(header(sent, "Fanout-Signature"));
    assert!(signature::verify(WEBHOOK_SECRET, header, NOW / 1_000, body.as_bytes()).is_err());
    // A null secret (the trigger's, without one) is WEBHOOK_SECRET's.
    let shared = item(
        "callback",
        json!({"url": "https://done.test/cb", "signing_secret": null, "summary": summary}),
    );
    out.answer("https://done.test/cb", Answer::status(200));
    assert_eq!(run(&out, &shared), Outcome::Done.into());
    assert_signed(&out.sent()[1], WEBHOOK_SECRET);
}

#[test]
fn a_callback_to_a_target_refused_since_is_not_sent() {
    let summary = json!({
        "batch_id": "b1", "key": "k", "status": "finished", "total": 0, "completed": 0,
        "failed": 0, "cancelled": 0, "created_at": NOW, "finished_at": NOW,
    });
    let row = item(
        "callback",
        json!({"url": "http://10.0.0.1/cb", "summary": summary}),
    );
    let out = MemoryOutbound::new(NOW);
    let ran = run(&out, &row);
    assert!(
        matches!(&ran.outcome, Outcome::Fail(r) if r.starts_with("not sent: ")),
        "{ran:?}"
    );
    assert!(out.sent().is_empty());
}

#[test]
fn noop_is_done_without_sending_anything() {
    let out = MemoryOutbound::new(NOW);
    assert_eq!(run(&out, &item("noop", json!({}))), Outcome::Done.into());
    assert!(out.sent().is_empty());
}

// --- correlation ----------------------------------------------------------------

/// A run for the invocation `inv-7f3a`.
fn correlated() -> RunConfig {
    RunConfig {
        invocation: Some("inv-7f3a".into()),
        ..config()
    }
}

fn invocations(out: &MemoryOutbound) -> Vec<Option<String>> {
    out.sent()
        .iter()
        .map(|s| {
            s.request
                .header_value(INVOCATION_HEADER)
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn a_webhook_names_the_invocation_that_dispatched_it() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://example.com/hook", Answer::status(200));
    let ran = run_with(
        &Jobs::builtin(),
        &out,
        &webhook("https://example.com/hook"),
        &correlated(),
    );
    assert_eq!(ran, Outcome::Done.into());
    assert_eq!(invocations(&out), [Some("inv-7f3a".to_string())]);
    // The header is outside the signed body: the signature still checks out.
    assert_signed(&out.sent()[0], WEBHOOK_SECRET);
}

#[test]
fn every_channel_of_a_multi_names_the_invocation() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", Answer::status(200))
        .answer("https://push.test/", Answer::status(200));
    run_with(
        &Jobs::builtin(),
        &out,
        &multi(&["email", "push"]),
        &correlated(),
    );
    assert_eq!(invocations(&out), vec![Some("inv-7f3a".to_string()); 2]);
}

#[test]
fn a_completion_callback_names_the_invocation() {
    let summary = json!({
        "batch_id": "b1", "key": "k", "status": "finished", "total": 1, "completed": 1,
        "failed": 0, "cancelled": 0, "created_at": NOW - 1_000, "finished_at": NOW,
    });
    let row = item(
        "callback",
        json!({"url": "https://done.test/cb", "summary": summary}),
    );
    let out = MemoryOutbound::new(NOW);
    out.answer("https://done.test/cb", Answer::status(200));
    assert_eq!(
        run_with(&Jobs::builtin(), &out, &row, &correlated()),
        Outcome::Done.into()
    );
    assert_eq!(invocations(&out), [Some("inv-7f3a".to_string())]);
}

#[test]
fn a_registered_kind_names_the_invocation_without_doing_anything_for_it() {
    let jobs = Jobs::builtin().with(Greet);
    let out = MemoryOutbound::new(NOW);
    out.answer("https://greet.test/ada", Answer::status(200));
    run_with(
        &jobs,
        &out,
        &item("greet", json!({"name": "ada"})),
        &correlated(),
    );
    assert_eq!(invocations(&out), [Some("inv-7f3a".to_string())]);
}

#[test]
fn the_invocation_header_is_the_runs_own_whatever_a_kind_set() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://example.com/x", Answer::status(200));
    let correlated_out = Correlated::new(&out, "inv-7f3a");
    let request = Request::post_json("https://example.com/x", "{}".into())
        .header("fanout-invocation", "forged");
    out.block_on(correlated_out.fetch(request, &Signal::new()))
        .unwrap();
    let sent = &out.sent()[0].request;
    let named: Vec<&str> = sent
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(INVOCATION_HEADER))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(named, ["inv-7f3a"]);
}

#[test]
fn a_run_for_no_invocation_sends_no_invocation_header() {
    let out = MemoryOutbound::new(NOW);
    out.answer("https://example.com/hook", Answer::status(200));
    run(&out, &webhook("https://example.com/hook"));
    assert_eq!(invocations(&out), [None]);
}

// --- service --------------------------------------------------------------------

fn service(path: Option<&str>) -> ClaimedItem {
    let mut payload = json!({"service": "HANDLER", "data": {"n": 1}});
    if let Some(path) = path {
        payload["path"] = json!(path);
    }
    item("service", payload)
}

#[test]
fn only_service_runs_in_the_drain_and_validates_against_the_callable_bindings() {
    let jobs = Jobs::builtin();
    assert!(jobs.runs_in_drain("service"));
    for kind in ["webhook", "multi", "noop", "callback", "unknown"] {
        assert!(!jobs.runs_in_drain(kind), "{kind}");
    }
    let callable = ["HANDLER".to_string()];
    let policy = TargetPolicy {
        services: &callable,
        ..POLICY
    };
    let check =
        |payload: Value, policy: &TargetPolicy| jobs.check_payload("service", &payload, policy);
    assert!(check(json!({"service": "HANDLER", "path": "/x"}), &policy).is_ok());
    assert!(check(json!({"service": "HANDLER"}), &POLICY).is_err());
    assert!(check(json!({"service": "OTHER"}), &policy).is_err());
    assert!(check(json!({"service": "HANDLER", "path": "x"}), &policy).is_err());
}

#[test]
fn a_service_call_posts_the_webhook_body_through_the_binding_with_its_idempotency_key() {
    let out = MemoryOutbound::new(NOW);
    out.answer_service("HANDLER", Answer::status(200).after(300));
    let ran = run(&out, &service(Some("/streak?tz=UTC")));
    assert_eq!(ran, Outcome::Done.into());
    let sent = out.sent();
    assert_eq!(sent.len(), 1);
    let s = &sent[0];
    assert_eq!(s.service.as_deref(), Some("HANDLER"));
    assert_eq!(s.request.method, "POST");
    assert_eq!(s.request.url, "https://cron-fanout.internal/streak?tz=UTC");
    assert_eq!(header(s, "Content-Type"), "application/json");
    assert_eq!(header(s, "Idempotency-Key"), "42");
    let body: Value = serde_json::from_str(s.request.body.as_deref().unwrap()).unwrap();
    assert_eq!(
        body,
        json!({"item_id": 42, "batch_id": "b1", "subject_id": "s1", "attempt": 2,
               "max_attempts": 5, "delivered": [], "data": {"n": 1}})
    );
    // Exactly those two headers: no signature, nothing secret, behind a binding.
    assert_eq!(s.request.headers.len(), 2, "{:?}", s.request.headers);
    // Without a path the call goes to `/`.
    out.answer_service("HANDLER", Answer::status(204));
    run(&out, &service(None));
    assert_eq!(out.sent()[1].request.url, "https://cron-fanout.internal/");
}

#[test]
fn a_probe_call_takes_no_real_items_idempotency_key_and_says_it_is_a_probe() {
    let out = MemoryOutbound::new(NOW);
    for n in 1..=3 {
        out.answer_service("HANDLER", Answer::status(200));
        let call = service::probe_call("HANDLER", n);
        assert!(call.item_id < 1, "no real item has id {}", call.item_id);
        assert_eq!(run(&out, &call), Outcome::Done.into());
    }
    // Item 1, the first id SQLite hands out: its own key, no probe header.
    let mut first = service(None);
    first.item_id = 1;
    out.answer_service("HANDLER", Answer::status(200));
    run(&out, &first);
    let sent = out.sent();
    let seen: Vec<(&str, Option<&str>, Value)> = sent
        .iter()
        .map(|s| {
            let body: Value = serde_json::from_str(s.request.body.as_deref().unwrap()).unwrap();
            (
                header(s, "Idempotency-Key"),
                s.request.header_value(service::PROBE_HEADER),
                body["item_id"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("probe:1", Some("1"), json!(-1)),
            ("probe:2", Some("1"), json!(-2)),
            ("probe:3", Some("1"), json!(-3)),
            ("1", None, json!(1)),
        ]
    );
    assert_eq!(sent[0].request.url, "https://cron-fanout.internal/probe");
}

#[test]
fn a_service_answer_maps_as_a_webhooks_with_a_permanent_failures_text_in_the_reason() {
    let cases = [
        (Answer::status(204), Outcome::Done),
        (
            Answer::status(503).body("busy"),
            Outcome::Retry("HTTP 503".into()),
        ),
        (Answer::status(408), Outcome::Retry("HTTP 408".into())),
        (Answer::status(425), Outcome::Retry("HTTP 425".into())),
        (Answer::status(429), Outcome::Retry("HTTP 429".into())),
        (
            Answer::status(422).body(&"x".repeat(300)),
            Outcome::Fail(format!("HTTP 422: {}", "x".repeat(200))),
        ),
        (Answer::status(404), Outcome::Fail("HTTP 404".into())),
        (
            Answer::status(302).header("Location", "/elsewhere"),
            Outcome::Fail("HTTP 302: redirects are not followed".into()),
        ),
        (
            Answer::error("Error: user code threw"),
            Outcome::Retry("service HANDLER: Error: user code threw".into()),
        ),
    ];
    for (answer, expected) in cases {
        let out = MemoryOutbound::new(NOW);
        out.answer_service("HANDLER", answer.clone());
        assert_eq!(run(&out, &service(None)).outcome, expected, "{answer:?}");
        // The same answer to a webhook: the same outcome (an exception has no
        // webhook twin: a network error's reason names no binding).
        if !matches!(expected, Outcome::Retry(ref r) if r.starts_with("service ")) {
            out.answer("https://hooks.test/a", answer.clone());
            let hook = run(&out, &webhook("https://hooks.test/a"));
            assert_eq!(hook.outcome, expected, "webhook {answer:?}");
        }
    }
}

#[test]
fn a_service_answer_over_the_body_bound_is_a_retry_that_says_so_and_records_nothing() {
    // Its body is read for channels whatever the status: all of it or an error.
    for status in [200, 404] {
        let out = MemoryOutbound::new(NOW);
        let page = "x".repeat(crate::jobs::DEFAULT_MAX_BODY_BYTES + 1);
        out.answer_service("HANDLER", Answer::status(status).body(&page));
        let ran = run(&out, &service(None));
        let want = format!(
            "service HANDLER: HTTP {status}: answer body over 65536 bytes (Request::max_body_bytes)"
        );
        assert_eq!(ran.outcome, Outcome::Retry(want));
        assert_eq!(ran.channels, None);
    }
}

#[test]
fn a_retry_after_in_seconds_on_a_service_retry_is_the_next_attempts_delay() {
    let out = MemoryOutbound::new(NOW);
    out.answer_service("HANDLER", Answer::status(429).header("Retry-After", "2"));
    let ran = run(&out, &service(None));
    assert_eq!(ran.outcome, Outcome::Retry("HTTP 429".into()));
    assert_eq!(ran.retry_after_ms, Some(2_000));
}

#[test]
fn a_service_with_no_answer_times_out_as_a_retry_and_its_call_is_aborted() {
    let out = MemoryOutbound::new(NOW);
    out.answer_service("HANDLER", Answer::hang());
    let ran = run(&out, &service(None));
    assert_eq!(
        ran,
        Outcome::Retry("timed out after 10000 ms".into()).into()
    );
    assert_eq!(out.now(), NOW + 10_000);
    assert_eq!(out.sent()[0].ended, Ended::Aborted);
}

#[test]
fn a_service_no_longer_listed_or_not_bound_fails_for_good_at_run_time() {
    // Listed in SERVICE_BINDINGS, but the Worker has no such binding (any more).
    let out = MemoryOutbound::new(NOW);
    out.bind_service("HANDLER");
    let gone = item("service", json!({"service": "GONE"}));
    let ran = run(&out, &gone);
    assert_eq!(
        ran.outcome,
        Outcome::Fail("not sent: service binding \"GONE\" is listed in SERVICE_BINDINGS but not bound to this Worker".into())
    );
    // No longer listed: refused before any call.
    let cfg = RunConfig {
        service_bindings: vec!["GONE".into()],
        ..config()
    };
    let ran = run_with(&Jobs::builtin(), &out, &service(None), &cfg);
    let Outcome::Fail(reason) = ran.outcome else {
        panic!("{ran:?}");
    };
    assert!(
        reason.starts_with("not sent: service \"HANDLER\" is not a binding")
            && reason.contains("SERVICE_BINDINGS"),
        "{reason}"
    );
    // Neither reached anything: an unbound name has nothing to call.
    assert!(out.sent().is_empty(), "{:?}", out.sent());
}

// --- service: channels ------------------------------------------------------------

/// A service item whose earlier attempts left `receipts`.
fn service_with(receipts: Value) -> ClaimedItem {
    ClaimedItem {
        receipts: Some(receipts.to_string()),
        ..service(None)
    }
}

fn channels_answer(status: u16, channels: Value) -> Answer {
    Answer::status(status)
        .header("Content-Type", "application/json")
        .body(&json!({ "channels": channels }).to_string())
}

fn results(pairs: &[(&str, Outcome)]) -> ChannelResults {
    pairs
        .iter()
        .map(|(n, o)| (n.to_string(), o.clone()))
        .collect()
}

#[test]
fn a_service_call_tells_the_handler_what_earlier_attempts_delivered() {
    let out = MemoryOutbound::new(NOW);
    out.answer_service("HANDLER", Answer::status(200));
    run(
        &out,
        &service_with(json!({
            "telegram": {"status": "delivered", "at": NOW - 60_000},
            "discord": {"status": "pending", "error": "HTTP 503"},
            "email": {"status": "delivered", "at": NOW - 60_000},
        })),
    );
    let body: Value = serde_json::from_str(out.sent()[0].request.body.as_deref().unwrap()).unwrap();
    assert_eq!(body["delivered"], json!(["email", "telegram"]));
}

#[test]
fn a_channels_answer_records_each_channel_and_the_outcome_follows_multis_rule() {
    let cases = [
        (
            json!({"discord": {"outcome": "done"}, "telegram": {"outcome": "done"}}),
            Outcome::Done,
        ),
        (
            json!({"discord": {"outcome": "done"}, "telegram": {"outcome": "retry", "reason": "429"}}),
            Outcome::Retry("channel telegram: 429".into()),
        ),
        (
            json!({"discord": {"outcome": "fail", "reason": "HTTP 404"}, "telegram": {"outcome": "retry", "reason": "429"}}),
            Outcome::Fail("channel discord: HTTP 404; channel telegram: 429".into()),
        ),
        // Nothing left to send: done, as a multi item whose channels all got through.
        (json!({}), Outcome::Done),
    ];
    for (channels, expected) in cases {
        let out = MemoryOutbound::new(NOW);
        out.answer_service("HANDLER", channels_answer(200, channels.clone()));
        let ran = run(&out, &service(None));
        assert_eq!(ran.outcome, expected, "{channels}");
        let reported: ChannelResults = serde_json::from_value(channels.clone()).unwrap();
        let reported = Some(reported).filter(|r| !r.is_empty());
        assert_eq!(ran.channels, reported, "{channels}");
        // The same results from a multi item's channels: the same outcome.
        if let Some(r) = &ran.channels {
            assert_eq!(crate::core::receipts::outcome(r), expected);
        }
    }
}

#[test]
fn a_channels_answer_is_read_from_a_2xx_body() {
    // The runtime's seam reads a 2xx body only when the request asks for it.
    let out = MemoryOutbound::new(NOW);
    out.answer_service(
        "HANDLER",
        channels_answer(
            200,
            json!({"telegram": {"outcome": "retry", "reason": "429"}}),
        ),
    );
    let ran = run(&out, &service(None));
    assert!(out.sent()[0].request.read_body);
    assert_eq!(ran.outcome, Outcome::Retry("channel telegram: 429".into()));
}

#[test]
fn a_retry_after_on_a_channels_answer_that_asks_for_a_retry_is_the_runs_delay() {
    let out = MemoryOutbound::new(NOW);
    let retry =
        json!({"discord": {"outcome": "done"}, "telegram": {"outcome": "retry", "reason": "429"}});
    out.answer_service(
        "HANDLER",
        channels_answer(200, retry).header("Retry-After", "30"),
    );
    assert_eq!(run(&out, &service(None)).retry_after_ms, Some(30_000));
    // On an answer that is done, it means nothing.
    out.answer_service(
        "HANDLER",
        channels_answer(200, json!({"discord": {"outcome": "done"}})).header("Retry-After", "30"),
    );
    let ran = run(&out, &service(None));
    assert_eq!((ran.outcome, ran.retry_after_ms), (Outcome::Done, None));
}

fn json_answer(status: u16, body: Value) -> Answer {
    Answer::status(status)
        .header("Content-Type", "application/json")
        .body(&body.to_string())
}

#[test]
fn a_handlers_after_seconds_delays_its_item_alone_and_spends_the_attempt() {
    let out = MemoryOutbound::new(NOW);
    // The item's own: even on a 429, the protocol's member is the handler's word.
    for status in [503, 429] {
        out.answer_service("HANDLER", json_answer(status, json!({"after_seconds": 40})));
        let ran = run(&out, &service(None));
        assert_eq!(ran.outcome, Outcome::Retry(format!("HTTP {status}")));
        assert_eq!(ran.retry_after_ms, Some(40_000));
        assert!(ran.own_delay && ran.refused.is_none(), "{ran:?}");
        assert!(!crate::core::learn::is_refusal(&ran), "{ran:?}");
    }
    // One channel's, beside a delivered one: the item waits that long.
    let channels = json!({"channels": {
        "discord": {"outcome": "done"},
        "telegram": {"outcome": "retry", "reason": "HTTP 429", "after_seconds": 1.5}}});
    out.answer_service("HANDLER", json_answer(200, channels));
    let ran = run(&out, &service(None));
    assert_eq!(
        ran.outcome,
        Outcome::Retry("channel telegram: HTTP 429".into())
    );
    assert_eq!((ran.retry_after_ms, ran.own_delay), (Some(1_500), true));
    assert_eq!(ran.refused, None);
    assert_eq!(
        ran.channels.unwrap()["telegram"],
        Outcome::Retry("HTTP 429".into())
    );
}

#[test]
fn a_handlers_slow_down_refuses_for_its_binding_only() {
    let out = MemoryOutbound::new(NOW);
    let slow = json!({"slow_down": {"after_seconds": 30}});
    out.answer_service("HANDLER", json_answer(429, slow));
    let ran = run(&out, &service(None));
    assert_eq!(ran.outcome, Outcome::Retry("slow down (HTTP 429)".into()));
    assert_eq!((ran.retry_after_ms, ran.own_delay), (Some(30_000), false));
    assert_eq!(
        ran.refused,
        Some(RefusedBy {
            keys: Some(vec!["service:HANDLER".into()]),
            with_failure: false
        })
    );
    // Beside a channel's own retry: that retry spends the attempt.
    let both = json!({"slow_down": {"after_seconds": 30},
                      "channels": {"telegram": {"outcome": "retry", "reason": "HTTP 500"}}});
    out.answer_service("HANDLER", json_answer(429, both));
    let ran = run(&out, &service(None));
    assert!(ran.refused.is_some_and(|r| r.with_failure));
}

#[test]
fn an_answer_without_the_protocols_members_is_read_as_any_receivers() {
    // The platform's own error, or a bare status: a refusal of every key the item holds.
    let out = MemoryOutbound::new(NOW);
    out.answer_service(
        "HANDLER",
        Answer::status(503)
            .header("Retry-After", "5")
            .body("overloaded"),
    );
    let ran = run(&out, &service(None));
    assert_eq!(ran.outcome, Outcome::Retry("HTTP 503".into()));
    assert_eq!((ran.retry_after_ms, ran.own_delay), (Some(5_000), false));
    assert_eq!(ran.refused, Some(RefusedBy::default()));
}

#[test]
fn a_malformed_delay_is_a_retry_that_says_so() {
    for body in [
        json!({"after_seconds": -1}),
        json!({"after_seconds": "soon"}),
        json!({"slow_down": {}}),
        json!({"slow_down": {"after_seconds": null}}),
        json!({"channels": {"t": {"outcome": "retry", "reason": "x", "after_seconds": -2}}}),
    ] {
        let out = MemoryOutbound::new(NOW);
        out.answer_service("HANDLER", json_answer(503, body.clone()));
        let ran = run(&out, &service(None));
        let Outcome::Retry(reason) = &ran.outcome else {
            panic!("{body}: {ran:?}");
        };
        assert!(reason.starts_with("malformed answer: "), "{body}: {reason}");
        assert!(ran.refused.is_none() && ran.channels.is_none(), "{body}");
    }
}

#[test]
fn a_failure_status_beside_channels_keeps_them_and_joins_the_rule() {
    // The handler delivered Discord, then gave up on the item itself.
    let out = MemoryOutbound::new(NOW);
    let delivered = json!({"discord": {"outcome": "done"}});
    out.answer_service("HANDLER", channels_answer(503, delivered.clone()));
    let ran = run(&out, &service(None));
    assert_eq!(ran.outcome, Outcome::Retry("HTTP 503".into()));
    assert_eq!(ran.channels, Some(results(&[("discord", Outcome::Done)])));
    out.answer_service("HANDLER", channels_answer(422, delivered));
    let ran = run(&out, &service(None));
    // The body is the channels, not a text for the reason.
    assert_eq!(ran.outcome, Outcome::Fail("HTTP 422".into()));
    assert_eq!(ran.channels, Some(results(&[("discord", Outcome::Done)])));
}

#[test]
fn a_malformed_channels_answer_is_a_retry_that_names_channels_and_records_nothing() {
    let nine: serde_json::Map<String, Value> = (0..9)
        .map(|i| (format!("c{i}"), json!({"outcome": "done"})))
        .collect();
    let bodies = [
        json!({"channels": []}).to_string(),
        json!({"channels": null}).to_string(),
        json!({"channels": {"telegram": {"outcome": "skip"}}}).to_string(),
        json!({"channels": {"telegram": {"outcome": "retry"}}}).to_string(),
        json!({"channels": {"telegram": "done"}}).to_string(),
        json!({"channels": {"": {"outcome": "done"}}}).to_string(),
        json!({"channels": {"x".repeat(65): {"outcome": "done"}}}).to_string(),
        json!({"channels": {"t": {"outcome": "fail", "reason": "é".repeat(101)}}}).to_string(),
        json!({ "channels": nine }).to_string(),
        // Cut short (a bound on what is read, say).
        r#"{"channels": {"discord": {"outcome": "done"}, "tele"#.to_string(),
    ];
    for body in bodies {
        for status in [200, 422] {
            let out = MemoryOutbound::new(NOW);
            out.answer_service("HANDLER", Answer::status(status).body(&body));
            let ran = run(&out, &service(None));
            let Outcome::Retry(reason) = &ran.outcome else {
                panic!("{status} {body}: {ran:?}");
            };
            assert!(
                reason.starts_with("malformed answer: channels"),
                "{status} {body}: {reason}"
            );
            assert_eq!(ran.channels, None, "{body}");
        }
    }
}

#[test]
fn an_item_reports_at_most_8_channels_over_all_its_attempts() {
    let stored: serde_json::Map<String, Value> = (0..7)
        .map(|i| {
            (
                format!("c{i}"),
                json!({"status": "pending", "error": "HTTP 503"}),
            )
        })
        .collect();
    let item = service_with(Value::Object(stored));
    // A known one and one more: 8 in all.
    let out = MemoryOutbound::new(NOW);
    out.answer_service(
        "HANDLER",
        channels_answer(
            200,
            json!({"c0": {"outcome": "done"}, "c7": {"outcome": "done"}}),
        ),
    );
    assert_eq!(run(&out, &item).outcome, Outcome::Done);
    // Two more: 9.
    out.answer_service(
        "HANDLER",
        channels_answer(
            200,
            json!({"c7": {"outcome": "done"}, "c8": {"outcome": "done"}}),
        ),
    );
    let ran = run(&out, &item);
    assert!(
        matches!(&ran.outcome, Outcome::Retry(r) if r.contains("at most 8 channels")),
        "{ran:?}"
    );
}

#[test]
fn an_answer_without_channels_maps_by_status_as_before() {
    let cases = [
        (Answer::status(200).body(r#"{"ok": true}"#), Outcome::Done),
        (Answer::status(200).body("channels: none"), Outcome::Done),
        (
            Answer::status(422).body(r#"{"error": "unknown channels setting"}"#),
            Outcome::Fail(r#"HTTP 422: {"error": "unknown channels setting"}"#.into()),
        ),
        (
            Answer::status(503).body(r#"{"busy": true}"#),
            Outcome::Retry("HTTP 503".into()),
        ),
    ];
    for (answer, expected) in cases {
        let out = MemoryOutbound::new(NOW);
        out.answer_service("HANDLER", answer.clone());
        let ran = run(&out, &service(None));
        assert_eq!((ran.outcome, ran.channels), (expected, None), "{answer:?}");
    }
}

#[test]
fn outbound_kinds_hold_their_receivers_key_beside_four_explicit_ones() {
    let jobs = Jobs::builtin();
    let webhook = json!({"url": "https://Hooks.Example.com:8443/x"});
    assert_eq!(
        jobs.check_item("webhook", &webhook, &POLICY).unwrap(),
        ["host:hooks.example.com"]
    );
    let multi = json!({"channels": [
        {"name": "a", "url": "https://a.example.com/1"},
        {"name": "b", "url": "https://b.example.com/1"},
        {"name": "c", "url": "https://a.example.com/2"}]});
    assert_eq!(
        jobs.check_item("multi", &multi, &POLICY).unwrap(),
        ["host:a.example.com", "host:b.example.com"]
    );
    assert_eq!(
        Job::limit_keys(
            &crate::jobs::service::Service,
            &json!({"service": "HANDLER"})
        ),
        ["service:HANDLER"]
    );
    // Four explicit keys and the implicit one: the implicit key is not counted.
    use crate::core::requests::{parse_json, validate_create_batch, CreateBatch};
    let body = json!({"items": [{"subject_id": "a", "kind": "webhook", "payload": webhook,
                                 "limits": ["k1", "k2", "k3", "k4"]}]});
    let request =
        validate_create_batch(parse_json(body.to_string().as_bytes()).unwrap(), &|k, p| {
            jobs.check_item(k, p, &POLICY)
        })
        .unwrap();
    let CreateBatch::FromItems { items, .. } = request else {
        panic!("explicit items")
    };
    assert_eq!(
        items[0].keys,
        ["k1", "k2", "k3", "k4", "host:hooks.example.com"]
    );
}
