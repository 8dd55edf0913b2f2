//! The e2e part of the seed's app, run for both of its versions with the same
//! users, fakes and checks: `examples/streak-reminder` (a Worker crate of its
//! own on the library, the kind `streak_check`) and `examples/streak-reminder-ts`
//! (a TypeScript Worker on `cron-fanout-handler`, bound as a `service` of the
//! default cron-fanout Worker, both in one `wrangler dev`). GitHub, Discord and
//! Telegram are faked by the sink (`sink::fakes`), and the daily schedule at
//! 18:00 in each user's zone is fired through the test clock.
//!
//! | the Worker's clock | what must happen |
//! |---|---|
//! | 2027-01-15 16:50Z (Berlin 17:50) | users and the schedule are written; a bad user is refused (the Rust kind, when written) or fails for good (the TypeScript Worker, when run); the schedule's next fire is Berlin's 18:00 |
//! | 17:00:30Z (Berlin 18:00) | one batch; each Berlin user checked: those at risk reminded once on each channel (a Discord 503, a Telegram 429 and a GitHub 429 retried, the channel already reminded never again), the others not at all; the New York user waits for its own 18:00 (23:00Z) |
//!
//! The test clock moves the queue (fires, `run_after`, leases); a run's "today"
//! is the real date in the user's zone (the app reads the real clock), and so
//! is the fake calendar's last day: the fake dates its days from the `to` the
//! Worker sends.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::target::{Target, TargetArgs};
use crate::e2e::streak_users::{
    chat_id, t, User, BERLIN, BERLIN_1800, GITHUB_TOKEN, GROUP, NEW_YORK_1800, SCHEDULE, SETUP_AT,
    TELEGRAM_BOT_TOKEN, USERS,
};
use crate::run::metrics::timestamp_ms;
use crate::runtime::api::{Batch, Item, SubjectIn, TICK_CRON};
use crate::runtime::clock::TestClock;
use crate::runtime::wrangler::min_lease_seconds;
use crate::sink::fakes::{FakeCalendar, FakeRequest, FakesClient, Setup};
use crate::{driver::steps, e2e::suite};
use anyhow::{bail, ensure, Context, Result};
use chrono::{Duration, Utc};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The example's crate, relative to the repo.
const EXAMPLE: &str = "examples/streak-reminder";
/// The TypeScript example, relative to the repo.
const EXAMPLE_TS: &str = "examples/streak-reminder-ts";
/// The default Worker's binding to the TypeScript Worker
/// (`examples/streak-reminder-ts/cron-fanout.toml`).
const BINDING_TS: &str = "STREAK";

/// Which version of the app a run of the part drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum App {
    /// The kind `streak_check` on a Worker crate of its own.
    Rust,
    /// The TypeScript Worker, `service` items of the default Worker (bound to it
    /// as [`BINDING_TS`], with the example's `cron-fanout.toml`), both in one
    /// `wrangler dev`.
    Ts,
}

impl App {
    /// Its report lines' prefix.
    fn name(self) -> &'static str {
        match self {
            App::Rust => "streak-reminder",
            App::Ts => "streak-reminder-ts",
        }
    }
}

/// The part of `app` (`--only-streak`, `--only-streak-ts`): starts its runtime
/// on a test clock, runs its checks, then stops it and says how long it took.
pub async fn e2e(
    app: App,
    args: &TargetArgs,
    timeout: std::time::Duration,
    checks: &mut Checks,
) -> Result<()> {
    let started = Instant::now();
    let clock = TestClock::at(t(SETUP_AT), Utc::now());
    let mut target = match app {
        App::Rust => open_rust(args, &clock).await?,
        App::Ts => open_ts(args, &clock).await?,
    };
    let result = run(app, &mut target, timeout, checks).await;
    target
        .stop_checked(&format!("{}: ", app.name()), checks)
        .await;
    println!(
        "# {} part: {:.1} s",
        app.name(),
        started.elapsed().as_secs_f64()
    );
    result
}

