//! Batch control end to end: pause, resume, cancel, dead-letter
//! replay and retention against a real Worker and sink. The e2e checks
//! ([`e2e`]), the `cancel` and `replay` scenarios of `loadtest run`
//! ([`scenario`]), and the pure verdicts they share.
//!
//! "After a request" is measured on one clock: the sink stamps each delivery when
//! it arrives, and the request's answer is stamped when it comes back, both on
//! this machine.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive::{self, until_called_back, until_ended, Pace};
use crate::driver::plan::Planned;
use crate::driver::steps::webhook_batch;
use crate::driver::target::{Target, TargetArgs};
use crate::run::report::{Deliveries, Observed, RunReport, Verdict};
use crate::run::scenario::{Scenario, Spec};
use crate::runtime::api::{Api, Batch, Id, Invocation, Item, TICK_CRON};
use crate::sink::faults::Faults;
use crate::sink::{Delivery, SinkClient};
use crate::{driver::verdict, e2e::delivery, e2e::suite, run::metrics};
use anyhow::{bail, ensure, Context, Result};
use chrono::{DateTime, Utc};
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

// ---------------------------------------------------------------- pure verdicts

/// When a delivery arrived at the sink.
fn received(d: &Delivery) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&d.received_at)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Deliveries that arrived after `at`.
pub fn delivered_after(deliveries: &[&Delivery], at: DateTime<Utc>) -> u64 {
    deliveries
        .iter()
        .filter(|d| received(d).is_none_or(|t| t > at))
        .count() as u64
}

/// After a pause or a cancel answered with `in_flight` items processing, at most
/// those are delivered: claims skip the batch from the request on.
pub fn only_in_flight_after(
    deliveries: &[&Delivery],
    at: DateTime<Utc>,
    in_flight: u64,
) -> Result<(), String> {
    let after = delivered_after(deliveries, at);
    eprintln!("  {after} deliveries after the request, {in_flight} items were in flight");
    if after <= in_flight {
        Ok(())
    } else {
        Err(format!(
            "{after} deliveries after the request answered, but only {in_flight} items were in flight"
        ))
    }
}

/// A cancelled batch ended: status cancelled, `finished_at` set, nothing pending
/// or in flight, and completed + failed + cancelled = total (100 %).
pub fn ended_cancelled(b: &Batch, total: u64) -> Result<(), String> {
    let mut wrong = Vec::new();
    if b.status != "cancelled" || b.finished_at.is_none() {
        wrong.push(format!(
            "status {} finished_at {:?} (want cancelled, set)",
            b.status, b.finished_at
        ));
    }
    if b.pending + b.processing != 0 {
        wrong.push("items left pending or in flight".to_string());
    }
    if b.total != total || b.completed + b.failed + b.cancelled != total {
        wrong.push(format!("completed + failed + cancelled != total {total}"));
    }
    if (b.percent - 100.0).abs() > 1e-9 {
        wrong.push("percent is not 100".into());
    }
    if b.cancelled == 0 {
        wrong.push("nothing was cancelled".into());
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {}", wrong.join("; "), b.progress()))
    }
}

/// Items by their id as text (the Idempotency-Key).
fn by_key(items: &[Item]) -> HashMap<String, &Item> {
    items.iter().map(|i| (i.id.to_string(), i)).collect()
}

/// Every cancelled item was never delivered (it was pending when cancelled and
/// its receiver is healthy), every completed one exactly once.
pub fn cancelled_never_delivered(
    items: &[Item],
    deliveries: &HashMap<String, Vec<&Delivery>>,
) -> Result<(), String> {
    let mut wrong = Vec::new();
    for (key, item) in by_key(items) {
        let n = deliveries.get(&key).map_or(0, Vec::len);
        let want = match item.status.as_str() {
            "cancelled" => 0,
            "completed" => 1,
            other => {
                wrong.push(format!("{}: {other}", item.subject_id));
                continue;
            }
        };
        if n != want {
            wrong.push(format!(
                "{} ({}): {n} deliveries, want {want}",
                item.subject_id, item.status
            ));
        }
    }
    summarize(wrong, items.len())
}

