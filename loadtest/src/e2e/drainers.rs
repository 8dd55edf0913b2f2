//! `loadtest e2e --only-drainers` (and part of the full suite): `DRAINERS=4` on
//! `wrangler.drainers.toml`, whose local queue `DRAIN_QUEUE` this Worker consumes.
//! A 10,000-item batch is drained by the drainers (the tick only reaps and sends
//! the messages) with nothing lost or doubled and the counts exact, each drainer's
//! summary (trigger `queue`) within its budget; then a drainer is killed mid-run
//! (SIGKILL of the runtime) and the reaper recovers its leases as after any crash.
//!
//! Miniflare hands a queue's consumer one batch at a time, so the local drainers
//! run one after another: this proves the protocol (messages, exclusive claims,
//! summaries, recovery), not the platform's concurrency.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::plan;
use crate::driver::steps;
use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::runtime::api::{Api, Batch, Id, Invocation, SubjectIn, TICK_CRON};
use crate::runtime::wrangler::min_lease_seconds;
use crate::sink::faults::Faults;
use crate::{driver::drive, driver::verdict};
use anyhow::{bail, ensure, Context, Result};
use cron_fanout::core::model::{StopReason, Trigger};
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Drainers per tick.
pub const DRAINERS: u64 = 4;
/// The batch the drainers drain.
pub const ITEMS: usize = 10_000;
/// The batch the kill lands in, and its webhooks' latency.
const KILL_ITEMS: usize = 1_000;
const KILL_LATENCY_MS: u64 = 200;
/// Each drainer's budget: about a quarter of the batch (one SELF call per item,
/// plus its claims and commits), so all four drain a share.
const BUDGET: u64 = 2_700;
/// With no progress for this long the drainers are done: another tick is fired.
const STALL: Duration = Duration::from_secs(5);

/// The settings: noop items through SELF, no child cap (wrangler dev enforces
/// none, and the drainers' budgets are what splits the batch), short timeouts so
/// the leases a kill leaves expire within seconds.
fn settings() -> Vec<(&'static str, String)> {
    let lease = min_lease_seconds(1_000, 100, 25);
    [
        ("DRAINERS", DRAINERS.to_string()),
        ("MAX_ATTEMPTS", "3".into()),
        ("JOB_TIMEOUT_MS", "1000".into()),
        ("RETRY_BASE_MS", "100".into()),
        ("RETRY_MAX_MS", "400".into()),
        ("CLAIM_CHUNK", "100".into()),
        ("DISPATCH_CONCURRENCY", "25".into()),
        ("SUBREQUEST_BUDGET", BUDGET.to_string()),
        ("MAX_CHILD_INVOCATIONS", "1000000".into()),
        ("INVOCATION_DEADLINE_MS", "60000".into()),
        ("LEASE_SECONDS", lease.to_string()),
        ("ALLOW_PRIVATE_TARGETS", "true".into()),
    ]
    .into_iter()
    .collect()
}

/// What the drainers' checks share: the Worker, the batch under way, and what
/// the checks before found.
struct Drainers {
    target: Target,
    api: Api,
    timeout: Duration,
    /// The batch the current list drains.
    batch: Batch,
    /// Invocation ids seen before that batch was created.
    known: HashSet<i64>,
    /// The summaries since `known`, read once after the batch finished.
    since: Option<Vec<Invocation>>,
    finished: Option<Batch>,
    processing_at_kill: Option<u64>,
}

pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let settings = settings();
    let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut args = args.clone();
    args.wrangler_config = Some(PathBuf::from("wrangler.drainers.toml"));
    let target = Target::open(&args, "e2e-drainers", &settings, Secrets::Random, true)
        .await
        .context("starting the drainers' Worker (wrangler.drainers.toml)")?;
    let api = target.api.clone();
    api.delete_schedule("daily").await?;
    let subjects: Vec<SubjectIn> = (0..ITEMS)
        .map(|n| plan::noop_subject(format!("drain-{n:05}")))
        .collect();
    for chunk in subjects.chunks(1_000) {
        api.put_subjects(chunk).await?;
    }

    let known: HashSet<i64> = api.invocation_ids().await?;
    let batch = steps::subjects_batch(&api, "drainers", ITEMS).await?;
    let mut f = Drainers {
        target,
        api: api.clone(),
        timeout,
        batch,
        known,
        since: None,
        finished: None,
        processing_at_kill: None,
    };
    checks
        .run(
            &mut f,
            vec![
                check!(
                    format!("DRAINERS={DRAINERS}: a {ITEMS}-item batch finishes while the tick only sends drain messages"),
                    drainers_finish_the_batch
                ),
                check!(
                    format!("drainers: all {ITEMS} completed, none failed, the batch's counts exact"),
                    all_completed_counts_exact
                ),
                check!(
                    "drainers: nothing lost or doubled: one item per subject, each completed on attempt 1",
                    nothing_lost_or_doubled
                ),
                check!(
                    "drainers: every tick sent its drain messages and drained nothing itself (stop_reason drainers)",
                    ticks_only_send_drain_messages
                ),
                check!(
                    "drainers: GET /invocations lists at least DRAINERS drainer summaries (trigger queue) that each claimed a share",
                    every_drainer_claims_a_share
                ),
                check!(
                    "drainers: every drainer stayed within its own SUBREQUEST_BUDGET",
                    drainers_within_their_budget
                ),
                check!(
                    "drainers: their claims (less items given back) and completions add up to the batch exactly",
                    claims_add_up_to_the_batch
                ),
            ],
        )
        .await;

    // A drainer killed mid-run: its leases are the reaper's, as after any crash.
    // Webhooks that take KILL_LATENCY_MS, so the runtime is waiting on them (and
    // answers the watcher) while a drainer holds claimed items. The noop subjects
    // above are set inactive: the batch is these alone.
    let slow = Faults {
        latency_ms: KILL_LATENCY_MS,
        ..Faults::default()
    };
    for chunk in subjects.chunks(1_000) {
        let inactive: Vec<SubjectIn> = chunk
            .iter()
            .cloned()
            .map(|s| SubjectIn { active: false, ..s })
            .collect();
        api.put_subjects(&inactive).await?;
    }
    let kill: Vec<SubjectIn> = plan::uniform("k", KILL_ITEMS, slow, None)
        .iter()
        .enumerate()
        .map(|(n, p)| p.subject(&f.target.sink, n))
        .collect();
    api.put_subjects(&kill).await?;
    f.known = api.invocation_ids().await?;
    f.since = None;
    f.finished = None;
    f.batch = steps::subjects_batch(&api, "drainers-kill", KILL_ITEMS).await?;
    checks
        .run(
            &mut f,
            vec![
                check!(
                    needed "drainers: runtime restarts on the same state dir after SIGKILL mid-drain",
                    restarts_after_a_kill_mid_drain
                ),
                check!(
                    "drainers: the kill hit a drainer with items claimed (processing > 0 after restart)",
                    kill_hit_claimed_items
                ),
                check!(
                    "drainers: the killed batch finishes after restart",
                    drainers_finish_the_batch
                ),
                check!(
                    "drainers: after the kill nothing lost: every item completed, counts exact",
                    killed_batch_completed_counts_exact
                ),
                check!(
                    "drainers: the ticks' reaper requeued exactly the leases the killed drainer left; drainers never reap",
                    reaper_requeued_the_killed_drainers_leases
                ),
                check!(
                    "drainers: no invocation (tick or drainer) used more subrequests than its budget",
                    everyone_within_budget
                ),
            ],
        )
        .await;

    if let Some(runtime) = f.target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(())
}

