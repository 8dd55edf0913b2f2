//! `multi` items and callbacks, and every request naming its invocation.

use super::*;

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
fn a_channels_spent_budget_paces_its_own_host_key_alone() {
    // Discord (discord.com/developers/docs/topics/rate-limits): every answer
    // tells the bucket; the push channel's last call spent it, email's did not.
    let discord = |remaining: &str, after: &str| {
        Answer::status(204)
            .header("X-RateLimit-Limit", "5")
            .header("X-RateLimit-Remaining", remaining)
            .header("X-RateLimit-Reset-After", after)
    };
    let keys = |hosts: &[&str]| Some(hosts.iter().map(|h| format!("host:{h}")).collect());
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", discord("3", "1.000"))
        .answer("https://push.test/", discord("0", "0.750"))
        .answer("https://sms.test/", Answer::status(200));
    let ran = run(&out, &multi(&["email", "push", "sms"]));
    assert_eq!(ran.outcome, Outcome::Done);
    assert_eq!(ran.refused, None);
    let paced = ran.paced.expect("the spent budget's word");
    assert_eq!(paced.until, Some(NOW + 750));
    assert_eq!(ran.paced_keys, keys(&["push.test"]));
    // Two spent: both keys, until the later reset.
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", discord("0", "2.000"))
        .answer("https://push.test/", discord("0", "0.750"));
    let ran = run(&out, &multi(&["email", "push"]));
    assert_eq!(ran.paced.and_then(|p| p.until), Some(NOW + 2_000));
    assert_eq!(ran.paced_keys, keys(&["email.test", "push.test"]));
    // Budget left on one channel only: its key weighs it, none other.
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", discord("2", "1.000"))
        .answer("https://push.test/", Answer::status(200));
    let ran = run(&out, &multi(&["email", "push"]));
    assert_eq!(ran.paced.and_then(|p| p.remaining), Some(2));
    assert_eq!(ran.paced_keys, keys(&["email.test"]));
    // Budget left on both: the least left, until the later reset, for both keys.
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", discord("2", "0.500"))
        .answer("https://push.test/", discord("3", "1.000"));
    let ran = run(&out, &multi(&["email", "push"]));
    let paced = ran.paced.expect("budget left");
    assert_eq!(
        (paced.until, paced.remaining, paced.reset_at),
        (None, Some(2), Some(NOW + 1_000))
    );
    assert_eq!(ran.paced_keys, keys(&["email.test", "push.test"]));
    // A refusal on one channel, a spent budget on another: the refusal's keys alone.
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", discord("0", "2.000"))
        .answer(
            "https://push.test/",
            Answer::status(429)
                .header("Retry-After", "1")
                .header("X-RateLimit-Limit", "5")
                .header("X-RateLimit-Remaining", "0")
                .header("X-RateLimit-Reset-After", "1.000"),
        );
    let ran = run(&out, &multi(&["email", "push"]));
    assert_eq!(ran.paced_keys, keys(&["push.test"]));
    assert!(ran.paced.is_some_and(|p| p.per_minute.is_some()), "{ran:?}");
    // Refusals announcing a rate but no budget left, two channels on one host
    // with another between them: each key once (the commit teaches it once).
    let rate_only = || {
        Answer::status(429)
            .header("Retry-After", "1")
            .header("RateLimit-Policy", "\"default\";q=5;w=1")
    };
    let item = item(
        "multi",
        json!({"channels": [
            {"name": "a", "url": "https://one.test/a"},
            {"name": "b", "url": "https://two.test/"},
            {"name": "c", "url": "https://one.test/c"}]}),
    );
    let out = MemoryOutbound::new(NOW);
    out.answer("https://one.test/a", rate_only())
        .answer("https://two.test/", rate_only())
        .answer("https://one.test/c", rate_only());
    let ran = run(&out, &item);
    assert_eq!(ran.paced.and_then(|p| p.per_minute), Some(300));
    assert_eq!(ran.paced_keys, keys(&["one.test", "two.test"]));
    // A channel that says nothing of a budget paces nothing.
    let out = MemoryOutbound::new(NOW);
    out.answer("https://email.test/", Answer::status(200));
    let ran = run(&out, &multi(&["email"]));
    assert_eq!((ran.paced, ran.paced_keys), (None, None));
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
    let payload = crate::core::batch::callback::Payload::parse(&row.payload).unwrap();
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
