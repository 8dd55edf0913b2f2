//! The run folder: one load scenario on a fresh runtime (this module, `loadtest
//! run`, also how `bench` runs its scenarios), what each scenario seeds
//! (`scenario`), the flows and pure verdicts of the `cancel`, `replay` and
//! `multi` scenarios that the e2e checks share (`control`, `delivery`), its
//! measurements (`metrics`) and report (`report`, `table`), cron-fanout beside
//! the example service handler (`service`), and the README's demo (`demo`). It
//! uses the shared folders `sink`, `runtime` and `driver`.
//!
//! `loadtest run`: one scenario end to end — seed, create the batch, fire ticks
//! until it finishes, then measure and judge it (`report`).

pub mod control;
pub mod cost_check;
pub mod delivery;
pub mod demo;
pub mod metrics;
pub mod report;
pub mod scenario;
pub mod service;
pub mod table;

use crate::driver::drive::{self, Pace};
use crate::driver::plan::{self, Expect, Planned};
use crate::driver::steps::put_limit;
use crate::driver::steps::RUN_SCHEDULE;
use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::run::report::{Deliveries, Observed, RunReport, Verdict};
use crate::run::scenario::{Job, Scenario, Seeded, Spec, RUN_KEY};
use crate::runtime::api::{Invocation, Item, SubjectIn, TICK_CRON};
use crate::{driver::steps, driver::verdict};
use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::task::JoinSet;

/// Pacing of ticks during a run: back to back, one at a time (two invocations
/// draining at once would blur the throughput figures), but not faster than
/// this while items wait for their retry backoff.
const TICK_PACING: Duration = Duration::from_millis(200);

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[arg(long, value_enum)]
    pub scenario: Scenario,
    /// Subjects (and so items) to seed.
    #[arg(short = 'n', long = "items", default_value_t = 1000)]
    pub items: usize,
    /// Job kind of the subjects (`noop`: happy and refire only).
    #[arg(long, value_enum, default_value_t = Job::Webhook)]
    pub job: Job,
    /// Sink latency per delivery (latency and crash scenarios).
    #[arg(long, default_value_t = 200)]
    pub latency_ms: u64,
    /// Probability that one delivery answers 500 (flaky scenario).
    #[arg(long, default_value_t = 0.2)]
    pub error_rate: f64,
    /// Share of always-500 subjects (poison scenario).
    #[arg(long, default_value_t = 0.05)]
    pub poison_share: f64,
    /// Bound on waiting for the batch to finish, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// Print the report as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Fail unless the run's D1 rows written per item are at most this.
    #[arg(long)]
    pub max_rows_written_per_item: Option<f64>,
    /// Fail unless the run's D1 statements per item are at most this.
    #[arg(long)]
    pub max_statements_per_item: Option<f64>,
    /// Emulate the platform's connection cap in the sink: at most this many
    /// requests in flight per `Fanout-Invocation` (6 on the platform). Default: off.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub connection_cap: Option<u32>,
    /// Every item holds one limit key (`run`), limited to this many in flight
    /// (`PUT /limits/run` before the run): what flow control costs per item.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub key_concurrency: Option<u32>,
    /// Fail unless the batch's `cost` is exactly the sum of its invocations'
    /// shares, and its D1 rows written and read within 1 % of what D1 reported
    /// for the run (`run::cost_check`).
    #[arg(long)]
    pub check_cost: bool,
}

impl RunArgs {
    pub fn spec(&self) -> Spec {
        Spec {
            scenario: self.scenario,
            items: self.items,
            job: self.job,
            latency_ms: self.latency_ms,
            error_rate: self.error_rate,
            poison_share: self.poison_share,
            key_concurrency: self.key_concurrency,
        }
    }
}

