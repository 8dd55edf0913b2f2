//! The bench folder: `loadtest bench` (this module), its report (`report`) and parts, and
//! `loadtest schedules` (`schedules`): timings on fresh runtimes, with verdicts.
//! It uses the shared folders (`sink`, `runtime`, `driver`, `run`).
//!
//! `loadtest bench`: throughput of fan-out vs inline dispatch against the raw
//! SELF round-trip ceiling, a latency-bound run against its ideal makespan (with
//! no connection cap, then with the sink emulating the platform's 6 connections
//! per invocation, with 1 and with N drainers), and the cost of batch
//! initialisation and progress reads at 100k (and, opt-in, 1M) items. Every part
//! runs on a fresh state dir and stops its runtime.

pub mod against;
pub mod backpressure;
pub mod control;
pub mod cost;
pub mod limits;
pub mod report;
pub mod schedules;

use crate::bench::report::{
    latency_table, BenchReport, FanoutRound, InitTiming, LatencyBound, Ratios, RowsRead,
};
use crate::driver::drive;
use crate::driver::plan;
use crate::driver::target::TargetArgs;
use crate::run;
use crate::run::metrics::{self, ratio};
use crate::run::scenario::{Job, Scenario, Spec};
use crate::run::service;
use crate::run::table::{num, Table};
use crate::runtime::api::{Api, Probe, RawResponse, SubjectIn, MAX_PAGE, TICK_CRON};
use crate::sink::faults::Faults;
use crate::sink::PLATFORM_CONNECTIONS;
use anyhow::{bail, ensure, Context, Result};
use reqwest::Method;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The Worker's header with the D1 rows an admin request read.
const ROWS_READ_HEADER: &str = "Fanout-D1-Rows-Read";

/// SELF calls made before the fan-out run, so JIT warm-up does not count against it.
const WARM_UP_CALLS: u64 = 2_000;
/// No-op items of the warm-up fan-out batch drained before (a) is measured.
const WARM_UP_ITEMS: usize = 2_000;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// No-op items for the fan-out vs inline comparison (also the probe's calls).
    #[arg(short = 'n', long = "items", default_value_t = 5000)]
    pub items: usize,
    /// Rounds of (a) between probes of (c), each on a fresh runtime; the ratio
    /// reported is their median (one round is at the mercy of a noisy host).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=20))]
    pub rounds: u64,
    /// Items of the latency-bound run.
    #[arg(long, default_value_t = 1000)]
    pub latency_items: usize,
    /// Sink latency of the latency-bound run.
    #[arg(long, default_value_t = 500)]
    pub latency_ms: u64,
    /// Subjects seeded for the init timing.
    #[arg(long, default_value_t = 100_000)]
    pub init_subjects: usize,
    /// Also seed 1,000,000 subjects and time a batch over them (takes minutes).
    #[arg(long)]
    pub million: bool,
    /// `GET /batches/{id}` calls whose median is reported.
    #[arg(long, default_value_t = 20)]
    pub get_samples: usize,
    /// Bound on each run's batch, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// Print the results as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Items of the batch whose failed items are listed (rows read per call).
    #[arg(long, default_value_t = 20_000)]
    pub rows_read_items: usize,
    /// How many of them fail (a webhook answering 400, failed on attempt 1).
    #[arg(long, default_value_t = 20)]
    pub rows_read_failed: usize,
    /// Run only the rows-read part (a minute, not the whole bench).
    #[arg(long)]
    pub only_rows_read: bool,
    /// Run only the cost part: a batch of `--cost-items` no-op items, its
    /// `cost` per item and per million items at the published prices (a
    /// minute or two).
    #[arg(long)]
    pub only_cost: bool,
    /// Items of the `--only-cost` batch.
    #[arg(long, default_value_t = 3_000)]
    pub cost_items: usize,
    /// Items of the batches paused, cancelled and replayed (batch control).
    #[arg(long, default_value_t = 100_000)]
    pub control_items: usize,
    /// Run only the batch-control part (a few minutes, not the whole bench).
    #[arg(long)]
    pub only_control: bool,
    /// Run only the latency-bound runs: uncapped, then capped with 1 and with
    /// `--capped-drainers` drainers (a few minutes, not the whole bench).
    #[arg(long)]
    pub only_latency: bool,
    /// Run only the flow-control part: a rate and a concurrency limit as
    /// achieved, rows and statements per item with a key on every item, rows
    /// read by a tick while items wait on an exhausted key (a few minutes).
    #[arg(long)]
    pub only_limits: bool,
    /// Run only the backpressure part: webhooks against receivers that take 5,
    /// 50 and 500 a second and answer 429 + Retry-After above: calls per item
    /// and makespan ÷ the ideal; then a batch against each fake of a real
    /// receiver (GitHub, Discord also as multi channels, Telegram, Shopify,
    /// the RateLimit fields, an HTTP-date): calls per send, refusals,
    /// makespan ÷ what its limit allows (a few minutes).
    #[arg(long)]
    pub only_backpressure: bool,
    /// Run only the fan-out rounds between their SELF probes and print each
    /// round's ratio and their median (a few minutes, not the whole bench).
    #[arg(long)]
    pub only_fanout: bool,
    /// With `--only-fanout`: build this git revision in a worktree of its own
    /// (`target/against/`, its release Worker and its own harness, by its own
    /// scripts) and run its rounds interleaved with this checkout's; prints
    /// every round of both, both medians and their ratios. Run this checkout's
    /// harness release too (`cargo run --release -p loadtest`).
    #[arg(long, value_name = "GIT_REV", requires = "only_fanout")]
    pub against: Option<String>,
    /// Run only the two paths of a `service` item, timed against each other on
    /// cron-fanout beside the example handler (`POST /probe` mode `service`):
    /// straight from the drain, and through a SELF child; `--rounds` rounds of
    /// `--service-calls` calls each way.
    #[arg(long)]
    pub only_service_paths: bool,
    /// Calls each way per round of `--only-service-paths`.
    #[arg(long, default_value_t = 1000)]
    pub service_calls: u64,
    /// Requests in flight per `Fanout-Invocation` the sink allows in the capped
    /// latency-bound runs (the platform's simultaneous open connections).
    #[arg(long, default_value_t = PLATFORM_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..))]
    pub connection_cap: u32,
    /// Drainers of the second capped run (`DRAINERS`, on wrangler.drainers.toml).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=250))]
    pub capped_drainers: u64,
}

