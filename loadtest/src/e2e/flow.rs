//! `loadtest e2e --only-flow` (and part of the full suite): flow control as the
//! receivers see it, on a Worker of its own (a child cap far above the limits,
//! then restarted with `MAX_CHILD_INVOCATIONS` 20 for the turns). Webhook items holding a rate-limited key (20 a second, burst 5), a key of
//! concurrency 3 and a partitioned key (`tenant:*`, concurrency 2) over three
//! tenants, each drained by ticks fired two at a time: the claim instants the
//! Worker records keep the rate exactly, the sink never has more of a key's
//! requests in flight than its limit, and the rate achieved is at least 90 % of
//! what the limit allows. Then turns and priorities: a 20-item batch created
//! while a 1,000-item batch drains ends within 2 ticks, and a priority 5 batch
//! created after a priority 0 one is claimed first.
//!
//! The sink counts requests in flight per `group` fault; a rate is checked on
//! the items' `started_at` (the claim's instant, the one the limit is charged
//! at) and, at the sink, with the dispatch's own spread between claim and
//! arrival as slack (an item claimed at t reaches the sink a little later).

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive;
use crate::driver::steps::{get_limit, put_limit};
use crate::driver::target::{Target, TargetArgs};
use crate::e2e::suite::open_worker;
use crate::runtime::api::{Api, Batch, Id, TICK_CRON};
use crate::runtime::wrangler::min_lease_seconds;
use crate::sink::faults::Faults;
use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;

/// This part's job timeout.
const JOB_TIMEOUT_MS: u64 = 5_000;

/// The child cap of the limits' checks: far above what the limits let start,
/// so that a tick drains on (waiting for its keys' room) until its deadline.
const LIMITS_CAP: u64 = 1_000;
/// The child cap of the turns' checks: small, so that one tick claims few items
/// and turns between batches show within a tick or two.
const CHILD_CAP: u64 = 20;

/// The rate limit: 20 starts a second after a burst of 5.
const RATE_KEY: &str = "e2e-flow-rate";
const RATE: u64 = 20;
const BURST: u64 = 5;
const RATE_ITEMS: usize = 200;
/// The least of the allowed rate the run must achieve.
const RATE_FLOOR: f64 = 0.9;

/// The concurrency limit, over items whose receiver takes a while.
const POOL_KEY: &str = "e2e-flow-pool";
const POOL: u32 = 3;
const POOL_ITEMS: usize = 90;
const SLOW_MS: u64 = 150;

/// The partitioned limit and its tenants.
const TENANTS_KEY: &str = "e2e-flow-tenant:*";
const PER_TENANT: u32 = 2;
const TENANTS: [&str; 3] = ["acme", "bolt", "cove"];
const TENANT_ITEMS: usize = 24;

/// Turns: a small batch created while a big one drains.
const BIG_ITEMS: usize = 1_000;
const SMALL_ITEMS: usize = 20;
const SMALL_WITHIN_TICKS: u64 = 2;

/// The guide's GitHub limit (docs/guides/flow-control.md, "Limits for common
/// receivers"), on items whose receiver takes half a second: once 10 are in
/// flight every claim comes back held, and a drain must wait for a slot (its own
/// commit) instead of claiming again at once until its budget is gone.
const GITHUB_KEY: &str = "e2e-flow-github";
const GITHUB_ITEMS: usize = 60;
const GITHUB_MS: u64 = 500;
const GITHUB_CONCURRENCY: u32 = 10;
const MOST_STATEMENTS_PER_ITEM: f64 = 2.0;

/// Priorities: a low batch, then a high one of one tick's worth.
const LOW_ITEMS: usize = 40;
const HIGH_PRIORITY: i64 = 5;

pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let mut f = Flow {
        target: open(args).await?,
        timeout,
        rate_items: Vec::new(),
        big: None,
    };
    let limits = vec![
        check!(needed
            format!("flow: {RATE_ITEMS} webhook items holding a key of {RATE} a second (burst {BURST}) all complete, drained by ticks"),
            rate_batch_completes
        ),
        check!(
            format!("flow: no interval of t seconds has more than {BURST} + {RATE} × t of them start (the claims' own instants)"),
            rate_is_kept_at_the_claims
        ),
        check!(
            format!("flow: the sink sees no more than {BURST} + {RATE} × t in any t seconds, give or take the dispatch's spread"),
            rate_is_kept_at_the_sink
        ),
        check!(
            format!("flow: the run starts at least {:.0} % of what the rate allows", RATE_FLOOR * 100.0),
            rate_is_nearly_reached
        ),
        check!(
            format!("flow: {POOL_ITEMS} items holding a key of concurrency {POOL} ({SLOW_MS} ms each) complete and the sink never has more than {POOL} of them at once"),
            concurrency_is_kept_at_the_sink
        ),
        check!(
            format!("flow: a partitioned limit ({TENANTS_KEY}, concurrency {PER_TENANT}) holds each of {} tenants to {PER_TENANT} at once, not all of them together", TENANTS.len()),
            partitions_are_limited_each
        ),
        check!(
            "flow: after the runs each limit has nothing in flight (every slot given back)",
            slots_are_given_back
        ),
    ];
    checks.run(&mut f, limits).await;
    let restarted = match f.target.runtime.as_mut() {
        Some(runtime) => {
            runtime.set_var("MAX_CHILD_INVOCATIONS", Some(&CHILD_CAP.to_string()));
            runtime.restart().await
        }
        None => Err(anyhow::anyhow!("no local runtime")),
    };
    if checks
        .step(
            &format!("flow: Worker restarts with MAX_CHILD_INVOCATIONS={CHILD_CAP}"),
            restarted,
        )
        .is_none()
    {
        return Ok(());
    }
    let turns = vec![
        check!(
            format!("flow: the guide's GitHub limit (5000 an hour, burst 100, concurrency {GITHUB_CONCURRENCY}) on {GITHUB_ITEMS} items of {GITHUB_MS} ms at the default SUBREQUEST_BUDGET: all complete, at most {MOST_STATEMENTS_PER_ITEM} D1 statements per item, no invocation stops on its budget"),
            github_limit_waits_for_a_slot
        ),
        check!(
            format!("flow: a {SMALL_ITEMS}-item batch created while a {BIG_ITEMS}-item batch drains ends within {SMALL_WITHIN_TICKS} ticks (MAX_CHILD_INVOCATIONS {CHILD_CAP}), the big one going on beside it"),
            small_batch_takes_turns_with_a_big_one
        ),
        check!(
            format!("flow: a priority {HIGH_PRIORITY} batch created after a priority 0 one is claimed first: one tick ends it and starts nothing of the other"),
            higher_priority_is_claimed_first
        ),
    ];
    checks.run(&mut f, turns).await;
    f.target.stop_checked("flow: ", checks).await;
    Ok(())
}

/// The part's Worker, for the limits' checks: the child cap far above them
/// (the turns restart it with [`CHILD_CAP`]).
async fn open(args: &TargetArgs) -> Result<Target> {
    // A job timeout of 5 s (the suite's is 1 s): the rates and in-flight counts
    // are the subject here, and a run timed out on a loaded machine would be a
    // retry, one more start of its key.
    let lease = min_lease_seconds(JOB_TIMEOUT_MS, 50, 25);
    open_worker(
        args,
        "e2e-flow",
        [
            ("MAX_CHILD_INVOCATIONS", LIMITS_CAP.to_string()),
            ("JOB_TIMEOUT_MS", JOB_TIMEOUT_MS.to_string()),
            ("LEASE_SECONDS", lease.to_string()),
            // One pair of ticks drains a limit's whole run (about 10 s): the
            // rate measured is the limit's, not the gaps between ticks.
            ("INVOCATION_DEADLINE_MS", "60000".to_string()),
        ],
        Vec::new(),
    )
    .await
    .context("starting the flow-control Worker")
}

/// What the checks share: the Worker and what a check left for the next.
struct Flow {
    target: Target,
    timeout: Duration,
    /// The rate batch's items: (item id, started_at in ms of its last attempt).
    rate_items: Vec<(i64, i64)>,
    /// The big batch of the turns check, cancelled at the end.
    big: Option<Id>,
}

/// `n` webhook items to the sink, each holding `limits`, in the sink's `group`.
fn items(f: &Flow, prefix: &str, n: usize, limits: &[&str], faults: &Faults) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let id = format!("{prefix}-{i:04}");
            json!({"subject_id": id, "kind": "webhook", "limits": limits,
                   "payload": {"url": f.target.sink.hook_url(&id, faults), "data": {}}})
        })
        .collect()
}

/// A batch `e2e-flow-<name>` of `n` healthy items holding no key (with `more`
/// fields).
async fn plain(f: &Flow, name: &str, n: usize, more: Value) -> Result<Batch> {
    let items = items(f, name, n, &[], &Faults::default());
    create(&f.target.api, &format!("e2e-flow-{name}"), items, more).await
}