/// Runs the scenario, prints the report; `Ok(false)` when a verdict failed.
pub async fn run(args: RunArgs) -> Result<bool> {
    let spec = args.spec();
    spec.validate().map_err(anyhow::Error::msg)?;
    let mut target = open_for(
        &args.target,
        &format!("run-{}", spec.scenario.name()),
        &spec,
    )
    .await?;
    target.sink.set_connection_cap(args.connection_cap).await?;
    let report = execute(&spec, &mut target, Duration::from_secs(args.timeout_secs)).await;
    // Read while the runtime still answers.
    let costs = match (&report, args.check_cost) {
        (Ok(r), true) => Some(cost_check::CostCheck::read(&target.api, &r.batch_id).await),
        _ => None,
    };
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    let mut report = report?;
    if let Some(costs) = costs {
        let costs = costs?;
        eprintln!("{}", costs.line());
        report.verdicts.extend(costs.verdicts());
    }
    let bounds = [
        (
            "rows written",
            report.d1.rows_written_per_item,
            args.max_rows_written_per_item,
        ),
        (
            "statements",
            report.d1.statements_per_item,
            args.max_statements_per_item,
        ),
    ];
    for (what, got, max) in bounds {
        if let Some(max) = max {
            report.verdicts.push(Verdict::new(
                &format!("D1 {what} per item at most {max}"),
                verdict::cost_per_item(what, got, max),
            ));
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(report.passed())
}

/// Starts a Worker on a fresh state dir `name` with the spec's settings (under
/// `--var`) and fresh random secrets.
pub async fn open_for(args: &TargetArgs, name: &str, spec: &Spec) -> Result<Target> {
    let settings = spec.settings(&args.vars);
    let defaults: Vec<(&str, &str)> = settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    Target::open(args, name, &defaults, Secrets::Random, true).await
}

/// `open_for`, run the spec, stop the Worker.
pub async fn on_fresh_target(
    args: &TargetArgs,
    name: &str,
    spec: &Spec,
    timeout: Duration,
) -> Result<RunReport> {
    let mut target = open_for(args, name, spec).await?;
    let report = execute(spec, &mut target, timeout).await?;
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(report)
}

/// The scenario on an open target (a fresh state: its batches are the run's).
pub async fn execute(spec: &Spec, target: &mut Target, timeout: Duration) -> Result<RunReport> {
    let api = target.api.clone();
    let plan = spec.plan();
    let subjects: Vec<SubjectIn> = match spec.job {
        Job::Webhook if spec.scenario == Scenario::Multi => {
            delivery::subjects(&target.sink, &plan, spec.error_rate)
        }
        Job::Noop => plan
            .iter()
            .map(|p| plan::noop_subject(p.id.clone()))
            .collect(),
        Job::Webhook => plan
            .iter()
            .enumerate()
            .map(|(n, p)| p.subject(&target.sink, n))
            .collect(),
    };
    eprintln!("seeding {} subjects ...", subjects.len());
    let upserted = match spec.key_concurrency {
        None => api.put_subjects(&subjects).await?,
        Some(concurrency) => {
            put_limit(&api, RUN_KEY, json!({ "concurrency": concurrency })).await?;
            let keyed: Vec<Value> = subjects
                .iter()
                .map(|s| {
                    let mut s = serde_json::to_value(s)?;
                    s["limits"] = json!([RUN_KEY]);
                    Ok(s)
                })
                .collect::<Result<_>>()?;
            api.put_subjects(&keyed).await?
        }
    };
    ensure!(
        upserted == subjects.len() as u64,
        "upserted {upserted} of {}",
        subjects.len()
    );
    let known = api.invocation_ids().await?;
    let pace = Pace {
        every: TICK_PACING,
        max_in_flight: 1,
        timeout,
    };
    let seeded = Seeded {
        spec,
        plan: &plan,
        known: &known,
        pace,
    };
    if matches!(spec.scenario, Scenario::Cancel | Scenario::Replay) {
        return control::scenario(target, seeded).await;
    }
    if spec.scenario == Scenario::Multi {
        api.delete_schedule("daily").await?;
        return delivery::scenario(target, seeded).await;
    }

    // The `daily` schedule would fire over the same subjects once the real clock
    // passes 12:00 UTC: this run measures its own batch only.
    api.delete_schedule("daily").await?;
    let mut one_off = None;
    let (driven, in_flight_at_kill) = if spec.scenario == Scenario::Crash {
        crash(target, &plan, pace).await?
    } else {
        // A one-off schedule due now: the next tick creates the batch and starts
        // draining it in the same invocation; the progress bar follows it.
        let (body, key) = steps::one_off_now(&api, RUN_SCHEDULE).await?;
        let mut running: JoinSet<Result<()>> = JoinSet::new();
        let first = api.clone();
        running.spawn(async move { first.fire_cron(TICK_CRON).await });
        let batch = steps::await_batch(&api, &key, &mut running, timeout).await?;
        one_off = Some(body);
        (
            drive::until_finished(&api, &batch, pace, running).await?,
            None,
        )
    };
    let batch = driven.batch;
    let items = api.all_items(&batch.id, None).await?;
    let by_subject: HashMap<String, Item> = items
        .iter()
        .map(|i| (i.subject_id.clone(), i.clone()))
        .collect();
    let max_attempts = u32::try_from(target.setting("MAX_ATTEMPTS")?)?;

    let stats = match spec.job {
        Job::Webhook => Some(target.sink.stats(true).await?),
        Job::Noop => None,
    };
    let all_deliveries = stats
        .as_ref()
        .and_then(|s| s.deliveries.clone())
        .unwrap_or_default();
    let by_item = verdict::deliveries_by_item(&all_deliveries, &batch.id.0);
    let duplicates = verdict::duplicate_deliveries(&by_item);
    let deliveries = stats.as_ref().map(|_| {
        let total = by_item.values().map(|d| d.len() as u64).sum::<u64>();
        Deliveries {
            total,
            per_item: metrics::ratio(total as f64, items.len() as f64),
            duplicates,
        }
    });

    let mut verdicts = vec![Verdict::new(
        "nothing lost: one item per subject, each completed or failed",
        verdict::nothing_lost(&plan, &by_subject),
    )];
    let expected_failed = plan
        .iter()
        .filter(|p| {
            by_subject.get(&p.id).is_some_and(|i| {
                let e = Expect::from_faults(&p.faults, &i.id.to_string(), max_attempts);
                !matches!(e, Expect::Healthy | Expect::FailFirst(_))
            })
        })
        .count() as u64;
    let total = plan.len() as u64;
    verdicts.push(Verdict::new(
        "batch finished once, counts add up to the expected completed/failed",
        verdict::batch_counts(&batch, total, total - expected_failed, expected_failed),
    ));
    match (spec.job, in_flight_at_kill) {
        (Job::Noop, _) => verdicts.push(Verdict::new(
            "noop items completed on attempt 1",
            verdict::noop_outcomes(&by_subject),
        )),
        (Job::Webhook, Some(at_kill)) => verdicts.extend(
            verdict::crash_recovery(&plan, &by_subject, &by_item, at_kill)
                .into_iter()
                .map(|(name, r)| Verdict::new(name, r)),
        ),
        (Job::Webhook, None) => {
            verdicts.push(Verdict::new(
                "each item ended as its webhook's faults dictate, one delivery per attempt",
                verdict::outcomes_match_faults(&plan, max_attempts, &by_subject, &by_item),
            ));
            verdicts.push(Verdict::new(
                "no duplicate deliveries",
                if duplicates == 0 {
                    Ok(())
                } else {
                    Err(format!("{duplicates} redeliveries of items already done"))
                },
            ));
        }
    }
    let invocations = api.invocations_since(&known).await?;
    let ours: Vec<&Invocation> = invocations.iter().collect();
    verdicts.push(Verdict::new(
        "no invocation used more subrequests than its budget",
        verdict::within_budget(&invocations),
    ));
    if let (Scenario::Refire, Some(body)) = (spec.scenario, &one_off) {
        // The same fire again: the one-off saved again with the same instant is due
        // at once, and its key names the finished batch.
        let before = stats.as_ref().map_or(0, |s| s.total);
        let refired = async {
            api.put_schedule(RUN_SCHEDULE, body).await?;
            steps::refire(target, &batch, before).await
        };
        verdicts.push(Verdict::new(
            "firing the same occurrence again (the one-off saved again) creates no batch and no delivery",
            refired.await.map_err(|e| format!("{e:#}")),
        ));
    }
    let settings: BTreeMap<String, String> = target.settings.clone();
    RunReport::build(
        Observed {
            spec,
            settings: &settings,
            batch: &batch,
            items: &items,
            invocations: &ours,
            deliveries,
            ticks: driven.ticks,
            in_flight_at_kill,
        },
        verdicts,
    )
}

/// The e2e crash: an ad-hoc batch (a tick that fired it would drain it before its
/// call returns), SIGKILL while items are in flight, restart on the same state,
/// then ticks until the reaper and the drain finish it. Returns the driven
/// batch and how many items were `processing` at the kill.
async fn crash(
    target: &mut Target,
    plan: &[Planned],
    pace: Pace,
) -> Result<(drive::Driven, Option<u64>)> {
    let api = target.api.clone();
    let key = format!("crash-{}", chrono::Utc::now().timestamp_millis());
    let batch = steps::subjects_batch(&api, &key, plan.len()).await?;
    let at_kill = steps::kill_mid_batch(target, &batch.id, pace.timeout).await?;
    eprintln!("killed the runtime with {}", at_kill.progress());
    let runtime = target
        .runtime
        .as_mut()
        .context("the crash scenario needs a local runtime, not --url")?;
    runtime
        .restart()
        .await
        .context("restarting after the kill")?;
    // Nothing has run since the restart, so the counts are those at the kill.
    let frozen = api.batch(&batch.id).await?;
    eprintln!("restarted with {}", frozen.progress());
    let driven = drive::until_finished(&api, &frozen, pace, JoinSet::new()).await?;
    Ok((driven, Some(frozen.processing)))
}