pub async fn run(args: BenchArgs) -> Result<bool> {
    if args.target.url.is_some() {
        bail!("bench starts its own runtimes on fresh state; --url is not supported");
    }
    let timeout = Duration::from_secs(args.timeout_secs);
    if args.only_control {
        eprintln!("== batch control");
        let c = control::measure(&args.target, args.control_items, timeout).await?;
        print_part(args.json, &c, |c, t| c.table(t))?;
        return Ok(true);
    }
    if args.only_limits {
        let l = crate::bench::limits::measure(&args.target, timeout).await?;
        print_part(args.json, &l, |l, t| l.table(t))?;
        return Ok(true);
    }
    if args.only_backpressure {
        let b = crate::bench::backpressure::measure(&args.target, timeout).await?;
        print_part(args.json, &b, |b, t| b.table(t))?;
        return Ok(true);
    }
    if args.only_cost {
        let c = cost::measure(&args.target, args.cost_items, timeout).await?;
        print_part(args.json, &c, |c, t| c.table(t))?;
        return Ok(c.passed());
    }
    if args.only_rows_read {
        eprintln!("== rows read by ?status=failed");
        let r = rows_read(&args, timeout).await?;
        print_part(args.json, &r, |r, t| {
            t.section("D1 rows read by GET /batches/{id}/items?status=failed");
            t.row(&r.row());
        })?;
        return Ok(true);
    }
    let noop = Spec {
        scenario: Scenario::Happy,
        items: args.items,
        job: Job::Noop,
        latency_ms: 0,
        error_rate: 0.0,
        poison_share: 0.0,
        key_concurrency: None,
    };
    let slow = Spec {
        scenario: Scenario::Latency,
        items: args.latency_items,
        job: Job::Webhook,
        latency_ms: args.latency_ms,
        ..noop.clone()
    };
    if args.only_latency {
        let runs = latency_runs(&args, &slow, timeout).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&runs)?);
        } else {
            let mut t = Table::default();
            latency_table(&mut t, &runs.iter().collect::<Vec<_>>());
            print!("{t}");
        }
        return Ok(runs.iter().all(|l| l.report.passed()));
    }
    if args.only_fanout {
        return only_fanout(&args, &noop, timeout).await;
    }
    if args.only_service_paths {
        return only_service_paths(&args).await;
    }

    let (fanout, wide_probe) = fanout_rounds(&args, &noop, timeout, true).await?;
    let wide_probe = wide_probe.context("the last round probes at concurrency 100")?;

    eprintln!("== (b) inline");
    let inline = run::on_fresh_target(
        &with_mode(&args.target, "inline"),
        "bench-inline",
        &noop,
        timeout,
    )
    .await?;

    let mut latency_capped = latency_runs(&args, &slow, timeout).await?;
    let latency = latency_capped.remove(0);

    eprintln!("== init and progress reads");
    let init = init_timings(&args, &noop).await?;

    eprintln!("== rows read by ?status=failed");
    let rows_read = rows_read(&args, timeout).await?;

    eprintln!("== batch control");
    let control = control::measure(&args.target, args.control_items, timeout).await?;

    let limits = crate::bench::limits::measure(&args.target, timeout).await?;

    let round_ratios: Vec<f64> = fanout.iter().filter_map(|r| r.fanout_over_probe).collect();
    let fanout_rates: Vec<f64> = fanout
        .iter()
        .filter_map(|r| r.report.items_per_second)
        .collect();
    let ratios = Ratios {
        fanout_over_probe: metrics::median(&round_ratios),
        fanout_over_probe_min: round_ratios.iter().copied().reduce(f64::min),
        fanout_over_probe_max: round_ratios.iter().copied().reduce(f64::max),
        fanout_over_inline: metrics::median(&fanout_rates)
            .zip(inline.items_per_second)
            .and_then(|(a, b)| ratio(a, b)),
    };
    let report = BenchReport {
        fanout,
        inline,
        wide_probe,
        ratios,
        latency,
        latency_capped,
        init,
        rows_read,
        control,
        limits,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(report.passed())
}

