//! `loadtest e2e --only-elastic` (and part of the full suite): `DRAINERS=auto` on
//! `wrangler.drainers.toml`, whose local queue `DRAIN_QUEUE` this Worker consumes.
//! Idle ticks send no drain message; one tick with 2,000 due items and
//! `MAX_CHILD_INVOCATIONS` 20 finishes the batch with no further tick (each
//! drainer's continuation goes on while work is due), nothing lost or doubled;
//! then, at the default child cap, what a drainer costs: D1 rows written and
//! statements per item for 5,000 webhook items, every summary included.
//!
//! Miniflare hands a queue's consumer one batch at a time, so the local drainers
//! run one after another: this proves the protocol (counts, slots, chains), not
//! the platform's concurrency (`tests/drain_simulation.rs` has that in virtual time).

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::plan;
use crate::driver::steps;
use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::driver::verdict;
use crate::e2e::drainers::{self, of};
use crate::runtime::api::{Api, Batch, Id, Invocation, SubjectIn, TICK_CRON};
use crate::sink::faults::Faults;
use anyhow::{bail, ensure, Context, Result};
use cron_fanout::core::model::{StopReason, Trigger};
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The batch one tick starts, and the child cap its drainers stop at.
const ITEMS: usize = 2_000;
const CHILD_CAP: i64 = 20;
/// The webhook batch whose D1 cost is measured, at the default child cap.
const COST_ITEMS: usize = 5_000;
const DEFAULT_CHILD_CAP: i64 = 31;
/// What ticks cost today at 31 a tick (ticks every 0.3 s; docs/benchmarks.md):
/// drainers may cost no more.
const MAX_ROWS_PER_ITEM: f64 = 3.13;
const MAX_STATEMENTS_PER_ITEM: f64 = 0.36;
/// Idle ticks fired, and how long their (absent) drainers are given to show up.
const IDLE_TICKS: usize = 3;
const SETTLE: Duration = Duration::from_secs(3);

fn settings(child_cap: i64) -> Vec<(&'static str, String)> {
    [
        ("DRAINERS", "auto".to_string()),
        ("MAX_DRAINERS", "50".into()),
        ("MAX_ATTEMPTS", "3".into()),
        ("JOB_TIMEOUT_MS", "5000".into()),
        ("MAX_CHILD_INVOCATIONS", child_cap.to_string()),
        ("ALLOW_PRIVATE_TARGETS", "true".into()),
    ]
    .into_iter()
    .collect()
}

struct Elastic {
    target: Target,
    api: Api,
    timeout: Duration,
    batch: Option<Batch>,
    known: HashSet<i64>,
    since: Option<Vec<Invocation>>,
}

pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let owned = settings(CHILD_CAP);
    let settings: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut args = args.clone();
    args.wrangler_config = Some(PathBuf::from("wrangler.drainers.toml"));
    let target = Target::open(&args, "e2e-elastic", &settings, Secrets::Random, true)
        .await
        .context("starting the elastic drainers' Worker (wrangler.drainers.toml)")?;
    let api = target.api.clone();
    api.delete_schedule("daily").await?;
    let mut f = Elastic {
        target,
        api,
        timeout,
        batch: None,
        known: HashSet::new(),
        since: None,
    };
    checks
        .run(
            &mut f,
            vec![
                check!(
                    format!("DRAINERS=auto: {IDLE_TICKS} idle ticks send no drain message (no queue summary; each tick stopped drained)"),
                    idle_ticks_send_nothing
                ),
                check!(
                    format!("DRAINERS=auto: one tick with {ITEMS} due items and MAX_CHILD_INVOCATIONS {CHILD_CAP} finishes the batch with no further tick"),
                    one_tick_finishes_the_batch
                ),
                check!(
                    format!("DRAINERS=auto: all {ITEMS} completed on attempt 1, one item per subject, the batch's counts exact"),
                    nothing_lost_or_doubled
                ),
                check!(
                    format!("DRAINERS=auto: every drainer dispatched at most {CHILD_CAP} and stayed within its budget; continuations carried the chains on (chain >= 1)"),
                    drainers_within_caps_and_chained
                ),
                check!(
                    format!("DRAINERS=auto: the drainers' claims less releases add up to {ITEMS} exactly"),
                    claims_add_up
                ),
                check!(
                    "DRAINERS=auto: once the batch is done every chain has ended: another tick sends nothing",
                    chains_end_when_nothing_is_due
                ),
            ],
        )
        .await;

    let restarted = match f.target.runtime.as_mut() {
        Some(runtime) => {
            runtime.set_var(
                "MAX_CHILD_INVOCATIONS",
                Some(&DEFAULT_CHILD_CAP.to_string()),
            );
            runtime.restart().await
        }
        None => Err(anyhow::anyhow!("no local runtime")),
    };
    if checks
        .step(
            &format!("elastic: Worker restarts with MAX_CHILD_INVOCATIONS={DEFAULT_CHILD_CAP}"),
            restarted,
        )
        .is_some()
    {
        checks
            .run(
                &mut f,
                vec![check!(
                    format!("DRAINERS=auto at the default child cap: {COST_ITEMS} webhook items cost at most {MAX_ROWS_PER_ITEM} rows written and {MAX_STATEMENTS_PER_ITEM} statements per item, every summary included"),
                    drainers_cost_no_more_than_ticks
                )],
            )
            .await;
    }
    if let Some(runtime) = f.target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(())
}