async fn drainers_finish_the_batch(f: &mut Drainers) -> Result<()> {
    let started = Instant::now();
    let finished = drain_by_drainers(&f.api, &f.batch.id, f.timeout).await?;
    eprintln!(
        "  [drainers] {} items in {:.1}s",
        finished.total,
        started.elapsed().as_secs_f64()
    );
    f.finished = Some(finished);
    Ok(())
}

fn finished(f: &Drainers) -> Result<&Batch> {
    f.finished.as_ref().context("the batch did not finish")
}

async fn all_completed_counts_exact(f: &mut Drainers) -> Result<()> {
    verdict::batch_counts(finished(f)?, ITEMS as u64, ITEMS as u64, 0).map_err(anyhow::Error::msg)
}

async fn nothing_lost_or_doubled(f: &mut Drainers) -> Result<()> {
    each_subject_completed_once(&f.api, &f.batch.id, ITEMS).await
}

/// The batch's `n` items: one per subject, each completed on attempt 1.
pub(crate) async fn each_subject_completed_once(api: &Api, id: &Id, n: usize) -> Result<()> {
    let items = api.all_items(id, None).await?;
    let ids: HashSet<&str> = items.iter().map(|i| i.subject_id.as_str()).collect();
    let odd: Vec<String> = items
        .iter()
        .filter(|i| i.status != "completed" || i.attempt != 1)
        .take(5)
        .map(|i| format!("{} {} attempt {}", i.subject_id, i.status, i.attempt))
        .collect();
    ensure!(
        items.len() == n && ids.len() == n && odd.is_empty(),
        "{} items, {} subjects, e.g. {odd:?}",
        items.len(),
        ids.len()
    );
    Ok(())
}

/// The summaries of the batch's invocations, read once for the checks that judge them.
async fn since(f: &mut Drainers) -> Result<&[Invocation]> {
    if f.since.is_none() {
        f.since = Some(f.api.invocations_since(&f.known).await?);
    }
    Ok(f.since.as_deref().unwrap_or_default())
}

/// The summaries of `trigger`.
pub(crate) fn of(since: &[Invocation], trigger: Trigger) -> Vec<&Invocation> {
    since
        .iter()
        .filter(|i| i.summary.trigger == trigger)
        .collect()
}

