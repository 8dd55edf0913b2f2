//! The `streak_check` kind's run path through the library's in-memory outbound
//! seam (`MemoryOutbound`): what it asks GitHub, whom it reminds and when, and
//! what each answer becomes — receipts included, so a retry never reminds a
//! channel twice.

use cron_fanout::jobs::memory::{Answer, Ended};
use cron_fanout::jobs::{Outcome, Ran};
use cron_fanout::testing::{self, Harness, Item};
use serde_json::{json, Value};
use streak_reminder::fanout;

const GITHUB: &str = "https://github.test/graphql";
const DISCORD: &str = "https://discord.test/api/webhooks/1/discord-token";
const TELEGRAM: &str = "https://telegram.test/bot123:bot-secret/sendMessage";
const GITHUB_TOKEN: &str = "ghp_secret_token";

/// 2026-11-24T17:00:00Z: 18:00 in Berlin.
const NOW: i64 = 1_795_539_600_000;

/// The Worker at `now_ms` with the app's vars and secrets, pointed at fakes.
fn harness(now_ms: i64) -> Harness {
    let h = Harness::at(now_ms);
    h.var("GITHUB_API_URL", "https://github.test")
        .var("TELEGRAM_API_URL", "https://telegram.test")
        .secret("GITHUB_TOKEN", GITHUB_TOKEN)
        .secret("TELEGRAM_BOT_TOKEN", "123:bot-secret");
    h
}

fn user(zone: &str) -> Item {
    testing::item(json!({
        "github_login": "ada", "timezone": zone,
        "discord_webhook_url": DISCORD, "telegram_chat_id": 4242,
    }))
    .item_id(7)
    .batch("streaks:2026-11-24")
    .subject("ada")
    .kind("streak_check")
}

/// GitHub's answer with a calendar of `(date, count)`.
fn calendar(days: &[(&str, u32)]) -> Answer {
    let days: Vec<Value> = days
        .iter()
        .map(|(d, c)| json!({"date": d, "contributionCount": c}))
        .collect();
    let body = json!({"data": {"user": {"contributionsCollection": {"contributionCalendar": {"weeks": [{"contributionDays": days}]}}}}});
    Answer::status(200).body(&body.to_string())
}

/// A streak of two days that ends unless Ada contributes today (the 24th).
fn at_risk() -> Answer {
    calendar(&[("2026-11-22", 1), ("2026-11-23", 2), ("2026-11-24", 0)])
}

fn run(h: &Harness, item: &Item) -> Ran {
    h.run_in(fanout().jobs(), item.clone())
}

fn urls(out: &Harness) -> Vec<String> {
    out.sent().into_iter().map(|s| s.request.url).collect()
}

fn body(out: &Harness, url: &str) -> Value {
    let sent = out
        .sent()
        .into_iter()
        .find(|s| s.request.url == url)
        .expect("sent");
    serde_json::from_str(sent.request.body.as_deref().unwrap()).unwrap()
}

#[test]
fn at_risk_reminds_discord_and_telegram_once_each() {
    let out = harness(NOW);
    out.answer(GITHUB, at_risk())
        .answer(DISCORD, Answer::status(204))
        .answer(TELEGRAM, Answer::status(200));
    let ran = run(&out, &user("Europe/Berlin"));
    assert_eq!(ran.outcome, Outcome::Done);
    let channels = ran.channels.expect("both channels reported");
    assert_eq!(channels.get("discord"), Some(&Outcome::Done));
    assert_eq!(channels.get("telegram"), Some(&Outcome::Done));
    assert_eq!(urls(&out), [GITHUB, DISCORD, TELEGRAM]);
    let github = &out.sent()[0].request;
    assert_eq!(
        github.header_value("Authorization"),
        Some("Bearer ghp_secret_token")
    );
    assert_eq!(body(&out, GITHUB)["variables"]["login"], json!("ada"));
    let text = "ada: your GitHub streak of 2 days ends at midnight: no contribution yet today (2026-11-24).";
    assert_eq!(body(&out, DISCORD)["content"], json!(text));
    assert_eq!(body(&out, TELEGRAM), json!({"chat_id": 4242, "text": text}));
    // The GitHub token goes to GitHub only.
    for s in &out.sent()[1..] {
        assert!(!format!("{:?}", s.request).contains(GITHUB_TOKEN));
    }
}

#[test]
fn a_user_who_contributed_today_or_has_no_streak_is_left_alone() {
    for days in [
        vec![("2026-11-23", 2), ("2026-11-24", 1)], // safe: contributed today
        vec![("2026-11-22", 5), ("2026-11-23", 0), ("2026-11-24", 0)], // broken yesterday
        vec![],                                     // an empty calendar
    ] {
        let out = harness(NOW);
        out.answer(GITHUB, calendar(&days));
        let ran = run(&out, &user("Europe/Berlin"));
        assert_eq!(
            (ran.outcome, ran.channels),
            (Outcome::Done, None),
            "{days:?}"
        );
        assert_eq!(urls(&out), [GITHUB], "{days:?}");
    }
}