/// After a replay of items that had failed for good: each is completed, delivered
/// exactly once more than before (the replay's attempt, numbered on from the
/// last), with `grow` more attempts allowed, its last delivery answered 2xx.
pub fn replayed_once_more(
    before: &[Item],
    after: &[Item],
    deliveries: &HashMap<String, Vec<&Delivery>>,
    grow: u32,
) -> Result<(), String> {
    let after = by_key(after);
    let mut wrong = Vec::new();
    for old in before {
        let key = old.id.to_string();
        let Some(new) = after.get(&key) else {
            wrong.push(format!("{}: gone", old.subject_id));
            continue;
        };
        let ds = deliveries.get(&key).map(Vec::as_slice).unwrap_or(&[]);
        let attempts: Vec<Option<u32>> = ds.iter().map(|d| d.attempt).collect();
        let want: Vec<Option<u32>> = (1..=old.attempt + 1).map(Some).collect();
        if new.status != "completed" || new.attempt != old.attempt + 1 {
            wrong.push(format!(
                "{}: {} on attempt {} (want completed on {})",
                old.subject_id,
                new.status,
                new.attempt,
                old.attempt + 1
            ));
        } else if new.max_attempts != old.max_attempts + grow {
            wrong.push(format!(
                "{}: max_attempts {} (want {})",
                old.subject_id,
                new.max_attempts,
                old.max_attempts + grow
            ));
        } else if attempts != want {
            wrong.push(format!(
                "{}: delivered attempts {attempts:?} (want {want:?})",
                old.subject_id
            ));
        } else if !ds
            .last()
            .and_then(|d| d.status)
            .is_some_and(|s| (200..300).contains(&s))
        {
            wrong.push(format!(
                "{}: the replayed delivery did not succeed",
                old.subject_id
            ));
        }
    }
    summarize(wrong, before.len())
}

fn summarize(wrong: Vec<String>, of: usize) -> Result<(), String> {
    if wrong.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = wrong.iter().take(5).cloned().collect();
    Err(format!("{} of {of}: {}", wrong.len(), shown.join("; ")))
}

// ---------------------------------------------------------------- flows

/// Every delivery the sink recorded.
async fn deliveries(sink: &SinkClient) -> Result<Vec<Delivery>> {
    Ok(sink.stats(true).await?.deliveries.unwrap_or_default())
}

/// What a batch left behind: every delivery the sink recorded, and its items.
async fn outcome(api: &Api, sink: &SinkClient, id: &Id) -> Result<(Vec<Delivery>, Vec<Item>)> {
    Ok((deliveries(sink).await?, api.all_items(id, None).await?))
}

/// What a pause or cancel mid-batch observed.
pub struct Interrupted {
    pub batch: Batch,
    /// The request's answer.
    pub answer: Batch,
    /// When it came back.
    pub at: DateTime<Utc>,
}

/// Ticks until at least `after_completed` items of the batch completed, then
/// `POST /batches/{id}/<action>`; waits for the tick that was running.
pub async fn interrupt(
    api: &Api,
    batch: &Batch,
    action: &str,
    after_completed: u64,
    timeout: Duration,
) -> Result<Interrupted> {
    let (_, tick) =
        drive::ticks_until(api, &batch.id, timeout, |b| b.completed >= after_completed).await?;
    let answer = api.control(&batch.id, action).await?;
    let at = Utc::now();
    eprintln!(
        "  [{action}] answered {} {}",
        answer.status,
        answer.progress()
    );
    tick.await??;
    Ok(Interrupted {
        batch: batch.clone(),
        answer,
        at,
    })
}

// ---------------------------------------------------------------- e2e

/// Items of the pause and cancel batches, and the latency of their receivers:
/// slow enough that a request lands while the batch drains.
const MID_BATCH_ITEMS: usize = 200;
const MID_BATCH_LATENCY_MS: u64 = 200;
/// Items of the replay batch, failing for good until their receivers are fixed.
const REPLAY_ITEMS: usize = 20;

