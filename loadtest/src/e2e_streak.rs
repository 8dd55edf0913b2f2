//! The e2e part of `examples/streak-reminder`, the seed's app as a Worker crate
//! of its own on the library: its wrangler config on a `wrangler dev` of its
//! own, GitHub, Discord and Telegram faked by the sink (`sink_fakes`), and its
//! daily schedule at 18:00 in each user's zone fired through the test clock.
//!
//! | the Worker's clock | what must happen |
//! |---|---|
//! | 2027-01-15 16:59Z (Berlin 17:59) | users and the schedule are written; a bad user is refused; the schedule's next fire is Berlin's 18:00 |
//! | 17:00:30Z (Berlin 18:00) | one batch; each Berlin user checked: those at risk reminded once on each channel (a Discord 503, a Telegram 429 and a GitHub 429 retried, the channel already reminded never again), the others not at all; the New York user waits for its own 18:00 (23:00Z) |
//!
//! The test clock moves the queue (fires, `run_after`, leases); a run's "today"
//! is the real date in the user's zone (the kind reads the outbound seam's real
//! clock), and so is the fake calendar's last day: the fake dates its days from
//! the `to` the Worker sends.

use crate::api::{Batch, Item, SubjectIn, TICK_CRON};
use crate::check;
use crate::checks::Checks;
use crate::clock::TestClock;
use crate::metrics::timestamp_ms;
use crate::sink_fakes::{FakeCalendar, FakeRequest, FakesClient, Setup};
use crate::target::{Target, TargetArgs};
use crate::{steps, suite};
use anyhow::{bail, ensure, Context, Result};
use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};
use std::time::Instant;

/// The example's crate, relative to the repo.
const EXAMPLE: &str = "examples/streak-reminder";
/// Tokens the fakes accept (secrets of the Worker, passed like the others).
const GITHUB_TOKEN: &str = "ghp_e2e_streak_token_0123456789";
const TELEGRAM_BOT_TOKEN: &str = "424242:e2e-streak-bot-token";

const GROUP: &str = "streaks";
const SCHEDULE: &str = "streaks";
const BERLIN: &str = "Europe/Berlin";
const NEW_YORK: &str = "America/New_York";
/// Berlin's 17:59 on a January day (UTC+1, no DST in play: the host tests
/// cover it), then its 18:00, and New York's 18:00 (UTC-5).
const SETUP_AT: &str = "2027-01-15T16:59:00Z";
const BERLIN_1800: &str = "2027-01-15T17:00:00.000Z";
const NEW_YORK_1800: &str = "2027-01-15T23:00:00.000Z";

/// One user: subject id (also the GitHub login and the Discord webhook id),
/// zone, calendar (oldest first, the last day today), what the fakes answer
/// first, and whether a reminder is due.
struct User {
    id: &'static str,
    zone: &'static str,
    counts: &'static [u32],
    /// `github`, `discord` or `telegram`, and the statuses it answers first.
    script: &'static [(&'static str, &'static [u16])],
    at_risk: bool,
}

const USERS: &[User] = &[
    User {
        id: "risk",
        zone: BERLIN,
        counts: &[1, 2, 0],
        script: &[],
        at_risk: true,
    },
    User {
        id: "discord-503",
        zone: BERLIN,
        counts: &[3, 0],
        script: &[("discord", &[503])],
        at_risk: true,
    },
    User {
        id: "telegram-429",
        zone: BERLIN,
        counts: &[1, 0],
        script: &[("telegram", &[429])],
        at_risk: true,
    },
    User {
        id: "github-429",
        zone: BERLIN,
        counts: &[2, 0],
        script: &[("github", &[429])],
        at_risk: true,
    },
    User {
        id: "safe",
        zone: BERLIN,
        counts: &[1, 1],
        script: &[],
        at_risk: false,
    },
    User {
        id: "broken",
        zone: BERLIN,
        counts: &[5, 0, 0],
        script: &[],
        at_risk: false,
    },
    User {
        id: "later",
        zone: NEW_YORK,
        counts: &[1, 0],
        script: &[],
        at_risk: true,
    },
];

/// A user's Telegram chat id.
fn chat_id(index: usize) -> i64 {
    1_000 + index as i64
}

fn t(rfc: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc)
        .expect("a valid instant")
        .to_utc()
}