#[test]
fn today_is_the_users_own_date() {
    // 23:30 UTC on the 24th: the 25th in Berlin (nothing yet: at risk), still
    // the 24th in New York (a contribution that day: safe).
    let late = NOW + 6 * 3_600_000 + 1_800_000;
    let days = [("2026-11-23", 1), ("2026-11-24", 3)];
    let out = harness(late);
    out.answer(GITHUB, calendar(&days))
        .answer(DISCORD, Answer::status(204))
        .answer(TELEGRAM, Answer::status(200));
    let ran = run(&out, &user("Europe/Berlin"));
    assert_eq!(ran.outcome, Outcome::Done);
    assert!(body(&out, DISCORD)["content"]
        .as_str()
        .unwrap()
        .contains("streak of 2 days"));
    assert!(body(&out, DISCORD)["content"]
        .as_str()
        .unwrap()
        .contains("(2026-11-25)"));
    let out = harness(late);
    out.answer(GITHUB, calendar(&days));
    run(&out, &user("America/New_York"));
    assert_eq!(urls(&out), [GITHUB]);
}

#[test]
fn a_discord_5xx_is_retried_and_the_retry_resends_only_discord() {
    let out = harness(NOW);
    out.answer(GITHUB, at_risk())
        .answer(DISCORD, Answer::status(503))
        .answer(TELEGRAM, Answer::status(200));
    let first = run(&out, &user("Europe/Berlin"));
    assert_eq!(
        first.outcome,
        Outcome::Retry("channel discord: HTTP 503".into())
    );
    let channels = first.channels.unwrap();
    assert_eq!(channels.get("telegram"), Some(&Outcome::Done));
    assert_eq!(
        channels.get("discord"),
        Some(&Outcome::Retry("HTTP 503".into()))
    );

    // What the commit stored: Telegram delivered, Discord pending.
    let retry = user("Europe/Berlin")
        .attempt(2)
        .receipts(json!({"telegram": {"status": "delivered", "at": NOW},
               "discord": {"status": "pending", "error": "HTTP 503"}}));
    let out = harness(NOW + 60_000);
    out.answer(GITHUB, at_risk())
        .answer(DISCORD, Answer::status(204));
    let second = run(&out, &retry);
    assert_eq!(second.outcome, Outcome::Done);
    assert_eq!(urls(&out), [GITHUB, DISCORD]);
    assert_eq!(
        second.channels.unwrap().keys().collect::<Vec<_>>(),
        ["discord"]
    );
}

#[test]
fn a_run_whose_channels_were_all_delivered_asks_nobody() {
    let retry = user("Europe/Berlin")
        .receipts(json!({"telegram": {"status": "delivered", "at": NOW},
               "discord": {"status": "delivered", "at": NOW}}));
    let out = harness(NOW);
    assert_eq!(run(&out, &retry).outcome, Outcome::Done);
    assert!(out.sent().is_empty());
}

#[test]
fn a_github_429_is_retried_after_its_retry_after_and_nobody_is_reminded() {
    let out = harness(NOW);
    out.answer(GITHUB, Answer::status(429).header("Retry-After", "120"));
    let ran = run(&out, &user("Europe/Berlin"));
    assert_eq!(
        ran.outcome,
        Outcome::Retry("GitHub: HTTP 429: rate limited".into())
    );
    assert_eq!(ran.retry_after_ms, Some(120_000));
    assert_eq!(ran.channels, None);
    assert_eq!(urls(&out), [GITHUB]);
}