/// The e2e checks of batch control on a Worker of their own (the suite's
/// settings; retention restarts it): pause, cancel and replay mid-batch, then
/// retention of what they left.
pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let target = suite::open_worker(args, "e2e-control", [], Vec::new())
        .await
        .context("starting the batch-control Worker")?;
    let mut f = Control {
        target,
        timeout,
        paused: None,
        cancelled: None,
        replayed: None,
        max_id: None,
    };
    // A list per batch: one whose flow stops leaves the others to run.
    let pause = vec![
        check!(needed "pause mid-batch answers 200 with status paused", pause_mid_batch_answers_paused),
        check!(
            "paused: ticks deliver nothing and claim nothing of the batch",
            paused_ticks_deliver_and_claim_nothing
        ),
        check!(
            "paused: only the items in flight at the pause were delivered after it",
            paused_only_in_flight_delivered_after
        ),
        check!("a repeated pause is a no-op 200", repeated_pause_is_a_no_op),
        check!(
            "resumed: the batch finishes, every item completed after exactly one delivery",
            resumed_batch_finishes_each_item_delivered_once
        ),
    ];
    let cancel = vec![
        check!(needed "cancel mid-batch answers 200: status cancelled, nothing pending, the rest cancelled", cancel_mid_batch_answers_cancelled),
        check!(needed "cancelled: the batch ends cancelled once its items in flight committed; counts add up", cancelled_batch_ends_with_counts_adding_up),
        check!(
            "cancelled: only the items in flight at the cancel were delivered after it",
            cancelled_only_in_flight_delivered_after
        ),
        check!(
            "cancelled items were never delivered; completed ones exactly once",
            cancelled_items_never_delivered
        ),
        check!(
            "after the end: a tick delivers nothing, a repeated cancel is a no-op 200",
            ended_batch_ignores_ticks_and_repeated_cancel
        ),
        check!(
            "resume, pause and replay of a cancelled batch are 409 invalid_transition",
            cancelled_batch_refuses_resume_pause_replay
        ),
    ];
    let replay = vec![
        check!(needed "replay: one item, then the batch's other failures, requeued; the same replay again requeues nothing; the batch runs again", replay_requeues_failures_once),
        check!(needed "replay after the receivers were fixed: each failed item delivered exactly once more, completed; the batch finishes again", replayed_items_delivered_once_more),
        check!(
            "replaying a completed item is 409 invalid_transition",
            replaying_a_completed_item_is_refused
        ),
    ];
    for list in [pause, cancel, replay] {
        checks.run(&mut f, list).await;
    }
    if f.target.runtime.is_some() {
        let retention = vec![
            check!(needed "retention (RETENTION_DAYS=1): one tick deletes the batches that ended 2 days ago, their items and old summaries; the recent batch is whole", retention_deletes_old_batches_and_summaries),
            check!("item ids are never handed out again after retention deleted rows (AUTOINCREMENT on D1)", item_ids_not_reused_after_retention),
        ];
        checks.run(&mut f, retention).await;
    } else {
        println!("# retention skipped: --url mode cannot backdate rows or restart the Worker");
    }
    f.target.stop().await
}

/// The control part's Worker, and what its checks carry on for the next ones.
struct Control {
    target: Target,
    timeout: Duration,
    paused: Option<Paused>,
    cancelled: Option<Cancelled>,
    replayed: Option<Replayed>,
    /// The largest item id before retention deleted rows.
    max_id: Option<i64>,
}

/// The batch paused mid-way: the pause, the batch after the ticks while paused,
/// and every delivery the sink had by then.
struct Paused {
    pause: Interrupted,
    still: Option<Batch>,
    seen: Option<Vec<Delivery>>,
}

/// The batch cancelled mid-way: the cancel, the batch once it ended, and every
/// delivery the sink had by then.
struct Cancelled {
    cancel: Interrupted,
    ended: Option<Batch>,
    seen: Option<Vec<Delivery>>,
}

/// The batch whose failures were replayed: its first end, the items that failed
/// then, and its items once it finished again.
struct Replayed {
    id: Id,
    first: Batch,
    failed: Vec<Item>,
    items: Option<Vec<Item>>,
}

impl Control {
    fn paused(&self) -> Result<&Paused> {
        self.paused.as_ref().context("no paused batch")
    }

    fn cancelled(&self) -> Result<&Cancelled> {
        self.cancelled.as_ref().context("no cancelled batch")
    }

    fn replayed(&self) -> Result<&Replayed> {
        self.replayed.as_ref().context("no replayed batch")
    }
}

fn slow_receivers() -> Faults {
    Faults {
        latency_ms: MID_BATCH_LATENCY_MS,
        ..Faults::default()
    }
}

async fn pause_mid_batch_answers_paused(f: &mut Control) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let batch = webhook_batch(api, sink, "ctl-pause", MID_BATCH_ITEMS, &slow_receivers()).await?;
    let pause = interrupt(api, &batch, "pause", 25, f.timeout).await?;
    let answer = &f
        .paused
        .insert(Paused {
            pause,
            still: None,
            seen: None,
        })
        .pause
        .answer;
    ensure!(
        answer.status == "paused" && answer.pending > 0,
        "{}",
        answer.progress()
    );
    Ok(())
}

/// Two more ticks while paused: nothing of it is claimed.
async fn paused_ticks_deliver_and_claim_nothing(f: &mut Control) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let paused = f.paused.as_mut().context("no paused batch")?;
    let id = &paused.pause.batch.id;
    let frozen = api.batch(id).await?;
    let before = deliveries(sink).await?.len();
    api.fire_cron(TICK_CRON).await?;
    api.fire_cron(TICK_CRON).await?;
    let still = paused.still.insert(api.batch(id).await?);
    let all = paused.seen.insert(deliveries(sink).await?);
    ensure!(
        all.len() == before && still.pending == frozen.pending && still.status == "paused",
        "{} new deliveries; {} -> {}",
        all.len() - before,
        frozen.progress(),
        still.progress()
    );
    Ok(())
}

