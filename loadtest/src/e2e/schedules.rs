//! The schedules part of `loadtest e2e`, on a `wrangler dev` of its own
//! whose test clock (`TEST_CLOCK_OFFSET_MS`) the suite moves by restarting it, so
//! that ticks run "at" chosen instants of a January day (no DST anywhere in play:
//! the host tests cover the transitions):
//!
//! | phase | the Worker's clock | what must happen |
//! |---|---|---|
//! | setup | 2027-01-14 18:00:00Z | the `daily` schedule's noon fire was missed (the migration set it to 12:00 of the real date): the first ticks create `daily:2027-01-14`, once, over the ungrouped subjects only; then subjects in three zones, three schedules, bad bodies refused, nothing due |
//! | Kiritimati | 19:00:30Z | 09:00 on the 15th at UTC+14: the digest batch, its Kiritimati items only; feeds fires once for an hour of missed minutes; the one-off fires and disables itself |
//! | a minute later | 19:01:30Z | feeds fires once more, nothing else |
//! | Berlin | 01-15 08:00:30Z | Berlin's 09:00: its items; feeds once for 13 missed hours |
//! | New York | 14:00:30Z | New York's 09:00: its items; the digest batch finishes |
//!
//! Every phase fires two ticks at once first (they race for the same due
//! schedules), then ticks until nothing is in flight or due. Items are webhooks to
//! the in-process sink, which records each delivery.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::target::{Target, TargetArgs};
use crate::e2e::schedule_bodies::bad_bodies;
use crate::e2e::suite;
use crate::run::metrics::timestamp_ms;
use crate::runtime::api::{Api, Batch, Schedule, SubjectIn, TICK_CRON};
use crate::runtime::clock::TestClock;
use crate::sink::faults::Faults;
use crate::sink::Delivery;
use anyhow::{bail, ensure, Context, Result};
use chrono::{DateTime, Duration, Utc};
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;

/// The zones of the digest's subjects, each with its 09:00 on 2027-01-15 in UTC,
/// worked out by hand: UTC+14, UTC+1 and UTC-5 in January.
const ZONES: [(&str, &str, &str); 3] = [
    ("kir", "Pacific/Kiritimati", "2027-01-14T19:00:00.000Z"),
    ("ber", "Europe/Berlin", "2027-01-15T08:00:00.000Z"),
    ("nyc", "America/New_York", "2027-01-15T14:00:00.000Z"),
];
const SETUP: &str = "2027-01-14T18:00:00Z";
const BACKFILL_AT: &str = "2027-01-14T19:00:10.000Z";
/// How far past each phase's instant its clock starts: the restart and the first
/// ticks take seconds, well inside the same minute.
const PAST_SECONDS: i64 = 30;
/// Digest subjects per zone.
const PER_ZONE: usize = 2;

fn t(rfc: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc)
        .expect("a valid instant")
        .to_utc()
}

/// Runs the phases; one check line each, as the rest of the suite.
pub async fn run(target: &TargetArgs, checks: &mut Checks) -> Result<()> {
    let started = Instant::now();
    let clock = TestClock::at(t(SETUP), Utc::now());
    let target = suite::open_worker(target, "e2e-schedules", clock.vars(), Vec::new())
        .await
        .context("starting the schedules Worker")?;
    let mut f = Schedules {
        target,
        clock,
        seen: Seen::default(),
        feeds_1900: String::new(),
        feeds_now: String::new(),
        zone: 0,
        feeds: None,
    };
    let result = phases(&mut f, checks).await;
    f.target.stop_checked("schedules: ", checks).await;
    println!(
        "# schedules part: {:.1} s (5 runtime starts)",
        started.elapsed().as_secs_f64()
    );
    result
}

/// What the schedules' checks share: the Worker and its clock, and what the
/// phase's ticks left.
struct Schedules {
    target: Target,
    clock: TestClock,
    /// Read once the phase's ticks settled.
    seen: Seen,
    /// The key feeds fired at Kiritimati's 09:00, and the one of this phase.
    feeds_1900: String,
    feeds_now: String,
    /// The zone (in `ZONES`) whose 09:00 this phase is.
    zone: usize,
    /// The every-60-s schedule as first saved.
    feeds: Option<Schedule>,
}