/// Creates a batch of `items` (with `more` fields) and returns it.
async fn create(api: &Api, key: &str, items: Vec<Value>, more: Value) -> Result<Batch> {
    let mut body = json!({"key": key, "items": items});
    if let (Some(body), Some(more)) = (body.as_object_mut(), more.as_object()) {
        body.extend(more.clone());
    }
    let (created, batch) = api.create_batch(&body).await?;
    ensure!(created, "batch {key} existed");
    Ok(batch)
}

fn millis(at: &str) -> Result<i64> {
    Ok(chrono::DateTime::parse_from_rfc3339(at)
        .with_context(|| format!("not RFC 3339: {at}"))?
        .timestamp_millis())
}

/// The most `starts` (sorted, ms) exceed `burst + rate × t` by in any window of
/// `t` seconds widened by `slack_ms`; ≤ 0 when the bound holds. Every window
/// from one start to a later one is looked at (the tightest ones begin and end
/// at a start).
fn worst_excess(starts: &[i64], burst: u64, rate: u64, slack_ms: i64) -> f64 {
    let mut worst = f64::MIN;
    for i in 0..starts.len() {
        for j in i..starts.len() {
            let n = (j - i + 1) as f64;
            let t = (starts[j] - starts[i] + slack_ms) as f64 / 1000.0;
            worst = worst.max(n - (burst as f64 + rate as f64 * t));
        }
    }
    worst
}

async fn rate_batch_completes(f: &mut Flow) -> Result<()> {
    let api = &f.target.api;
    put_limit(api, RATE_KEY, json!({"rate": RATE, "burst": BURST})).await?;
    let faults = Faults {
        group: Some("rate".into()),
        ..Faults::default()
    };
    let items = items(f, "rate", RATE_ITEMS, &[RATE_KEY], &faults);
    let batch = create(api, "e2e-flow-rate", items, json!({})).await?;
    let done = drive::in_pairs(api, &batch.id, f.timeout, "e2e-flow-rate").await?;
    ensure!(
        done.completed == RATE_ITEMS as u64,
        "finished with {}",
        done.progress()
    );
    let mut starts = Vec::new();
    let items = api.all_items(&batch.id, None).await?;
    let retried = items.iter().filter(|i| i.attempt > 1).count();
    if retried > 0 {
        // Each attempt is a start of the key; only an item's last one is listed.
        println!("#   flow: {retried} items ran more than once; their last start is checked");
    }
    for item in items {
        let at = item
            .started_at
            .context("a completed item has no started_at")?;
        starts.push((item.id, millis(&at)?));
    }
    starts.sort_by_key(|(_, at)| *at);
    f.rate_items = starts;
    Ok(())
}

async fn rate_is_kept_at_the_claims(f: &mut Flow) -> Result<()> {
    let starts: Vec<i64> = f.rate_items.iter().map(|(_, at)| *at).collect();
    ensure!(starts.len() == RATE_ITEMS, "{} starts", starts.len());
    let excess = worst_excess(&starts, BURST, RATE, 0);
    println!("#   flow: the claims' worst window is {excess:+.2} items over {BURST} + {RATE} × t");
    ensure!(
        excess <= 0.0,
        "a window started {excess:.2} items more than allowed"
    );
    Ok(())
}

async fn rate_is_kept_at_the_sink(f: &mut Flow) -> Result<()> {
    let deliveries = f.target.sink.deliveries().await?;
    let started: HashMap<i64, i64> = f.rate_items.iter().copied().collect();
    // Each item's last arrival, the one its started_at is the claim of.
    let mut last: HashMap<i64, i64> = HashMap::new();
    for d in deliveries
        .iter()
        .filter(|d| d.subject_id.starts_with("rate-"))
    {
        let at = millis(&d.received_at)?;
        let id = d.item_id.context("a delivery without an item id")?;
        let seen = last.entry(id).or_insert(at);
        *seen = (*seen).max(at);
    }
    ensure!(
        last.len() == RATE_ITEMS,
        "the sink received {} of {RATE_ITEMS} items",
        last.len()
    );
    let mut arrivals = Vec::new();
    let mut lags = Vec::new();
    for (id, at) in last {
        arrivals.push(at);
        lags.push(at - started.get(&id).context("a delivery of no rate item")?);
    }
    arrivals.sort_unstable();
    // Arrivals in [a, b] were claimed in [a - most lag, b - least lag].
    let spread = lags.iter().max().unwrap_or(&0) - lags.iter().min().unwrap_or(&0);
    let raw = worst_excess(&arrivals, BURST, RATE, 0);
    let excess = worst_excess(&arrivals, BURST, RATE, spread);
    println!(
        "#   flow: claim-to-sink lag spread {spread} ms; the sink's worst window is {raw:+.2} items over {BURST} + {RATE} × t, {excess:+.2} with the spread"
    );
    ensure!(
        excess <= 0.0,
        "a window saw {excess:.2} items more than allowed"
    );
    Ok(())
}