/// `--only-service-paths`: one runtime of cron-fanout and the example handler,
/// a warm-up of both paths, then the rounds, a line each, and their medians.
async fn only_service_paths(args: &BenchArgs) -> Result<bool> {
    let mut target = service::open(&args.target, "bench-service-paths").await?;
    let (binding, calls, concurrency) = (service::BINDING, args.service_calls, 25);
    eprintln!("warming up: {WARM_UP_CALLS} service calls each way ...");
    service::measure(&target.api, binding, WARM_UP_CALLS, concurrency, 1).await?;
    eprintln!(
        "{} rounds of {calls} calls each way, {concurrency} in flight ...",
        args.rounds
    );
    let paths = service::measure(&target.api, binding, calls, concurrency, args.rounds).await?;
    for (round, (d, s)) in paths.drain.iter().zip(&paths.via_self).enumerate() {
        println!(
            "round {}: straight from the drain {:.1} calls/s, through a SELF child {:.1} calls/s",
            round + 1,
            d.calls_per_second,
            s.calls_per_second
        );
    }
    println!("{}", paths.summary());
    let done = paths.all_done();
    if let Err(why) = &done {
        println!("FAIL: {why}");
    }
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(done.is_ok())
}

/// `--only-fanout`: the rounds of (a) between probes of (c), a line each, then
/// the median of their ratios.
async fn only_fanout(args: &BenchArgs, noop: &Spec, timeout: Duration) -> Result<bool> {
    if let Some(rev) = &args.against {
        return fanout_against(args, rev, noop, timeout).await;
    }
    let (rounds, _) = fanout_rounds(args, noop, timeout, false).await?;
    let mut ratios = Vec::new();
    let mut passed = true;
    for (r, round) in rounds.iter().zip(1..) {
        let d1 = &r.report.d1;
        println!(
            "round {round}: fan-out {} items/s, probes {} / {} calls/s, fan-out/raw {}, {} statements and {} rows written per item",
            num(r.report.items_per_second, 1),
            num(Some(r.probe_before.calls_per_second), 1),
            num(Some(r.probe_after.calls_per_second), 1),
            num(r.fanout_over_probe, 3),
            num(d1.statements_per_item, 3),
            num(d1.rows_written_per_item, 3),
        );
        ratios.extend(r.fanout_over_probe);
        passed &= r.report.passed();
    }
    let lo = ratios.iter().copied().reduce(f64::min);
    let hi = ratios.iter().copied().reduce(f64::max);
    println!(
        "median fan-out/raw {} ({} to {}) over {} rounds",
        num(metrics::median(&ratios), 3),
        num(lo, 3),
        num(hi, 3),
        ratios.len()
    );
    Ok(passed)
}

