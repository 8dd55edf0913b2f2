//! The `cancel` and `replay` scenarios of `loadtest run` ([`scenario`]) and the
//! pure verdicts of batch control they share with the e2e checks
//! (`e2e::control`): what may arrive after a pause or cancel, a replay's
//! deliveries, the interruption of a running batch.
//!
//! "After a request" is measured on one clock: the sink stamps each delivery when
//! it arrives, and the request's answer is stamped when it comes back, both on
//! this machine.

use crate::driver::drive::{self, until_called_back, Pace};
use crate::driver::target::Target;
use crate::run::report::{Deliveries, Observed, RunReport, Verdict};
use crate::run::scenario::{Scenario, Seeded};
use crate::runtime::api::{Api, Batch, Id, Invocation, Item};
use crate::sink::faults::Faults;
use crate::sink::{Delivery, SinkClient};
use crate::{driver::verdict, run::delivery, run::metrics};
use anyhow::{bail, ensure, Result};
use chrono::{DateTime, Utc};
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

pub fn summarize(wrong: Vec<String>, of: usize) -> Result<(), String> {
    if wrong.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = wrong.iter().take(5).cloned().collect();
    Err(format!("{} of {of}: {}", wrong.len(), shown.join("; ")))
}

// ---------------------------------------------------------------- flows

/// What a batch left behind: every delivery the sink recorded, and its items.
pub async fn outcome(api: &Api, sink: &SinkClient, id: &Id) -> Result<(Vec<Delivery>, Vec<Item>)> {
    Ok((sink.deliveries().await?, api.all_items(id, None).await?))
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

// ---------------------------------------------------------------- `loadtest run` scenarios

/// Share of the items completed when the `cancel` scenario cancels its batch.
pub const CANCEL_AT_SHARE: f64 = 0.3;

/// The `cancel` and `replay` scenarios on the seeded subjects: an ad-hoc batch
/// over them, driven by ticks at the run's pace; the report and its verdicts.
pub async fn scenario(target: &mut Target, seeded: Seeded<'_>) -> Result<RunReport> {
    let api = target.api.clone();
    let key = format!(
        "{}-{}",
        seeded.spec.scenario.name(),
        Utc::now().timestamp_millis()
    );
    // It calls back when it ends (each end, for the replay): checked below.
    let on_finish = target
        .sink
        .callback_url(seeded.spec.scenario.name(), &Faults::default());
    let (_, batch) = api
        .create_batch(&json!({"key": key, "source": "subjects", "on_finish": {"url": on_finish}}))
        .await?;
    ensure!(
        batch.total == seeded.plan.len() as u64,
        "batch has {} items",
        batch.total
    );
    let (driven, mut verdicts, ticks) = match seeded.spec.scenario {
        Scenario::Cancel => cancel_run(target, &batch, seeded.pace).await?,
        Scenario::Replay => replay_run(target, &batch, seeded.pace).await?,
        other => bail!("{} is not a batch-control scenario", other.name()),
    };
    let (all, items) = outcome(&api, &target.sink, &batch.id).await?;
    let by_item = verdict::deliveries_by_item(&all, &batch.id.0);
    let total = by_item.values().map(|d| d.len() as u64).sum::<u64>();
    let invocations = api.invocations_since(seeded.known).await?;
    verdicts.push(Verdict::new(
        "no invocation used more subrequests than its budget",
        verdict::within_budget(&invocations),
    ));
    let ours: Vec<&Invocation> = invocations.iter().collect();
    RunReport::build(
        Observed {
            spec: seeded.spec,
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