/// The example's Worker, with the fakes' tokens.
async fn open_rust(args: &TargetArgs, clock: &TestClock) -> Result<Target> {
    let tokens = [
        ("GITHUB_TOKEN", GITHUB_TOKEN.to_string()),
        ("TELEGRAM_BOT_TOKEN", TELEGRAM_BOT_TOKEN.to_string()),
    ];
    // The fakes' URLs need the sink's address, known once it started: they are
    // set with the clock's move, before anything runs.
    let config = suite::example_config(args, EXAMPLE)?;
    suite::open_worker(
        args,
        "e2e-streak",
        clock.vars().into_iter().chain(tokens),
        vec![config],
    )
    .await
    .context("starting the streak-reminder Worker")
}

/// The default Worker with the example's binding, and the TypeScript Worker.
async fn open_ts(args: &TargetArgs, clock: &TestClock) -> Result<Target> {
    let repo = args.repo.canonicalize()?;
    // The default Worker's config with the binding, as the example ships it.
    let cron_fanout = repo.join(EXAMPLE_TS).join("cron-fanout.toml");
    let build = repo.join("build/index.js");
    ensure!(
        build.exists(),
        "build/index.js is missing: run `bash scripts/build.sh --dev` first"
    );
    let configs = vec![
        cron_fanout,
        // The real APIs until the fakes' address is known (set with the clock's move).
        ts_config(&repo, None)?,
    ];
    // A call is GitHub and both channels: 3 s for it, the channels' deadline
    // under it as cron-fanout's own are (`JOB_TIMEOUT_MS` - 500 ms).
    let lease = min_lease_seconds(TS_JOB_TIMEOUT_MS, 50, 25) + 1;
    let settings = [
        ("JOB_TIMEOUT_MS", TS_JOB_TIMEOUT_MS.to_string()),
        ("LEASE_SECONDS", lease.to_string()),
    ];
    suite::open_worker(
        args,
        "e2e-streak-ts",
        clock.vars().into_iter().chain(settings),
        configs,
    )
    .await
    .context("starting cron-fanout and the streak-reminder-ts Worker")
}

/// `JOB_TIMEOUT_MS` of the TypeScript part's cron-fanout.
const TS_JOB_TIMEOUT_MS: u64 = 3_000;

/// The TypeScript Worker's `wrangler.toml` under `.loadtest/`: its `main` made
/// absolute and its `[vars]` the part's (the fakes at `fakes`, else the real
/// APIs) with the tokens.
fn ts_config(repo: &Path, fakes: Option<&FakesClient>) -> Result<PathBuf> {
    let own = std::fs::read_to_string(repo.join(EXAMPLE_TS).join("wrangler.toml"))
        .context("reading the TypeScript example's wrangler.toml")?;
    let main = "main = \"src/index.ts\"";
    let vars_at = own
        .find("\n[vars]")
        .context("its wrangler.toml has no [vars]")?;
    ensure!(own.contains(main), "its wrangler.toml has no line {main}");
    let absolute = format!(
        "main = \"{}\"",
        repo.join(EXAMPLE_TS).join("src/index.ts").display()
    );
    let mut config = own[..vars_at].replace(main, &absolute);
    let urls = match fakes {
        Some(f) => [
            f.github_api_url(),
            f.telegram_api_url(),
            f.discord_api_url(),
        ],
        None => [
            "https://api.github.com".into(),
            "https://api.telegram.org".into(),
            "https://discord.com".into(),
        ],
    };
    config.push_str(&format!(
        "\n[vars]\nGITHUB_API_URL = \"{}\"\nTELEGRAM_API_URL = \"{}\"\nDISCORD_API_URL = \"{}\"\n\
         CHANNEL_DEADLINE_MS = \"{}\"\nGITHUB_TOKEN = \"{GITHUB_TOKEN}\"\nTELEGRAM_BOT_TOKEN = \"{TELEGRAM_BOT_TOKEN}\"\n",
        urls[0],
        urls[1],
        urls[2],
        TS_JOB_TIMEOUT_MS - 500
    ));
    let path = repo.join(".loadtest").join("e2e-streak-ts-worker.toml");
    std::fs::create_dir_all(path.parent().context("a parent")?)?;
    std::fs::write(&path, config)?;
    Ok(path)
}