async fn rate_is_nearly_reached(f: &mut Flow) -> Result<()> {
    let (first, last) = match (f.rate_items.first(), f.rate_items.last()) {
        (Some((_, first)), Some((_, last))) => (*first, *last),
        _ => bail!("no starts"),
    };
    let seconds = (last - first) as f64 / 1000.0;
    let allowed = BURST as f64 + RATE as f64 * seconds;
    let achieved = f.rate_items.len() as f64 / allowed;
    println!(
        "#   flow: {} starts in {seconds:.2} s, {:.1} % of the {allowed:.0} allowed",
        f.rate_items.len(),
        achieved * 100.0
    );
    ensure!(
        achieved >= RATE_FLOOR,
        "{:.1} % of the allowed rate",
        achieved * 100.0
    );
    Ok(())
}

/// Drains a batch of `items` by ticks in pairs; all must complete.
async fn drain_slow(f: &Flow, key: &str, items: Vec<Value>) -> Result<()> {
    let api = &f.target.api;
    let n = items.len() as u64;
    let batch = create(api, key, items, json!({})).await?;
    let done = drive::in_pairs(api, &batch.id, f.timeout, key).await?;
    ensure!(done.completed == n, "finished with {}", done.progress());
    Ok(())
}

async fn concurrency_is_kept_at_the_sink(f: &mut Flow) -> Result<()> {
    put_limit(&f.target.api, POOL_KEY, json!({"concurrency": POOL})).await?;
    let faults = Faults {
        latency_ms: SLOW_MS,
        group: Some("pool".into()),
        ..Faults::default()
    };
    let items = items(f, "pool", POOL_ITEMS, &[POOL_KEY], &faults);
    drain_slow(f, "e2e-flow-pool", items).await?;
    let peaks = f.target.sink.stats(false).await?.peak_in_flight_by_group;
    let peak = peaks.get("pool").copied().unwrap_or(0);
    println!("#   flow: the sink had at most {peak} of the pool's requests at once");
    ensure!(peak <= POOL, "{peak} at once");
    // Less would mean the check saw no concurrency at all.
    ensure!(
        peak >= 2,
        "never more than {peak} at once: nothing ran side by side"
    );
    Ok(())
}

async fn github_limit_waits_for_a_slot(f: &mut Flow) -> Result<()> {
    let api = &f.target.api;
    put_limit(
        api,
        GITHUB_KEY,
        json!({"rate": 5000, "per_seconds": 3600, "burst": 100, "concurrency": GITHUB_CONCURRENCY}),
    )
    .await?;
    let faults = Faults {
        latency_ms: GITHUB_MS,
        group: Some("github".into()),
        ..Faults::default()
    };
    let items = items(f, "github", GITHUB_ITEMS, &[GITHUB_KEY], &faults);
    let known = api.invocation_ids().await?;
    drain_slow(f, "e2e-flow-github", items).await?;
    let runs = api.invocations_since(&known).await?;
    let statements: i64 = runs.iter().map(|i| i.summary.d1_statements).sum();
    let per_item = statements as f64 / GITHUB_ITEMS as f64;
    let stops: Vec<&str> = runs
        .iter()
        .map(|i| i.summary.stop_reason.as_str())
        .collect();
    let peak = f
        .target
        .sink
        .stats(false)
        .await?
        .peak_in_flight_by_group
        .get("github")
        .copied()
        .unwrap_or(0);
    println!(
        "#   flow: GitHub limit: {statements} D1 statements over {} invocations ({per_item:.2} per item), stops {stops:?}, at most {peak} in flight",
        runs.len()
    );
    ensure!(
        !stops.contains(&"budget"),
        "an invocation stopped on its budget: {stops:?}"
    );
    ensure!(
        per_item <= MOST_STATEMENTS_PER_ITEM,
        "{per_item:.2} statements per item"
    );
    ensure!(peak <= GITHUB_CONCURRENCY, "{peak} at once");
    Ok(())
}