async fn idle_ticks_send_nothing(f: &mut Elastic) -> Result<()> {
    let known = f.api.invocation_ids().await?;
    for _ in 0..IDLE_TICKS {
        f.api.fire_cron(TICK_CRON).await?;
    }
    tokio::time::sleep(SETTLE).await;
    let since = f.api.invocations_since(&known).await?;
    let ticks = of(&since, Trigger::Tick);
    let drainers = of(&since, Trigger::Queue);
    ensure!(
        ticks.len() == IDLE_TICKS
            && drainers.is_empty()
            && ticks
                .iter()
                .all(|t| t.summary.stop_reason == StopReason::Drained),
        "{} ticks ({:?}), {} drainer summaries",
        ticks.len(),
        ticks
            .iter()
            .map(|t| t.summary.stop_reason)
            .collect::<Vec<_>>(),
        drainers.len()
    );
    Ok(())
}

/// A batch of `n` subjects (the others made inactive), created now.
async fn batch_of(f: &mut Elastic, key: &str, subjects: &[SubjectIn]) -> Result<Batch> {
    for chunk in subjects.chunks(1_000) {
        f.api.put_subjects(chunk).await?;
    }
    f.known = f.api.invocation_ids().await?;
    f.since = None;
    steps::subjects_batch(&f.api, key, subjects.len()).await
}

async fn one_tick_finishes_the_batch(f: &mut Elastic) -> Result<()> {
    let subjects: Vec<SubjectIn> = (0..ITEMS)
        .map(|n| plan::noop_subject(format!("elastic-{n:05}")))
        .collect();
    let batch = batch_of(f, "elastic", &subjects).await?;
    let finished = one_tick(&f.api, &batch.id, f.timeout).await?;
    f.batch = Some(finished);
    let ticks = of(since(f).await?, Trigger::Tick).len();
    ensure!(ticks == 1, "{ticks} ticks ran, want the one fired");
    Ok(())
}