/// `--only-fanout --against <rev>`: the other revision built first, then a
/// round of this checkout's and one of the other's, `--rounds` times.
async fn fanout_against(
    args: &BenchArgs,
    rev: &str,
    noop: &Spec,
    timeout: Duration,
) -> Result<bool> {
    if cfg!(debug_assertions) {
        eprintln!("note: this harness is a debug build; the other's is release (cargo run --release -p loadtest)");
    }
    let repo = args.target.repo.canonicalize().context("--repo")?;
    let other = against::Other::build(&repo, rev)?;
    let fanout_args = with_mode(&args.target, "fanout");
    let mut both = against::Interleaved::default();
    let mut passed = true;
    for round in 1..=args.rounds {
        eprintln!("== round {round} of {}: this checkout", args.rounds);
        let (r, _) = fanout_round(&fanout_args, noop, round, false, timeout).await?;
        passed &= r.report.passed();
        both.this.push(against::RoundFigures::of(&r)?);
        eprintln!("== round {round} of {}: {rev}", args.rounds);
        both.other.push(other.round(noop.items, args.timeout_secs)?);
    }
    print!("{}", both.report(&other));
    Ok(passed)
}

/// `--rounds` rounds of (a) between probes of (c); with `wide`, the last one also
/// probes at concurrency 100.
async fn fanout_rounds(
    args: &BenchArgs,
    noop: &Spec,
    timeout: Duration,
    wide: bool,
) -> Result<(Vec<FanoutRound>, Option<Probe>)> {
    let fanout_args = with_mode(&args.target, "fanout");
    let mut rounds = Vec::new();
    let mut wide_probe = None;
    for round in 1..=args.rounds {
        eprintln!(
            "== (a) fanout + (c) probe, round {round} of {}",
            args.rounds
        );
        let last = wide && round == args.rounds;
        let (r, probe) = fanout_round(&fanout_args, noop, round, last, timeout).await?;
        rounds.push(r);
        wide_probe = probe.or(wide_probe);
    }
    Ok((rounds, wide_probe))
}

/// One round of (a) between two probes of (c) on a fresh runtime, both paths warmed
/// first (JIT tiers, statement caches): warming only the probe's path measured (a) on
/// a half-cold runtime and (c) on a warm one. The last round also probes at
/// concurrency 100.
async fn fanout_round(
    args: &TargetArgs,
    noop: &Spec,
    round: u64,
    last: bool,
    timeout: Duration,
) -> Result<(FanoutRound, Option<Probe>)> {
    let mut target = run::open_for(args, &format!("bench-fanout-{round}"), noop).await?;
    let concurrency = target.setting("DISPATCH_CONCURRENCY")?;
    eprintln!("warming up: {WARM_UP_CALLS} SELF calls, a {WARM_UP_ITEMS}-item fan-out batch ...");
    target.api.probe(WARM_UP_CALLS, concurrency).await?;
    warm_up_fanout(&target.api, timeout).await?;
    let calls = noop.items as u64;
    eprintln!("probing {calls} SELF calls at concurrency {concurrency} ...");
    let probe_before = target.api.probe(calls, concurrency).await?;
    let report = run::execute(noop, &mut target, timeout).await?;
    eprintln!("probing {calls} SELF calls at concurrency {concurrency} ...");
    let probe_after = target.api.probe(calls, concurrency).await?;
    let wide = if last {
        eprintln!("probing {calls} SELF calls at concurrency 100 ...");
        Some(target.api.probe(calls, 100).await?)
    } else {
        None
    };
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    let fanout_over_probe = report.items_per_second.and_then(|a| {
        ratio(
            a,
            (probe_before.calls_per_second + probe_after.calls_per_second) / 2.0,
        )
    });
    Ok((
        FanoutRound {
            report,
            probe_before,
            probe_after,
            fanout_over_probe,
        },
        wide,
    ))
}