/// A user as `app` takes one: the kind's payload, or a `service` item's `data`.
fn subject(app: App, fakes: &FakesClient, index: usize, user: &User) -> SubjectIn {
    let user_json = json!({
        "github_login": user.id,
        "timezone": user.zone,
        "discord_webhook_url": fakes.discord_webhook_url(user.id, "webhook-token"),
        "telegram_chat_id": chat_id(index),
    });
    let (kind, payload) = match app {
        App::Rust => ("streak_check", user_json),
        App::Ts => ("service", service_payload(user_json)),
    };
    SubjectIn {
        id: user.id.into(),
        kind: kind.into(),
        payload,
        active: true,
        group: Some(GROUP.into()),
        timezone: Some(user.zone.into()),
    }
}

/// A `service` payload calling the TypeScript Worker with `data`.
fn service_payload(data: Value) -> Value {
    json!({"service": BINDING_TS, "path": "/", "data": data})
}

/// The fakes' key of `user` at `api`.
fn key(api: &str, index: usize, user: &User) -> String {
    match api {
        "telegram" => chat_id(index).to_string(),
        _ => user.id.to_string(),
    }
}

async fn run(
    app: App,
    target: &mut Target,
    timeout: std::time::Duration,
    checks: &mut Checks,
) -> Result<()> {
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
        app,
        target,
        fakes,
        timeout,
        run: None,
        bad_batch: None,
    };
    let name = |what: &str| format!("{}: {what}", app.name());
    let mut list = match app {
        App::Rust => vec![
            check!(name("a user without a channel is refused with 400 invalid_payload, and nothing is written"), a_user_without_a_channel_is_refused),
        ],
        App::Ts => vec![
            check!(name("a user without a channel is queued as a service item (cron-fanout cannot read its data)"), a_user_without_a_channel_is_queued),
        ],
    };
    list.extend([
        check!(needed name("the daily schedule at 18:00 in each user's zone is created; its next fire is the earliest zone's 18:00 (Berlin's, 17:00Z)"), daily_schedule_next_fires_at_berlins_1800),
    ]);
    if app == App::Rust {
        list.push(check!(
            name("GET /subjects lists each user's Discord webhook URL as [redacted]"),
            listings_hide_discord_webhook_urls
        ));
    }
    list.extend([
        check!(needed name("one batch streaks:2027-01-15, counts exact: 7 users, 6 completed (the Berlin ones), 1 pending (New York), none failed"), berlins_1800_makes_one_batch_with_exact_counts),
        check!(name("each at-risk user is reminded exactly once on Discord and once on Telegram; users who contributed today or lost their streak are not"), at_risk_users_reminded_once_on_each_channel),
        check!(retried(app, "Discord 503"), discord_503_retried_telegram_not_again),
        check!(retried(app, "Telegram 429"), telegram_429_retried_discord_not_again),
        check!(name(match app {
            App::Rust => "a GitHub 429 is a refusal (the kind's `refused`): its attempt given back, it completes on attempt 1; nobody is reminded before the calendar is read",
            App::Ts => "a GitHub 429 (the handler's retry with afterSeconds: its own delay) is retried and completes on attempt 2; nobody is reminded before the calendar is read",
        }), github_429_retried_before_any_reminder),
        check!(name("users not at risk complete on attempt 1 with no receipts"), users_not_at_risk_complete_without_receipts),
        check!(name("the New York user's check waits for its own 18:00 (run_after 23:00Z) and has not run"), new_york_waits_for_its_own_1800),
        check!(name("the reminder names the user, the streak and the user's own date"), reminder_names_user_streak_and_date),
        check!(name("every API call carried the right token, no token travelled in another header, none is in an item's reason"), tokens_only_where_they_belong),
    ]);
    if app == App::Ts {
        list.push(check!(name("the user without a channel failed for good with the Worker's reason (HTTP 422: not run: give at least one channel…), and nothing was sent for it"), a_user_without_a_channel_failed_for_good));
    }
    checks.run(&mut f, list).await;
    Ok(())
}

/// The part's Worker and fakes, and what Berlin's 18:00 left once it settled.
struct Streak<'t> {
    app: App,
    target: &'t mut Target,
    fakes: FakesClient,
    timeout: std::time::Duration,
    run: Option<Ran>,
    /// The TypeScript part's batch of the user without a channel.
    bad_batch: Option<crate::runtime::api::Id>,
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