async fn ticks_only_send_drain_messages(f: &mut Drainers) -> Result<()> {
    let ticks = of(since(f).await?, Trigger::Tick);
    let sent_only = |i: &&Invocation| {
        i.summary.stop_reason == StopReason::Drainers && i.summary.tally.claimed == 0
    };
    if !ticks.is_empty() && ticks.iter().all(sent_only) {
        return Ok(());
    }
    bail!(
        "{}",
        ticks
            .iter()
            .map(|i| format!(
                "{} {:?} claimed {}",
                i.id, i.summary.stop_reason, i.summary.tally.claimed
            ))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

async fn every_drainer_claims_a_share(f: &mut Drainers) -> Result<()> {
    let drainers = of(since(f).await?, Trigger::Queue);
    let working = drainers
        .iter()
        .filter(|i| i.summary.tally.claimed > 0)
        .count() as u64;
    ensure!(
        working >= DRAINERS && drainers.len() as u64 >= DRAINERS,
        "{} drainer summaries, {working} of them claimed items",
        drainers.len()
    );
    Ok(())
}

async fn drainers_within_their_budget(f: &mut Drainers) -> Result<()> {
    let drainers: Vec<Invocation> = of(since(f).await?, Trigger::Queue)
        .into_iter()
        .cloned()
        .collect();
    ensure!(
        drainers
            .iter()
            .all(|i| i.summary.subrequest_budget == BUDGET as i64),
        "a drainer ran with another budget"
    );
    verdict::within_budget(&drainers).map_err(anyhow::Error::msg)
}

async fn claims_add_up_to_the_batch(f: &mut Drainers) -> Result<()> {
    drainers_add_up(since(f).await?, ITEMS)
}

/// The drainers' claims (less the items they gave back) and completions are
/// the batch's `n` exactly.
pub(crate) fn drainers_add_up(since: &[Invocation], n: usize) -> Result<()> {
    let drainers = of(since, Trigger::Queue);
    let claimed: i64 = drainers
        .iter()
        .map(|i| i.summary.tally.claimed - i.summary.tally.released)
        .sum();
    let completed: i64 = drainers.iter().map(|i| i.summary.tally.completed).sum();
    ensure!(
        claimed == n as i64 && completed == n as i64,
        "drainers claimed {claimed} (less releases) and completed {completed}, want {n} each"
    );
    Ok(())
}

/// Kills the runtime as soon as a drainer is seen holding claimed items, and
/// restarts it.
async fn restarts_after_a_kill_mid_drain(f: &mut Drainers) -> Result<()> {
    let (at_kill, tick) = drive::ticks_until(&f.api, &f.batch.id, f.timeout, |b| {
        b.processing > 0 && b.completed + b.failed < b.total
    })
    .await?;
    let runtime = f.target.runtime.as_mut().context("no local runtime")?;
    runtime.kill_hard();
    // The trigger request dies with the runtime; its error is expected.
    let _ = tick.await;
    eprintln!("  [drainers] killed with {}", at_kill.progress());
    runtime.restart().await
}

async fn kill_hit_claimed_items(f: &mut Drainers) -> Result<()> {
    // Nothing has run since the restart, so the counts are those at the kill.
    let frozen = f.api.batch(&f.batch.id).await?;
    f.processing_at_kill = Some(frozen.processing);
    ensure!(frozen.processing > 0, "{}", frozen.progress());
    Ok(())
}

async fn killed_batch_completed_counts_exact(f: &mut Drainers) -> Result<()> {
    let b = finished(f)?;
    verdict::batch_counts(b, b.total, b.total, 0).map_err(anyhow::Error::msg)
}

async fn reaper_requeued_the_killed_drainers_leases(f: &mut Drainers) -> Result<()> {
    let processing_at_kill = f
        .processing_at_kill
        .context("the items in flight at the kill are unknown")?;
    let since = since(f).await?;
    let reaped: i64 = of(since, Trigger::Tick)
        .iter()
        .map(|i| i.summary.tally.reaped)
        .sum();
    ensure!(
        u64::try_from(reaped) == Ok(processing_at_kill)
            && of(since, Trigger::Queue)
                .iter()
                .all(|i| i.summary.tally.reaped == 0),
        "ticks reaped {reaped}, {processing_at_kill} were processing"
    );
    Ok(())
}

async fn everyone_within_budget(f: &mut Drainers) -> Result<()> {
    verdict::within_budget(since(f).await?).map_err(anyhow::Error::msg)
}

/// Fires one tick, then another whenever the batch made no progress for
/// [`STALL`] (the drainers a tick started are done), until it finishes.
async fn drain_by_drainers(api: &Api, id: &Id, timeout: Duration) -> Result<Batch> {
    let start = Instant::now();
    let mut last = (u64::MAX, Instant::now());
    let mut ticks = 0;
    loop {
        let b = api.batch(id).await?;
        if b.is_finished() {
            eprintln!(
                "  [drainers] finished after {ticks} ticks: {}",
                b.progress()
            );
            return Ok(b);
        }
        let done = b.completed + b.failed;
        if done != last.0 {
            last = (done, Instant::now());
        }
        if ticks == 0 || last.1.elapsed() >= STALL {
            api.fire_cron(TICK_CRON).await?;
            ticks += 1;
            last.1 = Instant::now();
            eprintln!(
                "  [drainers {:>5.1}s] tick {ticks}: {}",
                start.elapsed().as_secs_f64(),
                b.progress()
            );
        }
        if start.elapsed() >= timeout {
            bail!("not finished after {timeout:?}: {}", b.progress());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