async fn paused_only_in_flight_delivered_after(f: &mut Control) -> Result<()> {
    let Paused { pause, seen, .. } = f.paused()?;
    let all = seen
        .as_ref()
        .context("no deliveries after the paused ticks")?;
    let by_item = verdict::deliveries_by_item(all, &pause.batch.id.0);
    let ours: Vec<&Delivery> = by_item.values().flatten().copied().collect();
    only_in_flight_after(&ours, pause.at, pause.answer.processing).map_err(anyhow::Error::msg)
}

async fn repeated_pause_is_a_no_op(f: &mut Control) -> Result<()> {
    let Paused { pause, still, .. } = f.paused()?;
    let still = still.as_ref().context("no paused batch after the ticks")?;
    let repeat = f.target.api.control(&pause.batch.id, "pause").await?;
    ensure!(
        repeat.status == "paused" && repeat.pending == still.pending,
        "{}",
        repeat.progress()
    );
    Ok(())
}

async fn resumed_batch_finishes_each_item_delivered_once(f: &mut Control) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let id = &f.paused()?.pause.batch.id;
    let resumed = api.control(id, "resume").await?;
    ensure!(
        resumed.status == "running",
        "resume: {}",
        resumed.progress()
    );
    let done = until_ended(api, id, f.timeout).await?;
    let (all, items) = outcome(api, sink, id).await?;
    let by_item = verdict::deliveries_by_item(&all, &id.0);
    verdict::batch_counts(&done, MID_BATCH_ITEMS as u64, MID_BATCH_ITEMS as u64, 0)
        .and_then(|()| cancelled_never_delivered(&items, &by_item))
        .map_err(anyhow::Error::msg)
}

async fn cancel_mid_batch_answers_cancelled(f: &mut Control) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let batch = webhook_batch(api, sink, "ctl-cancel", MID_BATCH_ITEMS, &slow_receivers()).await?;
    let cancel = interrupt(api, &batch, "cancel", 25, f.timeout).await?;
    let a = &f
        .cancelled
        .insert(Cancelled {
            cancel,
            ended: None,
            seen: None,
        })
        .cancel
        .answer;
    ensure!(
        a.status == "cancelled" && a.pending == 0 && a.cancelled > 0,
        "{}",
        a.progress()
    );
    Ok(())
}

async fn cancelled_batch_ends_with_counts_adding_up(f: &mut Control) -> Result<()> {
    let cancelled = f.cancelled.as_mut().context("no cancelled batch")?;
    let ended = until_ended(&f.target.api, &cancelled.cancel.batch.id, f.timeout).await?;
    ended_cancelled(cancelled.ended.insert(ended), MID_BATCH_ITEMS as u64)
        .map_err(anyhow::Error::msg)
}

async fn cancelled_only_in_flight_delivered_after(f: &mut Control) -> Result<()> {
    let cancelled = f.cancelled.as_mut().context("no cancelled batch")?;
    let all = cancelled.seen.insert(deliveries(&f.target.sink).await?);
    let cancel = &cancelled.cancel;
    let by_item = verdict::deliveries_by_item(all, &cancel.batch.id.0);
    let ours: Vec<&Delivery> = by_item.values().flatten().copied().collect();
    only_in_flight_after(&ours, cancel.at, cancel.answer.processing).map_err(anyhow::Error::msg)
}

async fn cancelled_items_never_delivered(f: &mut Control) -> Result<()> {
    let Cancelled { cancel, seen, .. } = f.cancelled()?;
    let all = seen
        .as_ref()
        .context("no deliveries once the batch ended")?;
    let by_item = verdict::deliveries_by_item(all, &cancel.batch.id.0);
    let items = f.target.api.all_items(&cancel.batch.id, None).await?;
    cancelled_never_delivered(&items, &by_item).map_err(anyhow::Error::msg)
}

async fn ended_batch_ignores_ticks_and_repeated_cancel(f: &mut Control) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let Cancelled {
        cancel,
        ended,
        seen,
    } = f.cancelled()?;
    let ended = ended.as_ref().context("no ended batch")?;
    let before = seen
        .as_ref()
        .context("no deliveries once the batch ended")?
        .len();
    api.fire_cron(TICK_CRON).await?;
    let again = api.control(&cancel.batch.id, "cancel").await?;
    ensure!(
        deliveries(sink).await?.len() == before && again.finished_at == ended.finished_at,
        "{} then {}",
        ended.progress(),
        again.progress()
    );
    Ok(())
}

async fn cancelled_batch_refuses_resume_pause_replay(f: &mut Control) -> Result<()> {
    let id = &f.cancelled()?.cancel.batch.id;
    let mut refused = Vec::new();
    for (path, body) in [
        (format!("/batches/{id}/resume"), None),
        (format!("/batches/{id}/pause"), None),
        (
            format!("/batches/{id}/retry"),
            Some(json!({"status": "failed"}).to_string()),
        ),
    ] {
        let r = f.target.api.admin_raw(Method::POST, &path, body).await?;
        if let Err(why) = r.refused(StatusCode::CONFLICT, "invalid_transition") {
            refused.push(format!("{path}: {why}"));
        }
    }
    summarize(refused, 3).map_err(anyhow::Error::msg)
}

