//! Batch control end to end: pause, resume, cancel, dead-letter
//! replay and retention against a real Worker and sink, the e2e checks
//! ([`e2e`]); the pure verdicts they share with the `cancel` and `replay`
//! scenarios of `loadtest run` are in `run::control`.
//!
//! "After a request" is measured on one clock: the sink stamps each delivery when
//! it arrives, and the request's answer is stamped when it comes back, both on
//! this machine.

use crate::check;
use crate::driver::checks::{text, Checks};
use crate::driver::drive::until_ended;
use crate::driver::steps::webhook_batch;
use crate::driver::target::{Target, TargetArgs};
use crate::run::control::{
    cancelled_never_delivered, ended_cancelled, interrupt, only_in_flight_after, outcome,
    replayed_once_more, summarize, Interrupted,
};
use crate::runtime::api::{Batch, Id, Item, TICK_CRON};
use crate::runtime::openapi;
use crate::sink::faults::Faults;
use crate::sink::Delivery;
use crate::{driver::verdict, e2e::suite};
use anyhow::{ensure, Context, Result};
use chrono::Utc;
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::time::Duration;

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
    let served = f
        .target
        .api
        .raw(Method::GET, "/openapi.json", None, None)
        .await;
    checks.record(
        "GET /openapi.json without a token serves src/api/openapi.json",
        served.map_err(text).and_then(|r| {
            openapi::served_is_the_document(r.status.as_u16(), r.header("Content-Type"), &r.body)
        }),
    );
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
    let before = sink.deliveries().await?.len();
    api.fire_cron(TICK_CRON).await?;
    api.fire_cron(TICK_CRON).await?;
    let still = paused.still.insert(api.batch(id).await?);
    let all = paused.seen.insert(sink.deliveries().await?);
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
    let all = cancelled.seen.insert(f.target.sink.deliveries().await?);
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
        sink.deliveries().await?.len() == before && again.finished_at == ended.finished_at,
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
