//! `service` items: the call through the binding and the handler's answer.

use super::*;

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
            assert_eq!(crate::core::batch::receipts::outcome(r), expected);
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
        assert!(!crate::core::flow::learn::is_refusal(&ran), "{ran:?}");
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
    use crate::core::batch::requests::{parse_json, validate_create_batch, CreateBatch};
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