impl Schedules {
    /// Restarts the runtime with its clock at `to` (plus a few seconds of
    /// start-up), settles the ticks and reads what they left.
    async fn at(&mut self, to: DateTime<Utc>) -> Result<()> {
        self.clock = move_clock(&mut self.target, to).await?;
        self.settle().await
    }

    async fn settle(&mut self) -> Result<()> {
        self.feeds_now = settle(&self.target.api, &self.clock).await?;
        self.seen = seen(&self.target).await?;
        Ok(())
    }
}

/// What the suite reads back after each phase.
#[derive(Default)]
struct Seen {
    batches: Vec<Batch>,
    deliveries: Vec<Delivery>,
}

impl Seen {
    /// Keys of the batches `schedule_id` fired, sorted.
    fn keys(&self, schedule_id: &str) -> Vec<String> {
        let mut keys: Vec<String> = self
            .batches
            .iter()
            .filter(|b| b.schedule_id.as_deref() == Some(schedule_id))
            .filter_map(|b| b.key.clone())
            .collect();
        keys.sort();
        keys
    }

    fn batch(&self, key: &str) -> Result<&Batch> {
        self.batches
            .iter()
            .find(|b| b.key.as_deref() == Some(key))
            .with_context(|| format!("no batch {key:?}"))
    }

    /// Subject → deliveries of batch `key`.
    fn delivered(&self, key: &str) -> BTreeMap<String, usize> {
        let Ok(batch) = self.batch(key) else {
            return BTreeMap::new();
        };
        let mut by_subject = BTreeMap::new();
        for d in &self.deliveries {
            if d.batch_id.as_deref() == Some(batch.id.0.as_str()) {
                *by_subject.entry(d.subject_id.clone()).or_default() += 1;
            }
        }
        by_subject
    }
}

async fn seen(target: &Target) -> Result<Seen> {
    Ok(Seen {
        batches: target.api.batches(100).await?,
        deliveries: target.sink.deliveries().await?,
    })
}

/// `subjects` each delivered exactly once, and nobody else.
/// Schedule `id` answers `next_fire_at` `at`.
async fn next_fire_is(api: &Api, id: &str, at: &str) -> Result<()> {
    let schedule = api.schedule(id).await?;
    ensure!(schedule.next_fire_at.as_deref() == Some(at), "{schedule:?}");
    Ok(())
}

fn exactly_once(got: &BTreeMap<String, usize>, subjects: &[String]) -> Result<()> {
    let want: BTreeMap<String, usize> = subjects.iter().map(|s| (s.clone(), 1)).collect();
    ensure!(*got == want, "deliveries by subject {got:?}, want {want:?}");
    Ok(())
}

fn digest_subjects(prefix: &str) -> Vec<String> {
    (1..=PER_ZONE).map(|n| format!("{prefix}-{n}")).collect()
}

/// The subjects of the zones up to and including `last` (in `ZONES` order).
fn digest_through(last: usize) -> Vec<String> {
    ZONES[..=last]
        .iter()
        .flat_map(|(prefix, _, _)| digest_subjects(prefix))
        .collect()
}

/// The start of the minute `now` falls in, RFC 3339 as the API writes it.
fn minute(now: DateTime<Utc>) -> String {
    cron_fanout::core::time::rfc3339(now.timestamp_millis().div_euclid(60_000) * 60_000)
}

/// The key an every-60-s schedule fires at `now`: that minute's.
fn minute_key(id: &str, now: DateTime<Utc>) -> String {
    format!("{id}:{}", minute(now))
}