pub async fn e2e(
    args: &TargetArgs,
    timeout: std::time::Duration,
    checks: &mut Checks,
) -> Result<()> {
    let started = Instant::now();
    let clock = TestClock::at(t(SETUP_AT), Utc::now());
    let tokens = [
        ("GITHUB_TOKEN", GITHUB_TOKEN.to_string()),
        ("TELEGRAM_BOT_TOKEN", TELEGRAM_BOT_TOKEN.to_string()),
    ];
    // The fakes' URLs need the sink's address, known once it started: they are
    // set with the clock's move, before anything runs.
    let config = suite::example_config(args, EXAMPLE)?;
    let mut target = suite::open_worker(
        args,
        "e2e-streak",
        clock.vars().into_iter().chain(tokens),
        vec![config],
    )
    .await
    .context("starting the streak-reminder Worker")?;
    let result = run(&mut target, timeout, checks).await;
    target.stop_checked("streak-reminder: ", checks).await;
    println!(
        "# streak-reminder part: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    result
}

fn subject(fakes: &FakesClient, index: usize, user: &User) -> SubjectIn {
    SubjectIn {
        id: user.id.into(),
        kind: "streak_check".into(),
        payload: json!({
            "github_login": user.id,
            "timezone": user.zone,
            "discord_webhook_url": fakes.discord_webhook_url(user.id, "webhook-token"),
            "telegram_chat_id": chat_id(index),
        }),
        active: true,
        group: Some(GROUP.into()),
        timezone: Some(user.zone.into()),
    }
}

/// The fakes' key of `user` at `api`.
fn key(api: &str, index: usize, user: &User) -> String {
    match api {
        "telegram" => chat_id(index).to_string(),
        _ => user.id.to_string(),
    }
}

async fn run(target: &mut Target, timeout: std::time::Duration, checks: &mut Checks) -> Result<()> {
    let fakes = FakesClient::new(target.sink.base());
    let mut setup = Setup {
        github_token: GITHUB_TOKEN.into(),
        telegram_bot_token: TELEGRAM_BOT_TOKEN.into(),
        ..Setup::default()
    };
    for (i, u) in USERS.iter().enumerate() {
        setup.calendars.insert(
            u.id.into(),
            FakeCalendar {
                zone: u.zone.into(),
                counts: u.counts.to_vec(),
            },
        );
        for (api, statuses) in u.script {
            setup
                .script
                .insert(format!("{api}:{}", key(api, i, u)), statuses.to_vec());
        }
    }
    fakes.setup(&setup).await?;
    let mut f = Streak {
        target,
        fakes,
        timeout,
        run: None,
    };
    checks
        .run(
            &mut f,
            vec![
                check!("streak-reminder: a user without a channel is refused with 400 invalid_payload, and nothing is written", a_user_without_a_channel_is_refused),
                check!(needed "streak-reminder: the daily schedule at 18:00 in each user's zone is created; its next fire is the earliest zone's 18:00 (Berlin's, 17:00Z)", daily_schedule_next_fires_at_berlins_1800),
                check!("streak-reminder: GET /subjects lists each user's Discord webhook URL as [redacted]", listings_hide_discord_webhook_urls),
                check!(needed "streak-reminder: one batch streaks:2027-01-15, counts exact: 7 users, 6 completed (the Berlin ones), 1 pending (New York), none failed", berlins_1800_makes_one_batch_with_exact_counts),
                check!("streak-reminder: each at-risk user is reminded exactly once on Discord and once on Telegram; users who contributed today or lost their streak are not", at_risk_users_reminded_once_on_each_channel),
                check!(retried("Discord 503"), discord_503_retried_telegram_not_again),
                check!(retried("Telegram 429"), telegram_429_retried_discord_not_again),
                check!("streak-reminder: a GitHub 429 is retried and completes on attempt 2; nobody is reminded before the calendar is read", github_429_retried_before_any_reminder),
                check!("streak-reminder: users not at risk complete on attempt 1 with no receipts", users_not_at_risk_complete_without_receipts),
                check!("streak-reminder: the New York user's check waits for its own 18:00 (run_after 23:00Z) and has not run", new_york_waits_for_its_own_1800),
                check!("streak-reminder: the reminder names the user, the streak and the user's own date", reminder_names_user_streak_and_date),
                check!("streak-reminder: every API call carried the right token, no token travelled in another header, none is in an item's reason", tokens_only_where_they_belong),
            ],
        )
        .await;
    Ok(())
}

/// The part's Worker and fakes, and what Berlin's 18:00 left once it settled.
struct Streak<'t> {
    target: &'t mut Target,
    fakes: FakesClient,
    timeout: std::time::Duration,
    run: Option<Ran>,
}