/// The latency-bound run three times, each on a fresh runtime: no connection
/// cap (one drainer, the tick), then the sink's cap with 1 and with
/// `--capped-drainers` drainers.
async fn latency_runs(
    args: &BenchArgs,
    slow: &Spec,
    timeout: Duration,
) -> Result<Vec<LatencyBound>> {
    let mut runs = Vec::new();
    for (drainers, cap) in [
        (1, None),
        (1, Some(args.connection_cap)),
        (args.capped_drainers, Some(args.connection_cap)),
    ] {
        let cap_text = cap.map_or("no cap".to_string(), |c| format!("cap {c}"));
        eprintln!("== latency-bound, {drainers} drainer(s), {cap_text}");
        runs.push(latency_run(&args.target, slow, drainers, cap, timeout).await?);
    }
    Ok(runs)
}

/// One latency-bound run on a fresh runtime: `drainers` > 1 on
/// wrangler.drainers.toml (its local queue), the sink capped at `cap` requests in
/// flight per `Fanout-Invocation`.
async fn latency_run(
    args: &TargetArgs,
    slow: &Spec,
    drainers: u64,
    cap: Option<u32>,
    timeout: Duration,
) -> Result<LatencyBound> {
    let mut a = with_mode(args, "fanout");
    a.vars.retain(|(k, _)| k != "DRAINERS");
    a.vars.push(("DRAINERS".into(), drainers.to_string()));
    if drainers > 1 {
        a.wrangler_config = Some("wrangler.drainers.toml".into());
    }
    let name = format!(
        "bench-latency-{drainers}d-{}",
        cap.map_or("uncapped".to_string(), |c| format!("cap{c}"))
    );
    let mut target = run::open_for(&a, &name, slow).await?;
    target.sink.set_connection_cap(cap).await?;
    let report = run::execute(slow, &mut target, timeout).await;
    let stats = target.sink.stats(false).await;
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    let (report, stats) = (report?, stats?);
    let concurrency: u64 = report
        .settings
        .get("DISPATCH_CONCURRENCY")
        .context("DISPATCH_CONCURRENCY missing from the run's settings")?
        .parse()?;
    let ideal_ms = capped_ideal_ms(
        slow.items as u64,
        slow.latency_ms,
        concurrency,
        cap,
        drainers,
    );
    Ok(LatencyBound {
        makespan_over_ideal: report.makespan_ms.and_then(|m| ratio(m as f64, ideal_ms)),
        concurrency,
        ideal_ms,
        drainers,
        connection_cap: cap,
        peak_in_flight: stats.peak_in_flight,
        cap_waits: stats.cap_waits,
        report,
    })
}

/// The ideal makespan on the platform: each drainer keeps `concurrency` calls in
/// flight, of which at most `cap` reach the receiver at once (its connections),
/// and the drainers run side by side. (Locally the queue's consumer runs one
/// drainer at a time, so N drainers cannot reach it.)
pub fn capped_ideal_ms(
    items: u64,
    latency_ms: u64,
    concurrency: u64,
    cap: Option<u32>,
    drainers: u64,
) -> f64 {
    let per_drainer = cap.map_or(concurrency, |c| concurrency.min(u64::from(c)));
    ideal_makespan_ms(items, latency_ms, per_drainer * drainers.max(1))
}

/// `args` with DISPATCH_MODE forced to `mode` (it is what the part measures).
fn with_mode(args: &TargetArgs, mode: &str) -> TargetArgs {
    let mut a = args.clone();
    a.vars.retain(|(k, _)| k != "DISPATCH_MODE");
    a.vars.push(("DISPATCH_MODE".into(), mode.into()));
    a
}