/// Restarts the runtime with its clock at `to` (plus a few seconds of start-up).
async fn move_clock(target: &mut Target, to: DateTime<Utc>) -> Result<TestClock> {
    let clock = TestClock::at(to, Utc::now());
    let runtime = target
        .runtime
        .as_mut()
        .context("the schedules part needs a local runtime")?;
    runtime.set_var("TEST_CLOCK_OFFSET_MS", Some(&clock.offset_ms.to_string()));
    runtime.restart().await?;
    Ok(clock)
}

/// Fires two ticks at once (racing for the same due schedules), then ticks until
/// no batch has an item in flight or due by the Worker's clock. Returns the
/// minute key feeds would fire in (read before the first tick).
async fn settle(api: &Api, clock: &TestClock) -> Result<String> {
    let feeds_key = minute_key("feeds", clock.now());
    let (a, b) = tokio::join!(api.fire_cron(TICK_CRON), api.fire_cron(TICK_CRON));
    a?;
    b?;
    for _ in 0..20 {
        if !busy(api, clock.now()).await? {
            return Ok(feeds_key);
        }
        api.fire_cron(TICK_CRON).await?;
    }
    bail!("items still in flight or due after 20 ticks")
}

async fn busy(api: &Api, now: DateTime<Utc>) -> Result<bool> {
    for b in api.batches(100).await? {
        if b.processing > 0 {
            return Ok(true);
        }
        if b.pending > 0 {
            for item in api.all_items(&b.id, Some("pending")).await? {
                let run_after = timestamp_ms(item.run_after.as_deref().unwrap_or_default())?;
                if run_after <= now.timestamp_millis() {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}

fn subject(target: &Target, id: &str, group: &str, timezone: &str) -> SubjectIn {
    SubjectIn {
        id: id.to_string(),
        kind: "webhook".into(),
        payload: json!({"url": target.sink.hook_url(id, &Faults::default()), "data": {"id": id}}),
        active: true,
        group: Some(group.to_string()),
        timezone: Some(timezone.to_string()),
    }
}

async fn phases(f: &mut Schedules, checks: &mut Checks) -> Result<()> {
    // The noon fire of `daily` never ran (the Worker was down since before it;
    // Cloudflare retries no cron run). Only tick crons are fired, after 12:00: the
    // first creates the day's batch, and a racing second creates nothing. Three
    // subjects without a group and one in a group: `daily` reaches only the three.
    let mut early: Vec<SubjectIn> = (1..=3)
        .map(|n| SubjectIn {
            group: None,
            ..subject(&f.target, &format!("early-{n}"), "", "UTC")
        })
        .collect();
    early.push(subject(&f.target, "early-grouped", "early", "UTC"));
    f.target.api.put_subjects(&early).await?;
    f.settle().await?;
    let missed_daily = vec![
        check!(
            "after 12:00 UTC with the noon fire missed, tick crons alone create daily:2027-01-14 once, over the subjects without a group, delivered once each",
            missed_daily_fires_once
        ),
        check!(
            "the default daily schedule delivers nothing to a subject in a group",
            daily_skips_grouped_subjects
        ),
        check!(
            "the daily schedule then waits for the next noon (2027-01-15T12:00Z)",
            daily_waits_for_the_next_noon
        ),
    ];
    checks.run(f, missed_daily).await;
    // From here on it would fire an empty batch (no later subject is ungrouped) at
    // 12:00 UTC, which the phases' batch counts leave out: off.
    f.target
        .api
        .put_schedule("daily", &json!({"cron": "0 12 * * *", "enabled": false}))
        .await?;

    // Subjects, schedules and bad bodies at 2027-01-14T18:00Z; nothing is due yet.
    let mut subjects: Vec<SubjectIn> = ZONES
        .iter()
        .flat_map(|(prefix, zone, _)| {
            digest_subjects(prefix)
                .into_iter()
                .map(|id| subject(&f.target, &id, "digest", zone))
                .collect::<Vec<_>>()
        })
        .collect();
    subjects.push(subject(&f.target, "feed-1", "feeds", "UTC"));
    subjects.push(subject(&f.target, "feed-2", "feeds", "Asia/Tokyo"));
    subjects.push(subject(&f.target, "once-1", "once", "UTC"));
    f.target.api.put_subjects(&subjects).await?;
    let setup = vec![
        check!(
            "PUT /subjects stores each subject's group and timezone; GET /subjects lists them",
            subjects_keep_group_and_timezone
        ),
        check!(
            "GET /subjects/{id} answers one subject with its group and timezone",
            one_subject_answered
        ),
        check!(
            "PUT /schedules/{id} creates (201) and answers next_fire_at: each subject's 09:00 at the earliest zone's (Kiritimati's, 2027-01-14T19:00Z), a one-off at its instant, every 60 s at the next minute",
            schedules_created_with_their_next_fire
        ),
        check!(
            "PUT /schedules/{id} on an existing schedule replaces it (200), keeping created_at",
            schedule_replaced_keeping_created_at
        ),
    ];
    checks.run(f, setup).await;
    bad_bodies(&f.target.api, BACKFILL_AT, DIGEST_KEY, checks).await?;
    let nothing_due = vec![check!(
        "ticks before any schedule is due create no batch",
        nothing_due_yet
    )];
    checks.run(f, nothing_due).await;

    // 19:00:30Z: 09:00 of the 15th in Kiritimati.
    f.at(t(ZONES[0].2) + Duration::seconds(PAST_SECONDS))
        .await?;
    f.feeds_1900 = f.feeds_now.clone();
    let kiritimati = vec![
        check!(
            "at 09:00 in Kiritimati two racing ticks fire each due schedule exactly once: digest:2027-01-15 over its 6 subjects, feeds once for an hour of missed minutes, the one-off (the disabled daily nothing)",
            due_schedules_fire_once
        ),
        check!(
            "each digest item's run_after is exactly its subject's 09:00 (Kiritimati 01-14T19:00Z, Berlin 01-15T08:00Z, New York 01-15T14:00Z)",
            digest_items_due_at_their_nine
        ),
        check!(
            "only the Kiritimati subjects are delivered at Kiritimati's 09:00 (once each); the others wait in pending",
            only_kiritimati_delivered
        ),
        check!(
            "the every-60-s and one-off batches are delivered once each",
            feeds_and_one_off_delivered_once
        ),
        check!(
            "the one-off disabled itself after firing (enabled false, next_fire_at null, last_batch_id its batch)",
            one_off_disabled_itself
        ),
        check!(
            "digest's next fire is the 16th's at Kiritimati (2027-01-15T19:00Z)",
            digest_next_fires_on_the_16th
        ),
        check!(
            "re-firing creates nothing: ticks again, and the one-off saved again (same instant) then ticked, add no batch and no delivery",
            refiring_creates_nothing
        ),
    ];
    checks.run(f, kiritimati).await;

    // A minute later: feeds only.
    f.at(t(ZONES[0].2) + Duration::seconds(60 + PAST_SECONDS))
        .await?;
    let a_minute_later = vec![check!(
        format!(
            "a minute later feeds fires exactly one more batch ({}), delivered once each; nothing else fires",
            f.feeds_now
        ),
        feeds_fires_once_more
    )];
    checks.run(f, a_minute_later).await;

    // Berlin's and New York's 09:00.
    for (zone, (_, name, nine)) in ZONES.iter().enumerate().skip(1) {
        f.zone = zone;
        f.at(t(nine) + Duration::seconds(PAST_SECONDS)).await?;
        let waiting = digest_through(ZONES.len() - 1).len() - digest_through(zone).len();
        let nine_here = vec![
            check!(
                format!("at 09:00 in {name} its subjects are delivered, once each; {waiting} later ones still wait"),
                zone_delivered_once
            ),
            check!(
                format!("feeds, idle for hours, fires once for the latest minute ({}), not once per missed minute", f.feeds_now),
                idle_feeds_fires_once_for_the_latest_minute
            ),
        ];
        checks.run(f, nine_here).await;
    }

    // After New York's 09:00: the digest batch is done, each item at its own hour.
    let finale = vec![
        check!(
            "the digest batch finished: every item completed once, within two minutes after its own 09:00, in zone order Kiritimati, Berlin, New York",
            digest_finished_in_zone_order
        ),
        check!(
            "the daily schedule, once disabled, fired nothing more; no invocation used more subrequests than its budget",
            disabled_daily_fired_nothing_more
        ),
    ];
    checks.run(f, finale).await;
    Ok(())
}

async fn missed_daily_fires_once(f: &mut Schedules) -> Result<()> {
    let s = &f.seen;
    ensure!(
        s.keys("daily") == ["daily:2027-01-14"] && s.batches.len() == 1,
        "batches {:?}",
        s.batches.iter().map(|b| &b.key).collect::<Vec<_>>()
    );
    let ungrouped: Vec<String> = (1..=3).map(|n| format!("early-{n}")).collect();
    exactly_once(&s.delivered("daily:2027-01-14"), &ungrouped)
}

async fn daily_skips_grouped_subjects(f: &mut Schedules) -> Result<()> {
    match f
        .seen
        .deliveries
        .iter()
        .filter(|d| d.subject_id == "early-grouped")
        .count()
    {
        0 => Ok(()),
        n => bail!("early-grouped delivered {n} times"),
    }
}

async fn daily_waits_for_the_next_noon(f: &mut Schedules) -> Result<()> {
    next_fire_is(&f.target.api, "daily", "2027-01-15T12:00:00.000Z").await
}

async fn subjects_keep_group_and_timezone(f: &mut Schedules) -> Result<()> {
    let ber = f
        .target
        .api
        .subjects_page(Some("ber-0"), 1)
        .await?
        .subjects
        .pop()
        .context("no subject ber-1")?;
    ensure!(
        (ber.id.as_str(), ber.group.as_str(), ber.timezone.as_str())
            == ("ber-1", "digest", "Europe/Berlin"),
        "{ber:?}"
    );
    Ok(())
}

async fn one_subject_answered(f: &mut Schedules) -> Result<()> {
    let one = f
        .target
        .api
        .admin_raw(Method::GET, "/subjects/nyc-2", None)
        .await?;
    match one.json() {
        Some(v) if v["group"] == json!("digest") && v["timezone"] == json!("America/New_York") => {
            Ok(())
        }
        _ => bail!("{} {}", one.status, one.body),
    }
}

/// The every-60-s schedule's body.
fn feeds_body() -> Value {
    json!({"every_seconds": 60, "group": "feeds"})
}

async fn schedules_created_with_their_next_fire(f: &mut Schedules) -> Result<()> {
    let api = &f.target.api;
    let (created, digest) = api
        .put_schedule(
            "digest",
            &json!({"cron": "0 9 * * *", "timezone": "subject", "group": "digest"}),
        )
        .await?;
    let (_, backfill) = api
        .put_schedule("backfill", &json!({"at": BACKFILL_AT, "group": "once"}))
        .await?;
    let (_, feeds) = api.put_schedule("feeds", &feeds_body()).await?;
    let next_minute = minute(f.clock.now() + Duration::minutes(1));
    let fires = (
        created,
        digest.next_fire_at.as_deref(),
        backfill.next_fire_at.as_deref(),
        feeds.next_fire_at.as_deref(),
    );
    ensure!(
        matches!(fires, (true, Some(d), Some(b), Some(f))
            if d == ZONES[0].2 && b == BACKFILL_AT && f == next_minute),
        "{fires:?}"
    );
    f.feeds = Some(feeds);
    Ok(())
}

async fn schedule_replaced_keeping_created_at(f: &mut Schedules) -> Result<()> {
    let feeds = f.feeds.as_ref().context("feeds was not saved")?;
    let (created_again, again) = f.target.api.put_schedule("feeds", &feeds_body()).await?;
    ensure!(
        !created_again
            && again.created_at == feeds.created_at
            && again.updated_at >= feeds.updated_at,
        "created {created_again}, {again:?}"
    );
    Ok(())
}

async fn nothing_due_yet(f: &mut Schedules) -> Result<()> {
    let api = &f.target.api;
    let (a, b) = tokio::join!(api.fire_cron(TICK_CRON), api.fire_cron(TICK_CRON));
    a?;
    b?;
    let batches = api.batches(100).await?;
    ensure!(
        batches.len() == 1,
        "{} batches, want only the daily one",
        batches.len()
    );
    Ok(())
}

/// The key of the one-off's batch.
fn backfill_key() -> String {
    format!("backfill:{BACKFILL_AT}")
}

/// The digest's one batch.
const DIGEST_KEY: &str = "digest:2027-01-15";

async fn due_schedules_fire_once(f: &mut Schedules) -> Result<()> {
    let mut fired: Vec<(String, u64)> = f
        .seen
        .batches
        .iter()
        .map(|b| (b.key.clone().unwrap_or_default(), b.total))
        .collect();
    fired.sort();
    let mut want = vec![
        ("daily:2027-01-14".to_string(), 3),
        (backfill_key(), 1),
        (DIGEST_KEY.to_string(), (ZONES.len() * PER_ZONE) as u64),
        (f.feeds_1900.clone(), 2),
    ];
    want.sort();
    ensure!(fired == want, "batches {fired:?}, want {want:?}");
    Ok(())
}

async fn digest_items_due_at_their_nine(f: &mut Schedules) -> Result<()> {
    let digest = f.seen.batch(DIGEST_KEY)?;
    let items = f.target.api.all_items(&digest.id, None).await?;
    let run_after: BTreeMap<String, String> = items
        .iter()
        .map(|i| {
            (
                i.subject_id.clone(),
                i.run_after.clone().unwrap_or_default(),
            )
        })
        .collect();
    let want: BTreeMap<String, String> = ZONES
        .iter()
        .flat_map(|(prefix, _, nine)| {
            digest_subjects(prefix)
                .into_iter()
                .map(|id| (id, nine.to_string()))
        })
        .collect();
    ensure!(run_after == want, "{run_after:?}");
    Ok(())
}

async fn only_kiritimati_delivered(f: &mut Schedules) -> Result<()> {
    exactly_once(&f.seen.delivered(DIGEST_KEY), &digest_through(0))?;
    let digest = f.seen.batch(DIGEST_KEY)?;
    ensure!(
        digest.pending == (2 * PER_ZONE) as u64 && digest.schedule_id.as_deref() == Some("digest"),
        "{} {:?}",
        digest.progress(),
        digest.schedule_id
    );
    Ok(())
}

async fn feeds_and_one_off_delivered_once(f: &mut Schedules) -> Result<()> {
    exactly_once(
        &f.seen.delivered(&f.feeds_1900),
        &["feed-1".into(), "feed-2".into()],
    )?;
    exactly_once(&f.seen.delivered(&backfill_key()), &["once-1".into()])
}

async fn one_off_disabled_itself(f: &mut Schedules) -> Result<()> {
    let backfill = f.target.api.schedule("backfill").await?;
    let batch_id = &f.seen.batch(&backfill_key())?.id.0;
    ensure!(
        !backfill.enabled
            && backfill.next_fire_at.is_none()
            && backfill.last_batch_id.as_ref() == Some(batch_id),
        "{backfill:?}"
    );
    Ok(())
}

async fn digest_next_fires_on_the_16th(f: &mut Schedules) -> Result<()> {
    next_fire_is(&f.target.api, "digest", "2027-01-15T19:00:00.000Z").await
}

/// Re-firing creates nothing: ticks again at the same instant, and the one-off
/// saved again with its instant (due at once, same key).
async fn refiring_creates_nothing(f: &mut Schedules) -> Result<()> {
    let target = &f.target;
    let api = &target.api;
    let before = seen(target).await?;
    let (a, b) = tokio::join!(api.fire_cron(TICK_CRON), api.fire_cron(TICK_CRON));
    a?;
    b?;
    let (created, saved) = api
        .put_schedule("backfill", &json!({"at": BACKFILL_AT, "group": "once"}))
        .await?;
    if created || saved.next_fire_at.as_deref() != Some(BACKFILL_AT) {
        bail!("saving backfill again: created {created}, {saved:?}");
    }
    api.fire_cron(TICK_CRON).await?;
    let after = seen(target).await?;
    let keys = |s: &Seen| {
        s.batches
            .iter()
            .map(|b| (b.key.clone(), b.total))
            .collect::<Vec<_>>()
    };
    if keys(&after) != keys(&before) || after.deliveries.len() != before.deliveries.len() {
        bail!(
            "{} batches (was {}), {} deliveries (was {})",
            after.batches.len(),
            before.batches.len(),
            after.deliveries.len(),
            before.deliveries.len()
        );
    }
    let backfill = api.schedule("backfill").await?;
    if backfill.enabled {
        bail!("backfill is enabled again after its re-fire: {backfill:?}");
    }
    Ok(())
}

async fn feeds_fires_once_more(f: &mut Schedules) -> Result<()> {
    let s = &f.seen;
    let want = vec![f.feeds_1900.clone(), f.feeds_now.clone()];
    ensure!(
        s.keys("feeds") == want,
        "feeds batches {:?}, want {want:?}",
        s.keys("feeds")
    );
    ensure!(s.batches.len() == 5, "{} batches, want 5", s.batches.len());
    exactly_once(
        &s.delivered(&f.feeds_now),
        &["feed-1".into(), "feed-2".into()],
    )
}

async fn zone_delivered_once(f: &mut Schedules) -> Result<()> {
    exactly_once(&f.seen.delivered(DIGEST_KEY), &digest_through(f.zone))
}

async fn idle_feeds_fires_once_for_the_latest_minute(f: &mut Schedules) -> Result<()> {
    // Two before the first zone here, then one per zone.
    let fired = f.seen.keys("feeds");
    ensure!(
        fired.contains(&f.feeds_now) && fired.len() == 2 + f.zone,
        "feeds batches {fired:?}"
    );
    exactly_once(
        &f.seen.delivered(&f.feeds_now),
        &["feed-1".into(), "feed-2".into()],
    )
}

async fn digest_finished_in_zone_order(f: &mut Schedules) -> Result<()> {
    let digest = f.seen.batch(DIGEST_KEY)?;
    let items = f.target.api.all_items(&digest.id, None).await?;
    let mut order: Vec<(i64, String)> = Vec::new();
    let mut late = Vec::new();
    for i in &items {
        let run_after = timestamp_ms(i.run_after.as_deref().unwrap_or_default())?;
        let done = timestamp_ms(i.completed_at.as_deref().unwrap_or("1970-01-01T00:00:00Z"))?;
        // Completed by the phase's ticks, which start seconds after its 09:00 + 30 s.
        if i.status != "completed" || done < run_after || done > run_after + 120_000 {
            late.push(format!(
                "{} {} at {:?} (due {:?})",
                i.subject_id, i.status, i.completed_at, i.run_after
            ));
        }
        order.push((done, i.subject_id.clone()));
    }
    order.sort();
    let zones_in_order: Vec<&str> = order.iter().map(|(_, s)| &s[..3]).collect();
    let want: Vec<&str> = ZONES.iter().flat_map(|(p, _, _)| [*p; PER_ZONE]).collect();
    exactly_once(
        &f.seen.delivered(DIGEST_KEY),
        &digest_through(ZONES.len() - 1),
    )?;
    ensure!(
        digest.is_finished() && late.is_empty(),
        "{}; off time: {late:?}",
        digest.progress()
    );
    ensure!(zones_in_order == want, "completion order {order:?}");
    Ok(())
}

async fn disabled_daily_fired_nothing_more(f: &mut Schedules) -> Result<()> {
    let invocations = f.target.api.invocations(1000).await?;
    ensure!(
        f.seen.keys("daily") == ["daily:2027-01-14"],
        "daily batches {:?}",
        f.seen.keys("daily")
    );
    crate::driver::verdict::within_budget(&invocations).map_err(anyhow::Error::msg)
}