/// The schedule's batch once settled, its items, every request the fakes saw,
/// and Berlin's date either side of the run.
struct Ran {
    batch: Batch,
    items: Vec<Item>,
    requests: Vec<FakeRequest>,
    berlin_dates: Vec<String>,
}

impl Streak<'_> {
    fn ran(&self) -> Result<&Ran> {
        self.run
            .as_ref()
            .context("the schedule's batch did not settle")
    }
}

/// A user its kind refuses: 400 `invalid_payload`, nothing written.
async fn a_user_without_a_channel_is_refused(f: &mut Streak<'_>) -> Result<()> {
    let bad = json!({"subjects": [
        {"id": "ok", "kind": "streak_check", "payload": {"github_login": "ok", "telegram_chat_id": 1}, "group": GROUP},
        {"id": "no-channel", "kind": "streak_check", "payload": {"github_login": "nobody"}, "group": GROUP},
    ]});
    steps::subjects_refused_whole(&f.target.api, &bad, "at least one channel").await
}

/// Writes the users and their daily schedule.
async fn daily_schedule_next_fires_at_berlins_1800(f: &mut Streak<'_>) -> Result<()> {
    let subjects: Vec<SubjectIn> = USERS
        .iter()
        .enumerate()
        .map(|(i, u)| subject(&f.fakes, i, u))
        .collect();
    let api = &f.target.api;
    api.put_subjects(&subjects).await?;
    let (created, schedule) = api
        .put_schedule(
            SCHEDULE,
            &json!({"cron": "0 18 * * *", "timezone": "subject", "group": GROUP}),
        )
        .await?;
    ensure!(
        created && schedule.next_fire_at.as_deref() == Some(BERLIN_1800),
        "created {created}, next_fire_at {:?}",
        schedule.next_fire_at
    );
    Ok(())
}

/// `GET /subjects` shows no Discord webhook URL (it holds the webhook's token).
async fn listings_hide_discord_webhook_urls(f: &mut Streak<'_>) -> Result<()> {
    let listed = f.target.api.all_subjects().await?;
    let shown: Vec<&Value> = listed
        .iter()
        .map(|s| &s.payload["discord_webhook_url"])
        .collect();
    ensure!(
        listed.len() == USERS.len() && shown.iter().all(|v| *v == &json!("[redacted]")),
        "{} subjects, {shown:?}",
        listed.len()
    );
    Ok(())
}

/// Berlin's 18:00: the schedule fires, the items run, retries come back. The
/// APIs' base URLs point at the sink's fakes from here on.
async fn berlins_1800_makes_one_batch_with_exact_counts(f: &mut Streak<'_>) -> Result<()> {
    let clock = TestClock::at(t(BERLIN_1800) + Duration::seconds(30), Utc::now());
    let runtime = f
        .target
        .runtime
        .as_mut()
        .context("the streak part needs a local runtime")?;
    runtime.set_var("TEST_CLOCK_OFFSET_MS", Some(&clock.offset_ms.to_string()));
    runtime.set_var("GITHUB_API_URL", Some(&f.fakes.github_api_url()));
    runtime.set_var("TELEGRAM_API_URL", Some(&f.fakes.telegram_api_url()));
    runtime.restart().await?;
    // The kind's "today" is the real date in the user's zone (its clock is the
    // outbound seam's real time; the test clock moves only the queue's), as is
    // the fake calendar's: either side of the run, should it cross midnight.
    let berlin_today = || {
        Utc::now()
            .with_timezone(&chrono_tz::Europe::Berlin)
            .date_naive()
            .to_string()
    };
    let mut berlin_dates = vec![berlin_today()];
    let batch = settle(f.target, f.timeout).await?;
    berlin_dates.push(berlin_today());
    let items = f.target.api.all_items(&batch.id, None).await?;
    let requests = f.fakes.requests().await?;
    let batch = &f
        .run
        .insert(Ran {
            batch,
            items,
            requests,
            berlin_dates,
        })
        .batch;
    let want_key = format!("{SCHEDULE}:2027-01-15");
    ensure!(
        batch.key.as_deref() == Some(want_key.as_str())
            && (
                batch.total,
                batch.completed,
                batch.pending,
                batch.processing,
                batch.failed
            ) == (7, 6, 1, 0, 0),
        "{:?}: {}",
        batch.key,
        batch.progress()
    );
    Ok(())
}