/// Drain an ad-hoc batch of no-op items with tick crons until it is finished.
async fn warm_up_fanout(api: &Api, timeout: Duration) -> Result<()> {
    let items: Vec<Value> = (0..WARM_UP_ITEMS)
        .map(|i| json!({"subject_id": format!("warm-up-{i:05}"), "kind": "noop", "payload": {}}))
        .collect();
    let (_, batch) = api
        .create_batch(&json!({"key": "bench-warm-up", "items": items}))
        .await?;
    let started = Instant::now();
    loop {
        api.fire_cron(TICK_CRON).await?;
        let b = api.batch(&batch.id).await?;
        if b.completed + b.failed == b.total {
            return Ok(());
        }
        ensure!(
            started.elapsed() < timeout,
            "warm-up batch unfinished after {timeout:?}: {} of {} done",
            b.completed + b.failed,
            b.total
        );
    }
}

/// A perfect sliding window of `concurrency` calls of `latency_ms` each.
pub fn ideal_makespan_ms(items: u64, latency_ms: u64, concurrency: u64) -> f64 {
    items as f64 * latency_ms as f64 / concurrency.max(1) as f64
}

/// Seeds `--init-subjects` no-op subjects (then up to 1,000,000 with
/// `--million`) on one fresh runtime, timing the PUTs, one `POST /batches` over
/// all of them and `GET /batches/{id}` at each size. No tick fires, so nothing
/// drains while it is measured.
async fn init_timings(args: &BenchArgs, spec: &Spec) -> Result<Vec<InitTiming>> {
    let mut target = run::open_for(&args.target, "bench-init", spec).await?;
    let api = target.api.clone();
    let mut sizes = vec![args.init_subjects];
    if args.million && args.init_subjects < 1_000_000 {
        sizes.push(1_000_000);
    }
    let mut seeded = 0;
    let mut timings = Vec::new();
    for size in sizes {
        let added = size - seeded;
        let seed_ms = seed_noop(&api, seeded, size).await?;
        seeded = size;
        let started = Instant::now();
        let (_, batch) = api
            .create_batch(&json!({"key": format!("init-{size}"), "source": "subjects"}))
            .await?;
        let create_batch_ms = ms(started);
        ensure!(
            batch.total == size as u64,
            "batch over {size} subjects has {} items",
            batch.total
        );
        let mut samples = Vec::with_capacity(args.get_samples);
        for _ in 0..args.get_samples {
            let started = Instant::now();
            api.batch(&batch.id).await?;
            samples.push(ms(started));
        }
        timings.push(InitTiming {
            subjects: size as u64,
            seed_ms,
            seeded: added as u64,
            seed_per_second: metrics::per_second(added as u64, seed_ms as u64),
            create_batch_ms,
            get_batch_median_ms: metrics::median(&samples),
        });
    }
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(timings)
}

/// Upserts no-op subjects `init-<from>`..`init-<to - 1>`, one `MAX_PAGE` chunk
/// at a time (a million subjects are never all in memory); returns the time
/// spent in the PUTs in ms.
async fn seed_noop(api: &Api, from: usize, to: usize) -> Result<f64> {
    let mut spent = Duration::ZERO;
    let mut last_report = Instant::now();
    for start in (from..to).step_by(MAX_PAGE) {
        let chunk: Vec<_> = (start..to.min(start + MAX_PAGE))
            .map(|i| plan::noop_subject(format!("init-{i:07}")))
            .collect();
        let started = Instant::now();
        api.put_subjects(&chunk).await?;
        spent += started.elapsed();
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!("  seeded {} of {to}", start + chunk.len());
            last_report = Instant::now();
        }
    }
    Ok(spent.as_secs_f64() * 1000.0)
}