#[test]
fn a_telegram_429_waits_what_telegram_asks_and_a_refused_chat_fails_the_item() {
    let out = harness(NOW);
    out.answer(GITHUB, at_risk())
        .answer(DISCORD, Answer::status(204))
        .answer(TELEGRAM, Answer::status(429).body(r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 9","parameters":{"retry_after":9}}"#));
    let ran = run(&out, &user("Europe/Berlin"));
    assert_eq!(
        ran.outcome,
        Outcome::Retry("channel telegram: HTTP 429".into())
    );
    assert_eq!(ran.retry_after_ms, Some(9_000));

    let out = harness(NOW);
    out.answer(GITHUB, at_risk())
        .answer(DISCORD, Answer::status(204))
        .answer(
            TELEGRAM,
            Answer::status(400).body(
                r#"{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}"#,
            ),
        );
    let ran = run(&out, &user("Europe/Berlin"));
    assert_eq!(
        ran.outcome,
        Outcome::Fail("channel telegram: HTTP 400: Bad Request: chat not found".into())
    );
    assert_eq!(ran.channels.unwrap().get("discord"), Some(&Outcome::Done));
}

#[test]
fn a_hanging_channel_times_out_alone_and_the_other_is_kept() {
    let out = harness(NOW);
    out.answer(GITHUB, at_risk().after(1_000))
        .answer(DISCORD, Answer::hang())
        .answer(TELEGRAM, Answer::status(200).after(100));
    let ran = run(&out, &user("Europe/Berlin"));
    let channels = ran.channels.expect("reported before the job's timer");
    assert_eq!(channels.get("telegram"), Some(&Outcome::Done));
    assert_eq!(
        channels.get("discord"),
        Some(&Outcome::Retry("timed out after 9500 ms".into()))
    );
    // The channel deadline counts from the run's start: GitHub's second included.
    assert_eq!(out.now_ms(), NOW + 9_500);
    assert_eq!(out.sent()[1].ended, Ended::Aborted);
}

#[test]
fn secrets_never_reach_a_reason() {
    let out = harness(NOW);
    out.answer(GITHUB, at_risk())
        .answer(DISCORD, Answer::status(204))
        .answer(
            TELEGRAM,
            Answer::error(
                "connection refused: https://telegram.test/bot123:bot-secret/sendMessage",
            ),
        );
    let ran = run(&out, &user("Europe/Berlin"));
    let reason = format!("{:?} {:?}", ran.outcome, ran.channels);
    assert!(!reason.contains("bot-secret"), "{reason}");
    assert!(reason.contains("bot[redacted]/sendMessage"), "{reason}");
    let out = harness(NOW);
    out.answer(
        GITHUB,
        Answer::error("TLS error for token ghp_secret_token"),
    );
    let ran = run(&out, &user("Europe/Berlin"));
    assert_eq!(
        ran.outcome,
        Outcome::Retry("GitHub: TLS error for token [redacted]".into())
    );
}

#[test]
fn missing_settings_fail_with_the_setting_named() {
    let none = run(&Harness::at(NOW), &user("UTC"));
    assert_eq!(
        none.outcome,
        Outcome::Fail("not run: GITHUB_TOKEN is not set".into())
    );
    let out = Harness::at(NOW);
    out.secret("GITHUB_TOKEN", GITHUB_TOKEN)
        .var("GITHUB_API_URL", "https://github.test")
        .answer(GITHUB, at_risk())
        .answer(DISCORD, Answer::status(204));
    let ran = run(&out, &user("Europe/Berlin"));
    assert_eq!(
        ran.outcome,
        Outcome::Fail("channel telegram: not sent: TELEGRAM_BOT_TOKEN is not set".into())
    );
    assert_eq!(urls(&out), [GITHUB, DISCORD]);
}

#[test]
fn a_discord_url_refused_since_it_was_written_is_not_sent() {
    let item = user("UTC").payload_text(
        &json!({"github_login": "ada", "discord_webhook_url": "http://10.0.0.1/hook"}).to_string(),
    );
    let out = harness(NOW);
    let ran = run(&out, &item);
    assert!(
        matches!(ran.outcome, Outcome::Fail(ref why) if why.starts_with("not run: discord_webhook_url host 10.0.0.1")),
        "{:?}",
        ran.outcome
    );
    assert!(out.sent().is_empty());
}

#[test]
fn the_app_registers_its_kind_beside_the_built_in_ones() {
    let app = fanout();
    assert!(app.jobs().names().contains(&"streak_check"));
    assert!(app.jobs().has_channels("streak_check"));
    let policy = cron_fanout::core::target::TargetPolicy::PUBLIC;
    let err = app
        .jobs()
        .check_payload("streak_check", &json!({"github_login": "ada"}), &policy)
        .unwrap_err();
    assert!(err.contains("at least one channel"), "{err}");
}

/// Every check asks GitHub with the app's one token: each holds the key
/// `github`, after its subject's own keys.
#[test]
fn every_check_holds_the_github_limit_key() {
    let app = fanout();
    let policy = cron_fanout::core::target::TargetPolicy::PUBLIC;
    let payload = json!({"github_login": "ada", "telegram_chat_id": 1});
    assert_eq!(
        app.jobs()
            .check_item("streak_check", &payload, &policy)
            .unwrap(),
        ["github"]
    );
    let mut body: cron_fanout::core::requests::PutSubjects = serde_json::from_value(json!({
        "subjects": [{"id": "ada", "kind": "streak_check", "payload": payload,
                      "limits": ["tenant:acme"]}]
    }))
    .unwrap();
    cron_fanout::core::requests::validate_put_subjects(&mut body, &|kind, p| {
        app.jobs().check_item(kind, p, &policy)
    })
    .unwrap();
    assert_eq!(body.subjects[0].keys, ["tenant:acme", "github"]);
}