/// Reminded once on each channel when at risk (a 2xx), never otherwise; what
/// each fake answered, in order, per user.
async fn at_risk_users_reminded_once_on_each_channel(f: &mut Streak<'_>) -> Result<()> {
    let requests = &f.ran()?.requests;
    let ok = |api: &str| if api == "discord" { 204 } else { 200 };
    let mut wrong = Vec::new();
    for u in USERS.iter().filter(|u| u.zone == BERLIN) {
        for api in ["github", "discord", "telegram"] {
            let script: Vec<u16> = u
                .script
                .iter()
                .filter(|(a, _)| *a == api)
                .flat_map(|(_, s)| s.iter().copied())
                .collect();
            // Each run reads the calendar: once, and once more per channel
            // failure scripted (its retry).
            let runs = 1 + u
                .script
                .iter()
                .filter(|(a, _)| *a != "github")
                .map(|(_, s)| s.len())
                .sum::<usize>();
            let want: Vec<u16> = match api {
                "github" => script.iter().copied().chain(vec![200; runs]).collect(),
                _ if u.at_risk => script.iter().copied().chain([ok(api)]).collect(),
                _ => vec![],
            };
            let got = answered(requests, api, u.id);
            if got != want {
                wrong.push(format!("{} {api}: answered {got:?}, want {want:?}", u.id));
            }
        }
    }
    ensure!(wrong.is_empty(), "{}", wrong.join("; "));
    Ok(())
}

/// The report line of a channel's failure retried.
fn retried(api: &str) -> String {
    format!("streak-reminder: a {api} is retried on attempt 2 and the other channel is not reminded again; both receipts delivered")
}

async fn discord_503_retried_telegram_not_again(f: &mut Streak<'_>) -> Result<()> {
    retried_on_attempt_2(f.ran()?, "discord-503", "telegram")
}

async fn telegram_429_retried_discord_not_again(f: &mut Streak<'_>) -> Result<()> {
    retried_on_attempt_2(f.ran()?, "telegram-429", "discord")
}

/// User `id`'s item completed on attempt 2 with both receipts delivered; the
/// `other` channel's fake saw one request, answered 2xx: never resent.
fn retried_on_attempt_2(ran: &Ran, id: &str, other: &str) -> Result<()> {
    let i = item(&ran.items, id)?;
    let other = answered(&ran.requests, other, id);
    ensure!(
        i.status == "completed"
            && i.attempt == 2
            && delivered(i, "discord")
            && delivered(i, "telegram")
            && other.len() == 1
            && (200..300).contains(&other[0]),
        "{}, the other channel answered {other:?}",
        shape(i)
    );
    Ok(())
}

async fn github_429_retried_before_any_reminder(f: &mut Streak<'_>) -> Result<()> {
    let Ran {
        items, requests, ..
    } = f.ran()?;
    let limited = item(items, "github-429")?;
    // Its requests in order: the 429, then the calendar, then the reminders.
    let (index, user) = user("github-429");
    let order: Vec<(String, u16)> = requests
        .iter()
        .filter(|r| r.key.as_deref() == Some(key(&r.api, index, user).as_str()))
        .map(|r| (r.api.clone(), r.status))
        .collect();
    let reminded_after_calendar = order.len() == 4
        && order[..2] == [("github".to_string(), 429), ("github".to_string(), 200)]
        && order[2..]
            .iter()
            .all(|(api, status)| api != "github" && (200..300).contains(status));
    ensure!(
        limited.status == "completed" && limited.attempt == 2 && reminded_after_calendar,
        "{}, requests {order:?}",
        shape(limited)
    );
    Ok(())
}

async fn users_not_at_risk_complete_without_receipts(f: &mut Streak<'_>) -> Result<()> {
    let items = &f.ran()?.items;
    let calm: Vec<String> = ["safe", "broken"]
        .iter()
        .filter_map(|id| item(items, id).ok())
        .filter(|i| {
            let no_receipts = i.receipts.as_ref().is_none_or(|r| r == &json!({}));
            !(i.status == "completed" && i.attempt == 1 && no_receipts)
        })
        .map(|i| format!("{}: {}", i.subject_id, shape(i)))
        .collect();
    ensure!(calm.is_empty(), "{}", calm.join("; "));
    Ok(())
}

async fn new_york_waits_for_its_own_1800(f: &mut Streak<'_>) -> Result<()> {
    let Ran {
        items, requests, ..
    } = f.ran()?;
    let later = item(items, "later")?;
    let untouched = ["github", "discord", "telegram"]
        .iter()
        .all(|api| answered(requests, api, "later").is_empty());
    ensure!(
        later.status == "pending" && later.run_after.as_deref() == Some(NEW_YORK_1800) && untouched,
        "{}, asked the APIs: {}",
        shape(later),
        !untouched
    );
    Ok(())
}