async fn partitions_are_limited_each(f: &mut Flow) -> Result<()> {
    put_limit(
        &f.target.api,
        TENANTS_KEY,
        json!({"concurrency": PER_TENANT}),
    )
    .await?;
    let mut all = Vec::new();
    for tenant in TENANTS {
        let faults = Faults {
            latency_ms: SLOW_MS,
            group: Some(format!("tenant-{tenant},tenants")),
            ..Faults::default()
        };
        let key = format!("e2e-flow-tenant:{tenant}");
        all.extend(items(
            f,
            &format!("t{tenant}"),
            TENANT_ITEMS,
            &[&key],
            &faults,
        ));
    }
    drain_slow(f, "e2e-flow-tenants", all).await?;
    let peaks = f.target.sink.stats(false).await?.peak_in_flight_by_group;
    let each: Vec<u32> = TENANTS
        .iter()
        .map(|t| peaks.get(&format!("tenant-{t}")).copied().unwrap_or(0))
        .collect();
    let together = peaks.get("tenants").copied().unwrap_or(0);
    println!("#   flow: tenants' peaks in flight {each:?}, all of them together {together}");
    ensure!(
        each.iter().all(|&p| p <= PER_TENANT),
        "a tenant had more than {PER_TENANT} at once: {each:?}"
    );
    ensure!(
        together > PER_TENANT,
        "all tenants together never had more than {together} at once: one limit for all?"
    );
    Ok(())
}

async fn slots_are_given_back(f: &mut Flow) -> Result<()> {
    for key in [RATE_KEY, POOL_KEY, TENANTS_KEY] {
        let limit = get_limit(&f.target.api, key).await?;
        ensure!(
            limit["in_flight"] == 0 && limit["waiting"] == 0,
            "{key}: {limit}"
        );
    }
    Ok(())
}

async fn small_batch_takes_turns_with_a_big_one(f: &mut Flow) -> Result<()> {
    let api = &f.target.api;
    let big = plain(f, "big", BIG_ITEMS, json!({})).await?;
    f.big = Some(big.id.clone());
    api.fire_cron(TICK_CRON).await?;
    let draining = api.batch(&big.id).await?;
    ensure!(
        draining.completed > 0 && !draining.has_ended(),
        "the big batch is not draining: {}",
        draining.progress()
    );
    let small = plain(f, "small", SMALL_ITEMS, json!({})).await?;
    let mut ticks = 0;
    while !api.batch(&small.id).await?.is_finished() {
        ensure!(
            ticks < SMALL_WITHIN_TICKS,
            "the small batch is not finished after {ticks} ticks: {}",
            api.batch(&small.id).await?.progress()
        );
        api.fire_cron(TICK_CRON).await?;
        ticks += 1;
    }
    let after = api.batch(&big.id).await?;
    println!(
        "#   flow: the small batch ended in {ticks} ticks; the big one went from {} to {} done",
        draining.completed, after.completed
    );
    ensure!(
        after.completed > draining.completed,
        "the big batch stood still while the small one ran"
    );
    Ok(())
}

async fn higher_priority_is_claimed_first(f: &mut Flow) -> Result<()> {
    let api = &f.target.api;
    let low = plain(f, "low", LOW_ITEMS, json!({})).await?;
    let high = plain(
        f,
        "high",
        CHILD_CAP as usize,
        json!({"priority": HIGH_PRIORITY}),
    )
    .await?;
    ensure!(
        high.priority == HIGH_PRIORITY && low.priority == 0,
        "priorities {} and {}",
        high.priority,
        low.priority
    );
    let big_pending = match &f.big {
        Some(big) => api.batch(big).await?.pending,
        None => 0,
    };
    api.fire_cron(TICK_CRON).await?;
    let (high, low) = (api.batch(&high.id).await?, api.batch(&low.id).await?);
    ensure!(high.is_finished(), "the high batch: {}", high.progress());
    ensure!(
        low.pending == LOW_ITEMS as u64,
        "the low batch started items: {}",
        low.progress()
    );
    // The big batch (priority 0 too) waits as well; cancelled, it ends the part.
    if let Some(big) = f.big.take() {
        let pending_after = api.batch(&big).await?.pending;
        ensure!(
            pending_after == big_pending,
            "the big batch started {} items",
            big_pending - pending_after
        );
        api.control(&big, "cancel").await?;
    }
    api.control(&low.id, "cancel").await?;
    Ok(())
}