/// A batch of `--rows-read-items` items of which `--rows-read-failed` fail
/// permanently (a webhook answering 400), drained; then what listing its failed
/// items costs in D1 rows read, from the Worker's `Fanout-D1-Rows-Read` header.
async fn rows_read(args: &BenchArgs, timeout: Duration) -> Result<RowsRead> {
    let spec = Spec {
        scenario: Scenario::Happy,
        items: args.rows_read_items,
        job: Job::Noop,
        latency_ms: 0,
        error_rate: 0.0,
        poison_share: 0.0,
        key_concurrency: None,
    };
    let mut target = run::open_for(&args.target, "bench-rows-read", &spec).await?;
    let api = target.api.clone();
    let failing = Faults {
        status: Some(400),
        ..Faults::default()
    };
    let every = (args.rows_read_items / args.rows_read_failed.max(1)).max(1);
    let subjects: Vec<SubjectIn> = (0..args.rows_read_items)
        .map(|i| {
            let id = format!("rows-{i:07}");
            if i % every == every / 2 {
                SubjectIn {
                    payload: json!({"url": target.sink.hook_url(&id, &failing)}),
                    kind: "webhook".into(),
                    id,
                    active: true,
                    group: None,
                    timezone: None,
                }
            } else {
                plan::noop_subject(id)
            }
        })
        .collect();
    api.put_subjects(&subjects).await?;
    let (batch, driven) = drive::subjects_batch_finished(&api, "rows-read", timeout).await?;
    let listing = get_ok(
        &api,
        &format!("/batches/{}/items?status=failed&limit=1000", batch.id),
    )
    .await?;
    let listed = listing
        .json()
        .and_then(|v| v["items"].as_array().map(Vec::len))
        .context("no items in the listing")? as u64;
    let header = |r: &RawResponse| -> Result<u64> {
        r.header(ROWS_READ_HEADER)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no {ROWS_READ_HEADER} header"))
    };
    let get = get_ok(&api, &format!("/batches/{}", batch.id)).await?;
    let metrics = get_ok(&api, "/metrics").await?;
    let timeline = get_ok(&api, &format!("/batches/{}/timeline", batch.id)).await?;
    let pending = get_ok(
        &api,
        &format!("/batches/{}/items?status=pending&limit=20", batch.id),
    )
    .await?;
    let report = RowsRead {
        items: driven.batch.total,
        failed: driven.batch.failed,
        listed,
        rows_read: header(&listing)?,
        get_batch_rows_read: header(&get)?,
        metrics_rows_read: header(&metrics)?,
        timeline_rows_read: header(&timeline)?,
        pending_page_rows_read: header(&pending)?,
        pending_page_continues: pending.json().is_some_and(|v| v["next_after"].is_string()),
    };
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(report)
}

/// An admin `GET path` that must answer 2xx (its rows-read header is measured).
async fn get_ok(api: &Api, path: &str) -> Result<RawResponse> {
    let r = api.admin_raw(Method::GET, path, None).await?;
    ensure!(r.status.is_success(), "GET {path}: {}", r.status);
    Ok(r)
}

/// A part's report on its own (`--only-…`): JSON with `--json`, else the table
/// `fill` writes.
fn print_part<R: Serialize>(
    json: bool,
    report: &R,
    fill: impl FnOnce(&R, &mut Table),
) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        let mut t = Table::default();
        fill(report, &mut t);
        println!("{t}");
    }
    Ok(())
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ideal_is_a_perfect_window() {
        assert_eq!(ideal_makespan_ms(1000, 500, 25), 20_000.0);
        assert_eq!(ideal_makespan_ms(10, 100, 0), 1000.0);
    }

    #[test]
    fn the_capped_ideal_counts_each_drainers_connections() {
        // 1,000 x 500 ms: 25 in flight, 6 of them at the receiver, 4 drainers.
        assert_eq!(capped_ideal_ms(1000, 500, 25, None, 1), 20_000.0);
        assert_eq!(capped_ideal_ms(1000, 500, 25, Some(6), 1), 500_000.0 / 6.0);
        assert_eq!(capped_ideal_ms(1000, 500, 25, Some(6), 4), 500_000.0 / 24.0);
        // A cap above the concurrency changes nothing.
        assert_eq!(capped_ideal_ms(1000, 500, 4, Some(6), 1), 125_000.0);
    }

    #[test]
    fn mode_is_forced() {
        let args = TargetArgs {
            repo: ".".into(),
            url: None,
            admin_token: None,
            sink_url: None,
            webhook_secret: None,
            vars: vec![
                ("DISPATCH_MODE".into(), "inline".into()),
                ("X".into(), "1".into()),
            ],
            wrangler_config: None,
        };
        let forced = with_mode(&args, "fanout");
        assert_eq!(
            forced.vars,
            [
                ("X".to_string(), "1".to_string()),
                ("DISPATCH_MODE".into(), "fanout".into())
            ]
        );
    }
}