async fn reminder_names_user_streak_and_date(f: &mut Streak<'_>) -> Result<()> {
    let Ran {
        requests,
        berlin_dates,
        ..
    } = f.ran()?;
    let risk_index = 0;
    let text = requests
        .iter()
        .find(|r| r.api == "discord" && r.key.as_deref() == Some(USERS[risk_index].id))
        .and_then(|r| r.text.clone());
    let want: Vec<String> = berlin_dates
        .iter()
        .map(|d| format!("risk: your GitHub streak of 2 days ends at midnight: no contribution yet today ({d})."))
        .collect();
    ensure!(
        text.as_ref().is_some_and(|t| want.contains(t)),
        "{text:?}, want one of {want:?}"
    );
    Ok(())
}

/// Secrets: GitHub's token only in GitHub's Authorization, Telegram's only in
/// its path; no token in a stored reason.
async fn tokens_only_where_they_belong(f: &mut Streak<'_>) -> Result<()> {
    let Ran {
        items, requests, ..
    } = f.ran()?;
    let leaks: Vec<String> = requests
        .iter()
        .filter(|r| {
            let allowed: &[&str] = if r.api == "github" {
                &["authorization"]
            } else {
                &[]
            };
            !r.authorized
                || r.secret_headers
                    .iter()
                    .any(|h| !allowed.contains(&h.as_str()))
        })
        .map(|r| {
            format!(
                "{} {:?}: authorized {}, secret in {:?}",
                r.api, r.key, r.authorized, r.secret_headers
            )
        })
        .collect();
    let in_reasons = items.iter().any(|i| {
        let seen = format!("{:?} {:?}", i.last_error, i.receipts);
        seen.contains(GITHUB_TOKEN)
            || seen.contains(TELEGRAM_BOT_TOKEN)
            || seen.contains("webhook-token")
    });
    ensure!(
        leaks.is_empty() && !in_reasons,
        "{leaks:?}, in reasons: {in_reasons}"
    );
    Ok(())
}

/// Ticks until the schedule's batch has nothing in flight and nothing pending
/// before the New York item's 23:00Z: a retry waiting out its backoff is still
/// to come, however far the Worker's clock is from its `run_after`.
async fn settle(target: &Target, timeout: std::time::Duration) -> Result<Batch> {
    let api = &target.api;
    let deadline = Instant::now() + timeout;
    loop {
        api.fire_cron(TICK_CRON).await?;
        let batch = api
            .batches(20)
            .await?
            .into_iter()
            .find(|b| b.schedule_id.as_deref() == Some(SCHEDULE));
        if let Some(batch) = batch {
            let mut due = batch.processing > 0;
            for item in api.all_items(&batch.id, Some("pending")).await? {
                let run_after = timestamp_ms(item.run_after.as_deref().unwrap_or_default())?;
                due |= run_after < t(NEW_YORK_1800).timestamp_millis();
            }
            if !due {
                return Ok(batch);
            }
        }
        if Instant::now() > deadline {
            bail!("the {SCHEDULE} batch did not settle in {timeout:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// What the fakes were sent for user `id` at `api`: the statuses answered.
fn answered(requests: &[FakeRequest], api: &str, id: &str) -> Vec<u16> {
    let (index, user) = user(id);
    let key = key(api, index, user);
    requests
        .iter()
        .filter(|r| r.api == api && r.key.as_deref() == Some(key.as_str()))
        .map(|r| r.status)
        .collect()
}

/// User `id` of [`USERS`] and its index there (the fakes' keys carry the index).
fn user(id: &str) -> (usize, &'static User) {
    let index = USERS
        .iter()
        .position(|u| u.id == id)
        .unwrap_or_else(|| panic!("no user {id} in USERS"));
    (index, &USERS[index])
}

/// The item of user `id`.
fn item<'a>(items: &'a [Item], id: &str) -> Result<&'a Item> {
    items
        .iter()
        .find(|i| i.subject_id == id)
        .with_context(|| format!("no item {id}"))
}

/// An item as a failure reason shows it.
fn shape(i: &Item) -> String {
    format!(
        "{} attempt {} {:?} receipts {:?}",
        i.status, i.attempt, i.last_error, i.receipts
    )
}

/// Whether the item's receipt of `channel` says delivered.
fn delivered(i: &Item, channel: &str) -> bool {
    i.receipts
        .as_ref()
        .and_then(|r| r.get(channel))
        .and_then(|r| r.get("status"))
        == Some(&json!("delivered"))
}