/// Fires one tick and waits (no other tick) for the batch to finish.
async fn one_tick(api: &Api, id: &Id, timeout: Duration) -> Result<Batch> {
    let start = Instant::now();
    api.fire_cron(TICK_CRON).await?;
    loop {
        let b = api.batch(id).await?;
        if b.is_finished() {
            eprintln!(
                "  [elastic] one tick: {} items in {:.1}s",
                b.total,
                start.elapsed().as_secs_f64()
            );
            return Ok(b);
        }
        if start.elapsed() >= timeout {
            bail!(
                "not finished after {timeout:?} with one tick: {}",
                b.progress()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn batch(f: &Elastic) -> Result<&Batch> {
    f.batch.as_ref().context("the batch did not finish")
}

async fn nothing_lost_or_doubled(f: &mut Elastic) -> Result<()> {
    let b = batch(f)?.clone();
    verdict::batch_counts(&b, ITEMS as u64, ITEMS as u64, 0).map_err(anyhow::Error::msg)?;
    drainers::each_subject_completed_once(&f.api, &b.id, ITEMS).await
}

/// The summaries since the batch was created, read once for the checks.
async fn since(f: &mut Elastic) -> Result<&[Invocation]> {
    if f.since.is_none() {
        f.since = Some(f.api.invocations_since(&f.known).await?);
    }
    Ok(f.since.as_deref().unwrap_or_default())
}

async fn drainers_within_caps_and_chained(f: &mut Elastic) -> Result<()> {
    let drainers: Vec<Invocation> = of(since(f).await?, Trigger::Queue)
        .into_iter()
        .cloned()
        .collect();
    verdict::within_budget(&drainers).map_err(anyhow::Error::msg)?;
    verdict::within_child_cap(&drainers, CHILD_CAP).map_err(anyhow::Error::msg)?;
    let unplaced = drainers
        .iter()
        .filter(|i| i.summary.drainer.is_none() || i.summary.chain.is_none())
        .count();
    let longest = drainers
        .iter()
        .filter_map(|i| i.summary.chain)
        .max()
        .unwrap_or(0);
    ensure!(
        unplaced == 0 && longest >= 1,
        "{} drainers, {unplaced} without drainer and chain, longest chain {longest}",
        drainers.len()
    );
    eprintln!(
        "  [elastic] {} drainer invocations, longest chain {longest}",
        drainers.len()
    );
    Ok(())
}

async fn claims_add_up(f: &mut Elastic) -> Result<()> {
    drainers::drainers_add_up(since(f).await?, ITEMS)
}

/// Waits until no invocation summary appeared for [`SETTLE`]: the drainers
/// still queued (run one after another locally) have run.
async fn quiet(api: &Api, timeout: Duration) -> Result<HashSet<i64>> {
    let start = Instant::now();
    let mut seen = api.invocation_ids().await?;
    loop {
        tokio::time::sleep(SETTLE).await;
        let now = api.invocation_ids().await?;
        if now == seen {
            return Ok(now);
        }
        ensure!(
            start.elapsed() < timeout,
            "summaries still appearing after {timeout:?}"
        );
        seen = now;
    }
}

async fn chains_end_when_nothing_is_due(f: &mut Elastic) -> Result<()> {
    // The continuations still queued when the batch finished run (and end).
    let known = quiet(&f.api, f.timeout).await?;
    f.api.fire_cron(TICK_CRON).await?;
    tokio::time::sleep(SETTLE).await;
    let since = f.api.invocations_since(&known).await?;
    let drainers = of(&since, Trigger::Queue).len();
    let ticks = of(&since, Trigger::Tick);
    ensure!(
        drainers == 0 && ticks.len() == 1 && ticks[0].summary.stop_reason == StopReason::Drained,
        "{drainers} drainer summaries and {} ticks after the batch finished",
        ticks.len()
    );
    Ok(())
}

async fn drainers_cost_no_more_than_ticks(f: &mut Elastic) -> Result<()> {
    // The noop subjects stay but are inactive: the batch is the webhooks alone.
    let old: Vec<SubjectIn> = (0..ITEMS)
        .map(|n| SubjectIn {
            active: false,
            ..plan::noop_subject(format!("elastic-{n:05}"))
        })
        .collect();
    f.api.put_subjects(&old).await.map(|_| ())?;
    let hooks: Vec<SubjectIn> = plan::uniform("cost", COST_ITEMS, Faults::default(), None)
        .iter()
        .enumerate()
        .map(|(n, p)| p.subject(&f.target.sink, n))
        .collect();
    let b = batch_of(f, "elastic-cost", &hooks).await?;
    let done = one_tick(&f.api, &b.id, f.timeout).await?;
    verdict::batch_counts(&done, COST_ITEMS as u64, COST_ITEMS as u64, 0)
        .map_err(anyhow::Error::msg)?;
    // Every continuation has run and recorded its summary.
    quiet(&f.api, f.timeout).await?;
    f.since = None;
    let all = since(f).await?;
    let rows: i64 = all.iter().map(|i| i.summary.d1_rows_written).sum();
    let statements: i64 = all.iter().map(|i| i.summary.d1_statements).sum();
    let n = COST_ITEMS as f64;
    let (rows, statements) = (rows as f64 / n, statements as f64 / n);
    eprintln!(
        "  [elastic] {COST_ITEMS} webhooks by {} drainers: {rows:.3} rows written, {statements:.3} statements per item",
        of(all, Trigger::Queue).len()
    );
    verdict::cost_per_item("rows written", Some(rows), MAX_ROWS_PER_ITEM)
        .map_err(anyhow::Error::msg)?;
    verdict::cost_per_item("statements", Some(statements), MAX_STATEMENTS_PER_ITEM)
        .map_err(anyhow::Error::msg)
}