/// The login of the user without a channel.
const NO_CHANNEL: &str = "nobody";

/// A user without a channel, as a `service` item: cron-fanout takes its `data`
/// as it is (only the Worker can tell), so it is queued.
async fn a_user_without_a_channel_is_queued(f: &mut Streak<'_>) -> Result<()> {
    let item = json!({"subject_id": "no-channel", "kind": "service",
                      "payload": service_payload(json!({"github_login": NO_CHANNEL}))});
    let body = json!({"key": "no-channel", "items": [item]});
    let (created, batch): (bool, Batch) = f.target.api.create_batch(&body).await?;
    ensure!(created && batch.total == 1, "{}", batch.progress());
    f.bad_batch = Some(batch.id);
    Ok(())
}

/// It ran with the others and failed for good with the Worker's words; the
/// fakes saw nothing of it.
async fn a_user_without_a_channel_failed_for_good(f: &mut Streak<'_>) -> Result<()> {
    let id = f.bad_batch.as_ref().context("no batch of the user")?;
    let items = f.target.api.all_items(id, None).await?;
    let bad = item(&items, "no-channel")?;
    let asked = f
        .ran()?
        .requests
        .iter()
        .any(|r| r.key.as_deref() == Some(NO_CHANNEL));
    let said = "permanent failure: HTTP 422: not run: give at least one channel: discord_webhook_url or telegram_chat_id";
    ensure!(
        bad.status == "failed"
            && bad.attempt == 1
            && bad.last_error.as_deref() == Some(said)
            && !asked,
        "{}, asked the APIs: {asked}",
        shape(bad)
    );
    Ok(())
}

/// Writes the users and their daily schedule.
async fn daily_schedule_next_fires_at_berlins_1800(f: &mut Streak<'_>) -> Result<()> {
    let subjects: Vec<SubjectIn> = USERS
        .iter()
        .enumerate()
        .map(|(i, u)| subject(f.app, &f.fakes, i, u))
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
    match f.app {
        App::Rust => {
            runtime.set_var("GITHUB_API_URL", Some(&f.fakes.github_api_url()));
            runtime.set_var("TELEGRAM_API_URL", Some(&f.fakes.telegram_api_url()));
        }
        // `--var` reaches the first Worker only: the TypeScript one's config
        // is written again (the same path the runtime starts it from).
        App::Ts => {
            let repo = runtime.config().repo.clone();
            ts_config(&repo, Some(&f.fakes))?;
        }
    }
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
fn retried(app: App, api: &str) -> String {
    format!("{}: a {api} is retried on attempt 2 and the other channel is not reminded again; both receipts delivered", app.name())
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
    let app = f.app;
    let ran = f.ran()?;
    let limited = item(&ran.items, "github-429")?;
    // Its requests in order: the 429, then the calendar, then the reminders.
    let order = requests_of(&ran.requests, "github-429");
    let reminded_after_calendar = order.len() == 4
        && order[..2] == [("github", 429), ("github", 200)]
        && order[2..]
            .iter()
            .all(|(api, status)| *api != "github" && (200..300).contains(status));
    // The Rust kind reads GitHub's 429 as a refusal, which spends no attempt;
    // the TypeScript handler answers it with its own retry, which spends one.
    let attempt = match app {
        App::Rust => 1,
        App::Ts => 2,
    };
    ensure!(
        limited.status == "completed" && limited.attempt == attempt && reminded_after_calendar,
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

/// What the fakes were sent for user `id`, in order: each API and its answer.
fn requests_of<'a>(requests: &'a [FakeRequest], id: &str) -> Vec<(&'a str, u16)> {
    let (index, user) = user(id);
    requests
        .iter()
        .filter(|r| r.key.as_deref() == Some(key(&r.api, index, user).as_str()))
        .map(|r| (r.api.as_str(), r.status))
        .collect()
}

/// What the fakes were sent for user `id` at `api`: the statuses answered.
fn answered(requests: &[FakeRequest], api: &str, id: &str) -> Vec<u16> {
    requests_of(requests, id)
        .into_iter()
        .filter(|(a, _)| *a == api)
        .map(|(_, status)| status)
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