async fn replay_requeues_failures_once(f: &mut Control) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let broken = Faults {
        status: Some(500),
        ..Faults::default()
    };
    let batch = webhook_batch(api, sink, "ctl-replay", REPLAY_ITEMS, &broken).await?;
    let first = until_ended(api, &batch.id, f.timeout).await?;
    ensure!(
        first.is_finished() && first.failed == REPLAY_ITEMS as u64,
        "the broken batch did not fail whole: {}",
        first.progress()
    );
    let failed = api.all_items(&batch.id, Some("failed")).await?;
    let subjects: Vec<String> = failed.iter().map(|i| i.subject_id.clone()).collect();
    sink.fix(&subjects).await?;
    let one = api.retry_item(failed[0].id).await?;
    let rest = api
        .retry_batch(&batch.id, &json!({"status": "failed"}))
        .await?;
    let again = api
        .retry_batch(&batch.id, &json!({"status": "failed"}))
        .await?;
    let reopened = api.batch(&batch.id).await?;
    f.replayed = Some(Replayed {
        id: batch.id,
        first,
        failed,
        items: None,
    });
    ensure!(
        (one, rest, again) == (1, REPLAY_ITEMS as u64 - 1, 0)
            && reopened.status == "running"
            && reopened.failed == 0
            && reopened.finished_at.is_none(),
        "requeued {one}, {rest}, {again}; {} {}",
        reopened.status,
        reopened.progress()
    );
    Ok(())
}

async fn replayed_items_delivered_once_more(f: &mut Control) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let grow = u32::try_from(f.target.setting("MAX_ATTEMPTS")?)?;
    let replayed = f.replayed.as_mut().context("no replayed batch")?;
    let id = &replayed.id;
    let done = until_ended(api, id, f.timeout).await?;
    let (all, items) = outcome(api, sink, id).await?;
    let by_item = verdict::deliveries_by_item(&all, &id.0);
    let items = replayed.items.insert(items);
    verdict::batch_counts(&done, REPLAY_ITEMS as u64, REPLAY_ITEMS as u64, 0)
        .and_then(|()| {
            if done.finished_at > replayed.first.finished_at {
                Ok(())
            } else {
                Err("finished_at did not move".into())
            }
        })
        .and_then(|()| replayed_once_more(&replayed.failed, items, &by_item, grow))
        .map_err(anyhow::Error::msg)
}

async fn replaying_a_completed_item_is_refused(f: &mut Control) -> Result<()> {
    let items = f
        .replayed()?
        .items
        .as_ref()
        .context("no items of the replayed batch")?;
    let r = f
        .target
        .api
        .admin_raw(Method::POST, &format!("/items/{}/retry", items[0].id), None)
        .await?;
    r.refused(StatusCode::CONFLICT, "invalid_transition")
        .map_err(anyhow::Error::msg)
}

/// Retention with the shortest setting, RETENTION_DAYS=1: the paused and the
/// cancelled batches ended two days ago (their `finished_at` backdated in D1,
/// with every invocation summary so far, the runtime stopped meanwhile), the
/// replayed one just now. One tick deletes the old batches with their items and
/// the old summaries, and nothing else.
async fn retention_deletes_old_batches_and_summaries(f: &mut Control) -> Result<()> {
    let old = [
        f.paused()?.pause.batch.id.clone(),
        f.cancelled()?.cancel.batch.id.clone(),
    ];
    let kept = f.replayed()?.id.clone();
    let api = f.target.api.clone();
    let kept_before = api.all_items(&kept, None).await?;
    let mut max_id = kept_before.iter().map(|i| i.id).max().unwrap_or(0);
    for id in &old {
        let items = api.all_items(id, None).await?;
        max_id = max_id.max(items.iter().map(|i| i.id).max().unwrap_or(0));
    }
    f.max_id = Some(max_id);
    let two_days = 2 * 86_400_000;
    let ids = old
        .iter()
        .map(|id| format!("'{}'", id.0))
        .collect::<Vec<_>>()
        .join(", ");
    let runtime = f.target.runtime.as_mut().context("no local runtime")?;
    runtime.stop().await?;
    runtime
        .config()
        .d1_execute(&format!(
            "UPDATE batches SET finished_at = finished_at - {two_days} WHERE id IN ({ids}); \
             UPDATE invocations SET started_at = started_at - {two_days};"
        ))
        .await?;
    runtime.set_var("RETENTION_DAYS", Some("1"));
    runtime.restart().await?;
    let started = Utc::now();
    api.fire_cron(TICK_CRON).await?;

    let mut wrong = Vec::new();
    for id in &old {
        let r = api
            .admin_raw(Method::GET, &format!("/batches/{}/items", id.0), None)
            .await?;
        if r.status != StatusCode::NOT_FOUND {
            wrong.push(format!("batch {id} is still there: {}", r.status));
        }
    }
    let kept_after = api.all_items(&kept, None).await?;
    if kept_after.len() != kept_before.len()
        || api.batch(&kept).await?.total != kept_before.len() as u64
    {
        wrong.push(format!("batch {kept} lost items"));
    }
    let cutoff = started - chrono::Duration::days(1);
    let invocations = api.invocations(1000).await?;
    let stale = invocations
        .iter()
        .filter(|i| i.summary.started_at < cutoff.timestamp_millis())
        .count();
    if stale > 0 || invocations.is_empty() {
        wrong.push(format!(
            "{stale} summaries older than a day left of {}",
            invocations.len()
        ));
    }
    summarize(wrong, 4).map_err(anyhow::Error::msg)
}

