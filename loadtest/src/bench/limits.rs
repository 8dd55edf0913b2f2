//! `loadtest bench --only-limits` (and part of the whole bench): what flow
//! control achieves and costs on `wrangler dev`, each on a fresh runtime.
//!
//! - a rate limit over no-op items: starts achieved ÷ what the limit allows
//!   (`burst + rate × t`, t from the first start to the last, the items' own
//!   `started_at`);
//! - a concurrency limit over webhook items with a slow receiver: the most the
//!   sink had in flight at once;
//! - D1 rows written and statements per item with one limited key on every
//!   item, beside the same run without keys;
//! - D1 rows read by a tick while many items wait on an exhausted key, beside
//!   an idle tick of the same Worker before the items existed: a held queue
//!   must cost a claim a bounded read, not one row per waiting item; and
//!   what reading why they wait costs (`waiting_on` of a page of 100 of them,
//!   and the batch's counts).

use crate::bench::control::tick_rows_read;
use crate::driver::drive::{self, Pace};
use crate::driver::steps::put_limit;
use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::run;
use crate::run::report::RunReport;
use crate::run::scenario::{Job, Scenario, Spec};
use crate::run::table::{num, Table};
use crate::runtime::api::{Api, Id};
use crate::sink::faults::Faults;
use anyhow::{ensure, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::task::JoinSet;

/// The rate part: no-op items through one key of 50 a second (burst 10).
const RATE: u64 = 50;
const BURST: u64 = 10;
const RATE_ITEMS: usize = 1_000;
/// The concurrency part: webhook items answered after 100 ms, 25 at once.
const POOL: u32 = 25;
const POOL_ITEMS: usize = 500;
const POOL_LATENCY_MS: u64 = 100;
/// The cost part: no-op items, with and without a key of concurrency 25.
const COST_ITEMS: usize = 3_000;
/// The held part: items waiting on a key with a rate of one a day, a few and
/// ten times as many (a claim must read as much for both).
const HELD_FEW: usize = 1_000;
const HELD_ITEMS: usize = 10_000;
/// A batch with one item held at its head (by a key of one start a day, spent
/// by the item before it) while the others go: a claim must read as much at
/// the end as near the start.
const HEAD_ITEMS: usize = 20_000;
/// Claims per tick in that part, so that a tick's rows read are a few claims'.
const HEAD_TICK_CAP: usize = 100;
/// Where it is measured: the first tick with at least these many completed.
const HEAD_MARKS: [u64; 2] = [1_000, 19_000];

#[derive(Debug, Serialize)]
pub struct LimitsBench {
    pub rate: u64,
    pub burst: u64,
    pub rate_items: usize,
    /// Seconds from the first start to the last.
    pub rate_seconds: f64,
    /// Starts ÷ (burst + rate × seconds).
    pub achieved_over_allowed: f64,
    pub concurrency: u32,
    /// The most of the pool's requests the sink had at once.
    pub most_in_flight: u32,
    /// The same no-op run without keys and with one key of concurrency 25.
    pub without_keys: RunReport,
    pub with_key: RunReport,
    pub held_items: usize,
    /// `d1_rows_read` of a tick before the items existed, and of a tick while
    /// they all wait on the exhausted key (and while `HELD_FEW` do).
    pub idle_tick_rows_read: Option<u64>,
    pub held_tick_rows_read: Option<u64>,
    /// Rows read per item claimed by a tick of [`HEAD_TICK_CAP`] claims, with one
    /// item held at the head of a [`HEAD_ITEMS`]-item batch: (items completed
    /// before the tick, rows read per item) at each of [`HEAD_MARKS`].
    pub head_rows_read: Vec<(u64, f64)>,
    pub held_few_tick_rows_read: Option<u64>,
    /// `Fanout-D1-Rows-Read` of `GET /batches/{id}/items?status=pending&limit=100`
    /// (each item's `waiting_on`) while the `HELD_ITEMS` wait, and of `GET
    /// /batches/{id}` (its `waiting_on` counts and `waiting_keys`).
    pub waiting_page_rows_read: Option<u64>,
    pub waiting_counts_rows_read: Option<u64>,
}

impl LimitsBench {
    pub fn table(&self, t: &mut Table) {
        t.section("Flow control (loadtest bench --only-limits)");
        t.row(&[format!(
            "rate {}/s burst {}: {} starts in {:.2} s, {:.1} % of what the limit allows",
            self.rate,
            self.burst,
            self.rate_items,
            self.rate_seconds,
            self.achieved_over_allowed * 100.0
        )]);
        t.row(&[format!(
            "concurrency {}: at most {} in flight at the sink",
            self.concurrency, self.most_in_flight
        )]);
        for (what, r) in [
            ("no keys", &self.without_keys),
            ("a key of concurrency 25 on every item", &self.with_key),
        ] {
            t.row(&[format!(
                "{} no-op items, {what}: {} items/s, {} rows written, {} statements and {} rows read per item",
                r.items,
                num(r.items_per_second, 1),
                num(r.d1.rows_written_per_item, 3),
                num(r.d1.statements_per_item, 3),
                num(r.d1.rows_read_per_item, 1),
            )]);
        }
        let n = |v: Option<u64>| v.map_or("?".into(), |n| n.to_string());
        t.row(&[format!(
            "rows read by a tick: {} idle, {} with {HELD_FEW} items waiting on an exhausted key, {} with {}",
            n(self.idle_tick_rows_read),
            n(self.held_few_tick_rows_read),
            n(self.held_tick_rows_read),
            self.held_items
        )]);
        t.row(&[format!(
            "what holds them (waiting_on): {} rows read for a page of 100 pending items, {} for the batch's counts and keys (GET /batches/{{id}})",
            n(self.waiting_page_rows_read),
            n(self.waiting_counts_rows_read),
        )]);
        if let [(c1, r1), (c2, r2)] = self.head_rows_read[..] {
            t.row(&[format!(
                "one item held at the head of {HEAD_ITEMS}: {} rows read per item claimed with {c1} completed, {} with {c2} ({}x)",
                num(Some(r1), 1),
                num(Some(r2), 1),
                num(Some(r2 / r1), 2)
            )]);
        }
    }
}

pub async fn measure(args: &TargetArgs, timeout: Duration) -> Result<LimitsBench> {
    eprintln!("== limits: a rate of {RATE}/s (burst {BURST}) over {RATE_ITEMS} no-op items");
    let (rate_seconds, achieved_over_allowed) = rate_part(args, timeout).await?;
    eprintln!("== limits: concurrency {POOL} over {POOL_ITEMS} webhooks of {POOL_LATENCY_MS} ms");
    let most_in_flight = pool_part(args, timeout).await?;
    eprintln!("== limits: {COST_ITEMS} no-op items without keys, then with one key each");
    let spec = Spec {
        scenario: Scenario::Happy,
        items: COST_ITEMS,
        job: Job::Noop,
        latency_ms: 0,
        error_rate: 0.0,
        poison_share: 0.0,
        key_concurrency: None,
    };
    let without_keys = run::on_fresh_target(args, "bench-limits-nokey", &spec, timeout).await?;
    let keyed = Spec {
        key_concurrency: Some(POOL),
        ..spec
    };
    let with_key = run::on_fresh_target(args, "bench-limits-key", &keyed, timeout).await?;
    eprintln!("== limits: a tick's rows read while {HELD_FEW}, then {HELD_ITEMS} items wait on an exhausted key");
    let held_few = held_part(args, HELD_FEW).await?;
    let held = held_part(args, HELD_ITEMS).await?;
    eprintln!("== limits: one item held at the head of {HEAD_ITEMS} while the others go");
    let head_rows_read = head_part(args).await?;
    Ok(LimitsBench {
        rate: RATE,
        burst: BURST,
        rate_items: RATE_ITEMS,
        rate_seconds,
        achieved_over_allowed,
        concurrency: POOL,
        most_in_flight,
        without_keys,
        with_key,
        held_items: HELD_ITEMS,
        idle_tick_rows_read: held.idle,
        held_tick_rows_read: held.held,
        held_few_tick_rows_read: held_few.held,
        head_rows_read,
        waiting_page_rows_read: held.waiting_page,
        waiting_counts_rows_read: held.waiting_counts,
    })
}

/// A Worker whose ticks can start far more than the limits (or a receiver)
/// allow: no child cap or budget binds before them, so that what is measured is
/// the limit; `more` settings after these.
pub async fn open(args: &TargetArgs, name: &str, more: &[(&str, &str)]) -> Result<Target> {
    let settings = [
        // The sink listens on 127.0.0.1.
        ("ALLOW_PRIVATE_TARGETS", "true"),
        ("SUBREQUEST_BUDGET", "10000"),
        ("MAX_CHILD_INVOCATIONS", "10000"),
        // Ticks long enough to drain a run (the gaps between ticks are not the
        // limit's), and no claim stopped early for a long job timeout.
        ("INVOCATION_DEADLINE_MS", "60000"),
        ("JOB_TIMEOUT_MS", "5000"),
    ];
    let settings = [&settings[..], more].concat();
    Target::open(args, name, &settings, Secrets::Random, true).await
}

/// A batch of `n` items of `kind` holding `key`; `url` for webhooks.
async fn batch(api: &Api, name: &str, n: usize, key: &str, url: Option<&str>) -> Result<Id> {
    let items: Vec<Value> = (0..n)
        .map(|i| match url {
            Some(url) => json!({"subject_id": format!("{name}-{i:05}"), "kind": "webhook",
                                "limits": [key], "payload": {"url": url, "data": {}}}),
            None => json!({"subject_id": format!("{name}-{i:05}"), "kind": "noop",
                           "limits": [key], "payload": {}}),
        })
        .collect();
    let (created, b) = api
        .create_batch(&json!({"key": name, "items": items}))
        .await?;
    ensure!(created, "batch {name} existed");
    Ok(b.id)
}

/// Ticks back to back, two at a time, until the batch finishes.
async fn drain(api: &Api, id: &Id, timeout: Duration) -> Result<()> {
    let b = api.batch(id).await?;
    let pace = Pace {
        every: Duration::from_millis(200),
        max_in_flight: 2,
        timeout,
    };
    let driven = drive::until_finished(api, &b, pace, JoinSet::new()).await?;
    ensure!(
        driven.batch.completed == driven.batch.total,
        "{}",
        driven.batch.progress()
    );
    Ok(())
}

async fn rate_part(args: &TargetArgs, timeout: Duration) -> Result<(f64, f64)> {
    let mut target = open(args, "bench-limits-rate", &[]).await?;
    let api = target.api.clone();
    put_limit(&api, "bench-rate", json!({"rate": RATE, "burst": BURST})).await?;
    let id = batch(&api, "bench-rate", RATE_ITEMS, "bench-rate", None).await?;
    drain(&api, &id, timeout).await?;
    let mut starts = Vec::new();
    for item in api.all_items(&id, None).await? {
        let at = item
            .started_at
            .context("a completed item has no started_at")?;
        starts.push(chrono::DateTime::parse_from_rfc3339(&at)?.timestamp_millis());
    }
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    let (first, last) = (
        starts.iter().min().copied().unwrap_or(0),
        starts.iter().max().copied().unwrap_or(0),
    );
    let seconds = (last - first) as f64 / 1000.0;
    let allowed = BURST as f64 + RATE as f64 * seconds;
    Ok((seconds, starts.len() as f64 / allowed))
}

async fn pool_part(args: &TargetArgs, timeout: Duration) -> Result<u32> {
    let mut target = open(args, "bench-limits-pool", &[]).await?;
    let api = target.api.clone();
    put_limit(&api, "bench-pool", json!({"concurrency": POOL})).await?;
    let faults = Faults {
        latency_ms: POOL_LATENCY_MS,
        group: Some("pool".into()),
        ..Faults::default()
    };
    let url = target.sink.hook_url("pool", &faults);
    let id = batch(&api, "bench-pool", POOL_ITEMS, "bench-pool", Some(&url)).await?;
    drain(&api, &id, timeout).await?;
    let peaks = target.sink.stats(false).await?.peak_in_flight_by_group;
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(peaks.get("pool").copied().unwrap_or(0))
}

async fn head_part(args: &TargetArgs) -> Result<Vec<(u64, f64)>> {
    let cap = HEAD_TICK_CAP.to_string();
    let mut target = open(
        args,
        "bench-limits-head",
        &[("MAX_CHILD_INVOCATIONS", &cap)],
    )
    .await?;
    let api = target.api.clone();
    put_limit(
        &api,
        "bench-head",
        json!({"rate": 1, "per_seconds": 86_400, "burst": 1}),
    )
    .await?;
    // The first two hold the key: the first takes the day's start, the second
    // waits at the head of the batch for the whole run.
    let subjects: Vec<Value> = (0..HEAD_ITEMS)
        .map(|i| {
            let limits = if i < 2 {
                json!(["bench-head"])
            } else {
                json!([])
            };
            json!({"id": format!("head-{i:05}"), "kind": "noop", "payload": {},
                   "active": true, "limits": limits})
        })
        .collect();
    for chunk in subjects.chunks(5_000) {
        api.put_subjects(chunk).await?;
    }
    api.delete_schedule("daily").await?;
    crate::driver::steps::one_off_now(&api, "bench-head").await?;
    let (mut completed, mut marks, mut found) = (0_u64, HEAD_MARKS.iter().peekable(), Vec::new());
    for _ in 0..(HEAD_ITEMS / HEAD_TICK_CAP + 50) {
        let Some(&&mark) = marks.peek() else { break };
        let tick = crate::bench::control::tick_summary(&target).await?;
        let claimed = tick["claimed"].as_u64().unwrap_or(0);
        if completed >= mark && claimed > 0 {
            let rows = tick["d1_rows_read"].as_u64().context("no d1_rows_read")?;
            found.push((completed, rows as f64 / claimed as f64));
            marks.next();
        }
        completed += tick["completed"].as_u64().unwrap_or(0);
    }
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    ensure!(
        found.len() == HEAD_MARKS.len(),
        "measured at {found:?} only"
    );
    Ok(found)
}

/// The rows an admin `GET path` read (`Fanout-D1-Rows-Read`); it must answer 2xx.
async fn rows_read(api: &Api, path: &str) -> Result<Option<u64>> {
    let r = api.admin_raw(reqwest::Method::GET, path, None).await?;
    ensure!(r.status.is_success(), "GET {path}: {}", r.status);
    Ok(r.header("Fanout-D1-Rows-Read").and_then(|v| v.parse().ok()))
}

/// Rows read while items wait on an exhausted key: by an idle tick before they
/// existed, a tick that finds them all held, and the reads of why they wait.
struct Held {
    idle: Option<u64>,
    held: Option<u64>,
    waiting_page: Option<u64>,
    waiting_counts: Option<u64>,
}

async fn held_part(args: &TargetArgs, items: usize) -> Result<Held> {
    let mut target = open(args, "bench-limits-held", &[]).await?;
    let api = target.api.clone();
    // One start a day: the firing tick takes one item, then the key is exhausted.
    put_limit(
        &api,
        "bench-held",
        json!({"rate": 1, "per_seconds": 86_400, "burst": 1}),
    )
    .await?;
    let subjects: Vec<Value> = (0..items)
        .map(|i| {
            json!({"id": format!("held-{i:05}"), "kind": "noop", "payload": {},
                        "active": true, "limits": ["bench-held"]})
        })
        .collect();
    api.put_subjects(&subjects).await?;
    // Only this part's one-off fires.
    api.delete_schedule("daily").await?;
    let idle = tick_rows_read(&target, Some(0)).await?.0;
    crate::driver::steps::one_off_now(&api, "bench-held").await?;
    tick_rows_read(&target, Some(1)).await?;
    // The tick after the firing one may still fill the batch: the one after it
    // only claims (and finds every item held).
    let after_fire = tick_rows_read(&target, Some(0)).await?.0;
    let held = tick_rows_read(&target, Some(0)).await?.0;
    eprintln!("rows read by the ticks after the firing one: {after_fire:?}, then {held:?}");
    // What holds them, read as the dashboard reads it (the only batch).
    let batch = api.batches(1).await?.pop().context("no batch")?.id;
    let page = format!("/batches/{batch}/items?status=pending&limit=100");
    let waiting_page = rows_read(&api, &page).await?;
    let waiting_counts = rows_read(&api, &format!("/batches/{batch}")).await?;
    eprintln!("rows read by waiting_on: {waiting_page:?} (a page of 100), {waiting_counts:?} (the counts)");
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(Held {
        idle,
        held,
        waiting_page,
        waiting_counts,
    })
}
