//! The e2e suite's crash checks: the runtime killed (SIGKILL, whole process
//! group) while a tick has items in flight, restarted on the same state dir, and
//! the batch recovered: leases requeued by the reaper, every item finished.

use crate::check;
use crate::driver::checks::{Check, Checks};
use crate::driver::drive;
use crate::driver::plan::{self, Planned};
use crate::driver::steps::items_by_subject;
use crate::driver::target::Target;
use crate::runtime::api::{Api, Batch, Invocation, SubjectIn};
use crate::{driver::steps, driver::verdict};
use anyhow::{ensure, Context, Result};
use cron_fanout::core::time::rfc3339;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;

/// The crash checks' fixture: the runtime they kill, the suite's subjects slowed
/// down, the ad-hoc batch over them and what the checks before found.
struct Crash<'a> {
    target: &'a mut Target,
    api: Api,
    timeout: Duration,
    slow: Vec<Planned>,
    /// The ad-hoc batch's body, and the batch.
    body: Value,
    batch: Option<Batch>,
    /// Invocation ids seen before the kill.
    known: HashSet<i64>,
    processing_at_kill: Option<u64>,
    invocations: Vec<Invocation>,
}

/// Kills the runtime (SIGKILL, whole process group) while a tick has items in
/// flight (its subjects `latency_ms` slow), restarts it on the same state dir
/// and checks recovery.
pub async fn crash(
    target: &mut Target,
    plan: &[Planned],
    latency_ms: u64,
    timeout: Duration,
    checks: &mut Checks,
) -> Result<()> {
    let api = target.api.clone();
    let slow = plan::all_slow(plan, latency_ms);
    let subjects: Vec<SubjectIn> = slow
        .iter()
        .enumerate()
        .map(|(n, p)| p.subject(&target.sink, n))
        .collect();
    api.put_subjects(&subjects)
        .await
        .context("re-seeding slow subjects")?;
    let key = format!("crash-{}", chrono::Utc::now().timestamp_millis());
    let mut f = Crash {
        target,
        api,
        timeout,
        slow,
        body: json!({"key": key, "source": "subjects"}),
        batch: None,
        known: HashSet::new(),
        processing_at_kill: None,
        invocations: Vec::new(),
    };
    checks
        .run(
            &mut f,
            vec![
                check!(
                    needed "POST /batches creates an ad-hoc batch (201) over all subjects",
                    ad_hoc_batch_created
                ),
                check!(
                    "POST /batches with an existing key returns that batch (200)",
                    existing_key_returns_the_batch
                ),
                check!(
                    needed "runtime restarts on the same state dir after SIGKILL",
                    restarts_after_a_kill_mid_batch
                ),
                check!(
                    "crash hit items in flight (processing > 0 after restart)",
                    kill_hit_items_in_flight
                ),
                check!(
                    "crash batch finishes after restart while ticks fire",
                    crash_batch_finishes
                ),
            ],
        )
        .await;

    let batch = f.batch.as_ref().context("no crash batch")?;
    let processing_at_kill = f
        .processing_at_kill
        .context("the items in flight at the kill are unknown")?;
    let items = items_by_subject(&f.api, &batch.id).await?;
    let deliveries = f.target.sink.deliveries().await?;
    let by_item = verdict::deliveries_by_item(&deliveries, &batch.id.0);
    // Judged together (`loadtest run` reports them too), one line each.
    let recovery = verdict::crash_recovery(&f.slow, &items, &by_item, processing_at_kill);
    let mut list: Vec<Check<Crash>> = recovery
        .into_iter()
        .map(|(name, verdict)| check!(name, recovered, verdict))
        .collect();
    f.invocations = f.api.invocations(1000).await?;
    list.extend([
        check!(
            "crash: the reaper requeued exactly the leases left by the crash",
            reaper_requeued_the_crash_leases
        ),
        check!(
            "crash: no invocation used more subrequests than its budget",
            crash_invocations_within_budget
        ),
    ]);
    checks.run(&mut f, list).await;
    Ok(())
}

fn crash_batch<'f>(f: &'f Crash<'_>) -> Result<&'f Batch> {
    f.batch.as_ref().context("no crash batch")
}

async fn ad_hoc_batch_created(f: &mut Crash<'_>) -> Result<()> {
    let (created, batch) = f.api.create_batch(&f.body).await?;
    let total = batch.total;
    f.batch = Some(batch);
    ensure!(
        created && total == f.slow.len() as u64,
        "created {created}, total {total}"
    );
    Ok(())
}

async fn existing_key_returns_the_batch(f: &mut Crash<'_>) -> Result<()> {
    let batch = crash_batch(f)?;
    let (created_again, again) = f.api.create_batch(&f.body).await?;
    ensure!(
        !created_again && again.id == batch.id,
        "created {created_again}, id {} vs {}",
        again.id,
        batch.id
    );
    Ok(())
}

async fn restarts_after_a_kill_mid_batch(f: &mut Crash<'_>) -> Result<()> {
    let id = crash_batch(f)?.id.clone();
    f.known = f.api.invocation_ids().await?;
    let at_kill = steps::kill_mid_batch(f.target, &id, f.timeout).await?;
    eprintln!("  [crash] killed with {}", at_kill.progress());
    let runtime = f.target.runtime.as_mut().context("no local runtime")?;
    runtime.restart().await
}

async fn kill_hit_items_in_flight(f: &mut Crash<'_>) -> Result<()> {
    // Nothing has run since the restart, so the counts are those at the kill.
    let frozen = f.api.batch(&crash_batch(f)?.id).await?;
    eprintln!("  [crash] after restart: {}", frozen.progress());
    f.processing_at_kill = Some(frozen.processing);
    ensure!(frozen.processing > 0, "{}", frozen.progress());
    Ok(())
}

async fn crash_batch_finishes(f: &mut Crash<'_>) -> Result<()> {
    drive::in_pairs(&f.api, &crash_batch(f)?.id, f.timeout, "crash").await?;
    Ok(())
}

/// One of `verdict::crash_recovery`'s verdicts, judged with the others.
async fn recovered(_: &mut Crash<'_>, verdict: Result<(), String>) -> Result<()> {
    verdict.map_err(anyhow::Error::msg)
}

async fn reaper_requeued_the_crash_leases(f: &mut Crash<'_>) -> Result<()> {
    let processing_at_kill = f.processing_at_kill.unwrap_or_default();
    let since_crash: Vec<&Invocation> = f
        .invocations
        .iter()
        .filter(|i| !f.known.contains(&i.id))
        .collect();
    // What each scheduled run did since the crash, oldest first: the evidence
    // for this check and the next when they fail.
    for Invocation { id, summary: i } in since_crash.iter().rev() {
        let t = &i.tally;
        eprintln!(
            "  [crash] invocation {id} {} at {} {} ms: claimed {} completed {} retried {} failed {} lost_leases {} released {} reaped {} subrequests {}/{}",
            i.trigger.as_str(), rfc3339(i.started_at), i.elapsed_ms, t.claimed, t.completed, t.retried,
            t.failed, t.lost_leases, t.released, t.reaped, i.subrequests, i.subrequest_budget
        );
    }
    let reaped: i64 = since_crash.iter().map(|i| i.summary.tally.reaped).sum();
    ensure!(
        u64::try_from(reaped) == Ok(processing_at_kill),
        "invocations report {reaped} reaped, {processing_at_kill} were processing"
    );
    Ok(())
}

async fn crash_invocations_within_budget(f: &mut Crash<'_>) -> Result<()> {
    verdict::within_budget(&f.invocations).map_err(anyhow::Error::msg)
}