async fn item_ids_not_reused_after_retention(f: &mut Control) -> Result<()> {
    let max_id = f.max_id.context("no largest item id before retention")?;
    let api = &f.target.api;
    let fresh = webhook_batch(
        api,
        &f.target.sink,
        "ctl-after-retention",
        3,
        &Faults::default(),
    )
    .await?;
    let new_ids: Vec<i64> = api
        .all_items(&fresh.id, None)
        .await?
        .iter()
        .map(|i| i.id)
        .collect();
    ensure!(
        new_ids.iter().all(|id| *id > max_id),
        "new ids {new_ids:?}, largest before {max_id}"
    );
    Ok(())
}

// ---------------------------------------------------------------- `loadtest run` scenarios

/// Share of the items completed when the `cancel` scenario cancels its batch.
pub const CANCEL_AT_SHARE: f64 = 0.3;

/// The `cancel` and `replay` scenarios on seeded subjects (`plan`): an ad-hoc
/// batch over them, driven by ticks at `pace`; the report and its verdicts.
/// `known`: invocations that ran before this one.
pub async fn scenario(
    spec: &Spec,
    target: &mut Target,
    plan: &[Planned],
    known: &HashSet<i64>,
    pace: Pace,
) -> Result<RunReport> {
    let api = target.api.clone();
    let key = format!("{}-{}", spec.scenario.name(), Utc::now().timestamp_millis());
    // It calls back when it ends (each end, for the replay): checked below.
    let on_finish = target
        .sink
        .callback_url(spec.scenario.name(), &Faults::default());
    let (_, batch) = api
        .create_batch(&json!({"key": key, "source": "subjects", "on_finish": {"url": on_finish}}))
        .await?;
    ensure!(
        batch.total == plan.len() as u64,
        "batch has {} items",
        batch.total
    );
    let (driven, mut verdicts, ticks) = match spec.scenario {
        Scenario::Cancel => cancel_run(target, &batch, pace).await?,
        Scenario::Replay => replay_run(target, &batch, pace).await?,
        other => bail!("{} is not a batch-control scenario", other.name()),
    };
    let (all, items) = outcome(&api, &target.sink, &batch.id).await?;
    let by_item = verdict::deliveries_by_item(&all, &batch.id.0);
    let total = by_item.values().map(|d| d.len() as u64).sum::<u64>();
    let invocations = api.invocations_since(known).await?;
    verdicts.push(Verdict::new(
        "no invocation used more subrequests than its budget",
        verdict::within_budget(&invocations),
    ));
    let ours: Vec<&Invocation> = invocations.iter().collect();
    RunReport::build(
        Observed {
            spec,
            settings: &target.settings,
            batch: &driven,
            items: &items,
            invocations: &ours,
            deliveries: Some(Deliveries {
                total,
                per_item: metrics::ratio(total as f64, items.len() as f64),
                duplicates: verdict::duplicate_deliveries(&by_item),
            }),
            ticks,
            in_flight_at_kill: None,
        },
        verdicts,
    )
}

/// Cancels the batch once `CANCEL_AT_SHARE` of it completed, then ticks until it
/// ends.
async fn cancel_run(
    target: &Target,
    batch: &Batch,
    pace: Pace,
) -> Result<(Batch, Vec<Verdict>, u64)> {
    let api = &target.api;
    let at = (batch.total as f64 * CANCEL_AT_SHARE).ceil() as u64;
    let cancelled = interrupt(api, batch, "cancel", at, pace.timeout).await?;
    let driven = drive::until_finished(api, &cancelled.answer, pace, JoinSet::new()).await?;
    let called = until_called_back(api, &batch.id, pace.timeout).await?;
    let records = delivery::callbacks(&target.sink, &batch.id).await?;
    let (all, items) = outcome(api, &target.sink, &batch.id).await?;
    let by_item = verdict::deliveries_by_item(&all, &batch.id.0);
    let ours: Vec<&Delivery> = by_item.values().flatten().copied().collect();
    let verdicts = vec![
        Verdict::new(
            "the cancel answered: cancelled, nothing pending",
            if cancelled.answer.status == "cancelled" && cancelled.answer.pending == 0 {
                Ok(())
            } else {
                Err(cancelled.answer.progress())
            },
        ),
        Verdict::new(
            "the batch ended cancelled; completed + failed + cancelled = total",
            ended_cancelled(&driven.batch, batch.total),
        ),
        Verdict::new(
            "only the items in flight at the cancel were delivered after it",
            only_in_flight_after(&ours, cancelled.at, cancelled.answer.processing),
        ),
        Verdict::new(
            "cancelled items were never delivered; completed ones exactly once",
            cancelled_never_delivered(&items, &by_item),
        ),
        Verdict::new(
            "the batch called back once, status cancelled, with its counts",
            delivery::delivered_once(&called, &records, Some(1)).and_then(|ends| {
                match ends.as_slice() {
                    [s] if s.status == "cancelled" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }),
        ),
    ];
    Ok((driven.batch, verdicts, driven.ticks))
}

/// Drives the batch until it finishes with its poisoned items failed, fixes their
/// receivers, replays the failures and drives it to its second finish.
async fn replay_run(
    target: &Target,
    batch: &Batch,
    pace: Pace,
) -> Result<(Batch, Vec<Verdict>, u64)> {
    let api = &target.api;
    let first = drive::until_finished(api, batch, pace, JoinSet::new()).await?;
    // Its first end's callback goes out before the replay (a later end would
    // replace one still waiting).
    let first_call = until_called_back(api, &batch.id, pace.timeout).await?;
    let max_attempts = u32::try_from(target.setting("MAX_ATTEMPTS")?)?;
    let before = api.all_items(&batch.id, None).await?;
    let failed: Vec<Item> = before
        .iter()
        .filter(|i| i.status == "failed")
        .cloned()
        .collect();
    let subjects: Vec<String> = failed.iter().map(|i| i.subject_id.clone()).collect();
    target.sink.fix(&subjects).await?;
    let started = Instant::now();
    let requeued = api
        .retry_batch(&batch.id, &json!({"status": "failed"}))
        .await?;
    let replay_ms = started.elapsed().as_secs_f64() * 1000.0;
    let again = api
        .retry_batch(&batch.id, &json!({"status": "failed"}))
        .await?;
    eprintln!("replayed {requeued} failed items in {replay_ms:.0} ms; again: {again}");
    let reopened = api.batch(&batch.id).await?;
    let second = drive::until_finished(api, &reopened, pace, JoinSet::new()).await?;
    let second_call = until_called_back(api, &batch.id, pace.timeout).await?;
    let records = delivery::callbacks(&target.sink, &batch.id).await?;
    let (all, after) = outcome(api, &target.sink, &batch.id).await?;
    let by_item = verdict::deliveries_by_item(&all, &batch.id.0);
    let failed_keys: HashSet<i64> = failed.iter().map(|i| i.id).collect();
    let healthy_once: Vec<String> = after
        .iter()
        .filter(|i| !failed_keys.contains(&i.id))
        .filter_map(|i| {
            let n = by_item.get(&i.id.to_string()).map_or(0, Vec::len);
            (i.status != "completed" || n != 1)
                .then(|| format!("{}: {} after {n} deliveries", i.subject_id, i.status))
        })
        .collect();
    let verdicts = vec![
        Verdict::new(
            "first finish: the poisoned items failed after MAX_ATTEMPTS, the others completed",
            verdict::batch_counts(
                &first.batch,
                batch.total,
                batch.total - failed.len() as u64,
                failed.len() as u64,
            )
            .and_then(|()| {
                match failed.iter().find(|i| i.attempt != max_attempts) {
                    Some(i) => Err(format!("{} failed on attempt {}", i.subject_id, i.attempt)),
                    None if failed.is_empty() => Err("nothing failed to replay".into()),
                    None => Ok(()),
                }
            }),
        ),
        Verdict::new(
            "the replay requeued every failed item, a second one nothing; the batch ran again",
            if requeued == failed.len() as u64 && again == 0 && reopened.finished_at.is_none() {
                Ok(())
            } else {
                Err(format!(
                    "requeued {requeued} of {}, then {again}; {}",
                    failed.len(),
                    reopened.progress()
                ))
            },
        ),
        Verdict::new(
            "each replayed item was delivered exactly once more and completed; the batch finished again",
            verdict::batch_counts(&second.batch, batch.total, batch.total, 0)
                .and_then(|()| replayed_once_more(&failed, &after, &by_item, max_attempts)),
        ),
        Verdict::new(
            "the other items were delivered exactly once",
            summarize(healthy_once, after.len() - failed.len()),
        ),
        Verdict::new(
            "the batch called back once per end: with the failures, then (same Idempotency-Key, later finished_at) with none",
            delivery::delivered_once(&second_call, &records, Some(1)).and_then(|ends| {
                match ends.as_slice() {
                    [a, b] if a.finished_at.as_str() == first_call.finished_at.as_deref().unwrap_or_default()
                        && a.failed == failed.len() as u64
                        && b.failed == 0 => Ok(()),
                    other => Err(format!("{} ends: {other:?}", other.len())),
                }
            }),
        ),
    ];
    Ok((second.batch, verdicts, first.ticks + second.ticks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(key: &str, attempt: u32, at: &str, status: Option<u16>) -> Delivery {
        Delivery {
            status,
            received_at: at.into(),
            ..verdict::test_delivery(key, attempt)
        }
    }

    fn item(id: i64, status: &str, attempt: u32, max_attempts: u32) -> Item {
        Item {
            id,
            subject_id: format!("s{id}"),
            kind: "webhook".into(),
            status: status.into(),
            attempt,
            max_attempts,
            last_error: None,
            run_after: None,
            started_at: None,
            completed_at: None,
            receipts: None,
        }
    }

    fn batch(status: &str, completed: u64, cancelled: u64, finished: bool) -> Batch {
        Batch {
            id: Id("b".into()),
            key: Some("k".into()),
            status: status.into(),
            total: 10,
            pending: 0,
            processing: 0,
            completed,
            failed: 0,
            cancelled,
            percent: 100.0,
            rate_per_min: None,
            eta: None,
            created_at: "2026-11-21T12:00:00.000Z".into(),
            finished_at: finished.then(|| "2026-11-21T12:01:00.000Z".into()),
            schedule_id: None,
            on_finish: None,
            priority: 0,
            callback: None,
        }
    }

    #[test]
    fn only_deliveries_after_the_answer_count_against_the_items_in_flight() {
        let at = DateTime::parse_from_rfc3339("2026-11-21T12:00:00.500Z")
            .unwrap()
            .with_timezone(&Utc);
        let ds = [
            delivery("1", 1, "2026-11-21T12:00:00.100Z", Some(200)),
            delivery("2", 1, "2026-11-21T12:00:00.600Z", Some(200)),
            delivery("3", 1, "2026-11-21T12:00:01.000Z", Some(200)),
        ];
        let refs: Vec<&Delivery> = ds.iter().collect();
        assert_eq!(delivered_after(&refs, at), 2);
        assert!(only_in_flight_after(&refs, at, 2).is_ok());
        assert!(only_in_flight_after(&refs, at, 1).is_err());
    }

    #[test]
    fn a_cancelled_batch_must_have_ended_with_counts_that_add_up() {
        assert!(ended_cancelled(&batch("cancelled", 4, 6, true), 10).is_ok());
        assert!(ended_cancelled(&batch("cancelled", 4, 6, false), 10).is_err());
        assert!(ended_cancelled(&batch("cancelled", 4, 5, true), 10).is_err());
        assert!(ended_cancelled(&batch("finished", 10, 0, true), 10).is_err());
    }

    #[test]
    fn cancelled_items_have_no_delivery_completed_ones_one() {
        let items = [item(1, "completed", 1, 3), item(2, "cancelled", 0, 3)];
        let d1 = delivery("1", 1, "2026-11-21T12:00:00.100Z", Some(200));
        let d2 = delivery("2", 1, "2026-11-21T12:00:00.100Z", Some(200));
        let mut map: HashMap<String, Vec<&Delivery>> = HashMap::new();
        map.insert("1".into(), vec![&d1]);
        assert!(cancelled_never_delivered(&items, &map).is_ok());
        map.insert("2".into(), vec![&d2]);
        assert!(cancelled_never_delivered(&items, &map).is_err());
    }

    #[test]
    fn a_replayed_item_is_delivered_exactly_once_more() {
        let before = [item(1, "failed", 3, 3)];
        let after = [item(1, "completed", 4, 6)];
        let ds: Vec<Delivery> = (1..=4)
            .map(|a| {
                delivery(
                    "1",
                    a,
                    "2026-11-21T12:00:00.100Z",
                    Some(if a == 4 { 200 } else { 500 }),
                )
            })
            .collect();
        let mut map: HashMap<String, Vec<&Delivery>> = HashMap::new();
        map.insert("1".into(), ds.iter().collect());
        assert!(replayed_once_more(&before, &after, &map, 3).is_ok());
        assert!(replayed_once_more(&before, &after, &map, 2).is_err());
        map.insert("1".into(), ds.iter().take(3).collect());
        assert!(replayed_once_more(&before, &after, &map, 3).is_err());
    }
}
