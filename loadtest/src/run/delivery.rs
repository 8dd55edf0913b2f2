//! The `multi` scenario of `loadtest run` ([`scenario`]) and the pure verdicts of
//! delivery it shares with the e2e checks (`e2e::delivery`): completion callbacks
//! (one success per end of a batch), multi-channel items, invocation names.
//!
//! A callback is told apart by its `Idempotency-Key` (`batch:<id>:<finished_at>`,
//! one per end of a batch, the same for the retries of one end); a channel's
//! deliveries by theirs (`<item id>:<channel>`).

use crate::driver::drive;
use crate::driver::drive::until_called_back;
use crate::driver::plan::Planned;
use crate::driver::steps::RUN_SCHEDULE;
use crate::driver::target::Target;
use crate::run::report::{Deliveries, Observed, RunReport, Verdict};
use crate::run::scenario::Seeded;
use crate::runtime::api::{Batch, Id, Invocation, Item, SubjectIn, TICK_CRON};
use crate::sink::faults::Faults;
use crate::sink::{CallbackRecord, Delivery, SinkClient, Summary};
use crate::{driver::steps, driver::verdict, run::metrics, sink::signature};
use anyhow::{ensure, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use tokio::task::JoinSet;

// ---------------------------------------------------------------- pure verdicts

/// The callbacks of batch `id` (its Idempotency-Keys, `batch:<id>:…`), in arrival order.
pub fn callbacks_of<'a>(all: &'a [CallbackRecord], id: &Id) -> Vec<&'a CallbackRecord> {
    let prefix = format!("batch:{id}:");
    let mut of: Vec<&CallbackRecord> = all
        .iter()
        .filter(|c| {
            c.idempotency_key
                .as_deref()
                .is_some_and(|k| k.starts_with(&prefix))
        })
        .collect();
    of.sort_by_key(|c| c.seq);
    of
}

/// A callback's summary is the batch as the API shows it at its end.
pub fn summary_matches(s: &Summary, b: &Batch) -> Result<(), String> {
    let want = (
        b.id.0.as_str(),
        b.key.as_deref().unwrap_or_default(),
        b.status.as_str(),
        (b.total, b.completed, b.failed, b.cancelled),
        b.created_at.as_str(),
        b.finished_at.as_deref().unwrap_or_default(),
    );
    let got = (
        s.batch_id.as_str(),
        s.key.as_str(),
        s.status.as_str(),
        (s.total, s.completed, s.failed, s.cancelled),
        s.created_at.as_str(),
        s.finished_at.as_str(),
    );
    if got == want {
        Ok(())
    } else {
        Err(format!("summary {got:?}, batch {want:?}"))
    }
}

/// One end of a batch as its callbacks show it: the summary, and what each
/// delivery of it was answered.
pub type End = (Summary, Vec<Option<u16>>);

/// The `Idempotency-Key` of the end `s` reports: `batch:<id>:<finished_at>`.
pub fn end_key(s: &Summary) -> String {
    format!("batch:{}:{}", s.batch_id, s.finished_at)
}

/// Every callback signed, carrying the documented summary and its end's own
/// `Idempotency-Key` ([`end_key`]), and each end
/// (`finished_at`) received with exactly one 2xx answer, its last delivery (the
/// ones before it are retries of the same body). Returns each end's summary, in
/// order, with the statuses its deliveries were answered.
pub fn one_success_per_end(records: &[&CallbackRecord]) -> Result<Vec<End>, String> {
    let mut ends: Vec<End> = Vec::new();
    for c in records {
        if c.signature != signature::Verdict::Valid.as_str() {
            return Err(format!("callback #{} signature {}", c.seq, c.signature));
        }
        let Some(summary) = &c.summary else {
            return Err(format!("callback #{} body: {:?}", c.seq, c.error));
        };
        if c.idempotency_key.as_deref() != Some(end_key(summary).as_str()) {
            return Err(format!(
                "callback #{} Idempotency-Key {:?}, want {:?}",
                c.seq,
                c.idempotency_key,
                end_key(summary)
            ));
        }
        match ends.last_mut() {
            Some((s, statuses)) if s.finished_at == summary.finished_at => {
                if s != summary {
                    return Err(format!(
                        "a retry changed the summary: {s:?} then {summary:?}"
                    ));
                }
                statuses.push(c.status);
            }
            _ => ends.push((summary.clone(), vec![c.status])),
        }
    }
    for (s, statuses) in &ends {
        let ok = |st: &Option<u16>| st.is_some_and(|s| (200..300).contains(&s));
        if statuses.iter().filter(|st| ok(st)).count() != 1 || !statuses.last().is_some_and(ok) {
            return Err(format!(
                "the end at {} was answered {statuses:?} (want one 2xx, last)",
                s.finished_at
            ));
        }
    }
    Ok(ends)
}

/// How one channel of one item must have been delivered: which attempts of the
/// item sent it and what each was answered (`faults` decide per key and delivery
/// number, so this is exact; `None`: the delivery hung past the Worker's channel
/// deadline, which gave up on it as a transient failure and hung up, so the sink
/// never answered — `hang_ms` must outlast JOB_TIMEOUT_MS), and whether it ends
/// delivered.
pub fn expected_channel(faults: &Faults, key: &str, max_attempts: u32) -> (Vec<Option<u16>>, bool) {
    let mut answers = Vec::new();
    for n in 1..=max_attempts {
        if faults.hangs(n) {
            answers.push(None);
            continue;
        }
        let status = faults.decide(key, n).status;
        answers.push(Some(status));
        if (200..300).contains(&status) {
            return (answers, true);
        }
        if !matches!(status, 408 | 425 | 429 | 500..=599) {
            return (answers, false);
        }
    }
    (answers, false)
}

/// A multi-channel item ended as its channels' faults dictate: each channel sent
/// once per attempt until it was delivered (never after), its deliveries signed
/// and naming the channel; the item completed on the attempt its slowest channel
/// got through, or failed with every undelivered channel `failed` in its receipts.
pub fn multi_item_ok(
    item: &Item,
    channels: &[(String, Faults)],
    max_attempts: u32,
    by_key: &HashMap<String, Vec<&Delivery>>,
) -> Result<(), String> {
    let mut wrong = Vec::new();
    // Attempts run while any channel still needs one; a permanent failure of one
    // channel ends the item on that attempt.
    let expected: Vec<(&String, Vec<Option<u16>>, bool)> = channels
        .iter()
        .map(|(name, faults)| {
            let key = format!("{}:{name}", item.id);
            let (answers, delivered) = expected_channel(faults, &key, max_attempts);
            (name, answers, delivered)
        })
        .collect();
    let permanent_at = expected
        .iter()
        .filter(|(_, a, d)| !d && a.len() < max_attempts as usize)
        .map(|(_, a, _)| a.len())
        .min();
    let last_attempt =
        permanent_at.unwrap_or_else(|| expected.iter().map(|(_, a, _)| a.len()).max().unwrap_or(1));
    let completes = expected.iter().all(|(_, _, d)| *d);
    let (status, attempt) = if completes {
        ("completed", last_attempt as u32)
    } else {
        ("failed", last_attempt as u32)
    };
    if (item.status.as_str(), item.attempt) != (status, attempt) {
        wrong.push(format!(
            "{} on attempt {} (want {status} on {attempt})",
            item.status, item.attempt
        ));
    }
    for (name, answers, delivered) in &expected {
        let key = format!("{}:{name}", item.id);
        let sent = by_key.get(&key).map(Vec::as_slice).unwrap_or(&[]);
        // An item that ends early (a permanent failure elsewhere) stops sending.
        let want: Vec<Option<u16>> = answers.iter().copied().take(last_attempt).collect();
        let got: Vec<Option<u16>> = sent.iter().map(|d| d.status).collect();
        let want_attempts: Vec<Option<u32>> = (1..=want.len() as u32).map(Some).collect();
        if got != want || sent.iter().map(|d| d.attempt).collect::<Vec<_>>() != want_attempts {
            wrong.push(format!(
                "{name}: answered {got:?} on attempts {:?} (want {want:?})",
                sent.iter().map(|d| d.attempt).collect::<Vec<_>>()
            ));
        }
        if let Some(d) = sent
            .iter()
            .find(|d| d.signature != "valid" || d.channel.as_deref() != Some(name.as_str()))
        {
            wrong.push(format!(
                "{name}: delivery #{} signature {} channel {:?}",
                d.seq, d.signature, d.channel
            ));
        }
        let receipt = item
            .receipts
            .as_ref()
            .and_then(|r| r.get(name.as_str()))
            .and_then(|r| r.get("status"))
            .and_then(Value::as_str);
        // Delivered within the attempts the item made, or `failed` with it.
        let want_receipt = if *delivered && answers.len() <= last_attempt {
            "delivered"
        } else {
            "failed"
        };
        if receipt != Some(want_receipt) {
            wrong.push(format!("{name}: receipt {receipt:?} (want {want_receipt})"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("item {}: {}", item.subject_id, wrong.join("; ")))
    }
}

/// A callback whose delivery a kill interrupted: pending after the restart, then
/// delivered by a later attempt; every delivery signed with the same summary (the
/// batch's), one attempt counted per delivery, and the receiver answered exactly
/// one of them, the last (the interrupted one was abandoned unanswered: the
/// sink's handler dies with the connection, `a_callback_its_sender_abandons_is_never_answered`).
/// So the end is received once, however many times its bytes arrived.
pub fn killed_then_delivered(
    at_restart: &Batch,
    done: &Batch,
    records: &[CallbackRecord],
) -> Result<(), String> {
    let refs: Vec<&CallbackRecord> = records.iter().collect();
    let ends = one_success_per_end(&refs)?;
    let state = |b: &Batch| b.callback.as_ref().map(|c| (c.status.clone(), c.attempts));
    match (ends.as_slice(), state(at_restart), state(done)) {
        ([(summary, answers)], Some((before, _)), Some((after, attempts)))
            if before == "pending"
                && after == "delivered"
                && answers.len() >= 2
                && attempts as usize == answers.len() =>
        {
            summary_matches(summary, done)
        }
        (ends, before, after) => Err(format!(
            "{} ends {:?}; callback at restart {before:?}, at the end {after:?}",
            ends.len(),
            ends.iter().map(|(_, a)| a).collect::<Vec<_>>()
        )),
    }
}

fn summarize(wrong: Vec<String>, of: usize) -> Result<(), String> {
    if wrong.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = wrong.iter().take(5).cloned().collect();
    Err(format!("{} of {of}: {}", wrong.len(), shown.join("; ")))
}

/// Every request (`what` and its `Fanout-Invocation`, from the sink) names an
/// invocation that `GET /invocations` lists (`ours`) as a tick or drainer that
/// dispatched from batch `batch_id`.
pub fn named_by_invocations(
    requests: &[(String, Option<String>)],
    ours: &[Invocation],
    batch_id: &str,
) -> Result<(), String> {
    if requests.is_empty() {
        return Err("no requests".into());
    }
    let wrong: Vec<String> = requests
        .iter()
        .filter(|(_, id)| {
            !ours.iter().any(|i| {
                i.summary.invocation.is_some()
                    && i.summary.invocation == *id
                    && i.summary.tally.batch_ids.contains(batch_id)
            })
        })
        .map(|(what, id)| format!("{what}: {id:?}"))
        .collect();
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} name no invocation of the batch, e.g. {}",
            wrong.len(),
            requests.len(),
            wrong.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
        ))
    }
}

/// Every callback the sink received for batch `id`, in arrival order.
pub async fn callbacks(sink: &SinkClient, id: &Id) -> Result<Vec<CallbackRecord>> {
    let all = sink.stats(false).await?.callbacks;
    Ok(callbacks_of(&all, id).into_iter().cloned().collect())
}

/// The callback of `b` is delivered (after `attempts` tries, if given), each end
/// received once, the last one with `b`'s summary. Returns each end's summary.
pub fn delivered_once(
    b: &Batch,
    records: &[CallbackRecord],
    attempts: Option<u32>,
) -> Result<Vec<Summary>, String> {
    let refs: Vec<&CallbackRecord> = records.iter().collect();
    let ends = one_success_per_end(&refs)?;
    let cb = b.callback.clone().ok_or("no callback in the batch")?;
    let tries_ok = attempts.is_none_or(|n| cb.attempts == n);
    if cb.status != "delivered" || cb.last_error.is_some() || !tries_ok {
        return Err(format!(
            "callback {cb:?} (want delivered after {attempts:?})"
        ));
    }
    let last = ends.last().ok_or("no callback received")?;
    summary_matches(&last.0, b)?;
    Ok(ends.into_iter().map(|(s, _)| s).collect())
}

/// A multi-channel item to the sink: one URL per channel, each with its faults.
pub fn multi_item(sink: &SinkClient, subject: &str, channels: &[(String, Faults)]) -> Value {
    let channels: Vec<Value> = channels
        .iter()
        .map(|(name, faults)| {
            json!({"name": name, "url": sink.hook_url(&format!("{subject}-{name}"), faults)})
        })
        .collect();
    json!({"subject_id": subject, "kind": "multi",
           "payload": {"channels": channels, "data": {"subject": subject}}})
}

// ---------------------------------------------------------------- `loadtest run --scenario multi`

/// The channels of every item of the `multi` scenario: `email` and `sms`
/// healthy, `push` failing with the scenario's error rate (a transient 500 per
/// delivery, decided per key and delivery number).
pub fn scenario_channels(error_rate: f64) -> Vec<(String, Faults)> {
    vec![
        ("email".into(), Faults::default()),
        (
            "push".into(),
            Faults {
                error_rate,
                ..Faults::default()
            },
        ),
        ("sms".into(), Faults::default()),
    ]
}

/// The receiver of the scenario's completion callback fails once first.
fn scenario_callback() -> Faults {
    Faults {
        fail_first: 1,
        ..Faults::default()
    }
}

/// The `multi` subjects of the scenario (`plan`), channels to the sink.
pub fn subjects(sink: &SinkClient, plan: &[Planned], error_rate: f64) -> Vec<SubjectIn> {
    let channels = scenario_channels(error_rate);
    plan.iter()
        .map(|p| {
            let item = multi_item(sink, &p.id, &channels);
            SubjectIn {
                id: p.id.clone(),
                kind: "multi".into(),
                payload: item["payload"].clone(),
                active: true,
                group: None,
                timezone: None,
            }
        })
        .collect()
}

/// `loadtest run --scenario multi`: a one-off schedule with `on_finish` fires a
/// batch over the seeded multi-channel subjects (as `happy` does), driven to its
/// end and its callback; the report and its verdicts.
pub async fn scenario(target: &mut Target, seeded: Seeded<'_>) -> Result<RunReport> {
    let api = target.api.clone();
    let sink = target.sink.clone();
    let on_finish = json!({"on_finish": {"url": sink.callback_url("multi", &scenario_callback())}});
    let (_, key) = steps::one_off_now_with(&api, RUN_SCHEDULE, on_finish).await?;
    let mut running: JoinSet<Result<()>> = JoinSet::new();
    let first = api.clone();
    running.spawn(async move { first.fire_cron(TICK_CRON).await });
    let batch = steps::await_batch(&api, &key, &mut running, seeded.pace.timeout).await?;
    ensure!(
        batch.total == seeded.plan.len() as u64 && batch.on_finish.is_some(),
        "the schedule's batch: {} items, on_finish {:?}",
        batch.total,
        batch.on_finish
    );
    let driven = drive::until_finished(&api, &batch, seeded.pace, running).await?;
    let called = until_called_back(&api, &batch.id, seeded.pace.timeout).await?;
    let max_attempts = u32::try_from(target.setting("MAX_ATTEMPTS")?)?;
    let items = api.all_items(&batch.id, None).await?;
    let all = sink.deliveries().await?;
    // By Idempotency-Key: `<item id>:<channel>`, one group per channel.
    let by_key = verdict::deliveries_by_item(&all, &batch.id.0);
    let channels = scenario_channels(seeded.spec.error_rate);
    let wrong: Vec<String> = items
        .iter()
        .filter_map(|i| multi_item_ok(i, &channels, max_attempts, &by_key).err())
        .collect();
    let by_subject: HashMap<String, Item> = items
        .iter()
        .map(|i| (i.subject_id.clone(), i.clone()))
        .collect();
    // Only a 2xx counts as delivered: the retry of a send never answered is no
    // duplicate.
    let redelivered = verdict::deliveries_after_first(&by_key, |d| {
        d.status.is_some_and(|s| (200..300).contains(&s))
    });
    let failed = items.iter().filter(|i| i.status == "failed").count() as u64;
    let records = callbacks(&sink, &batch.id).await?;
    let mut verdicts = vec![
        Verdict::new(
            "nothing lost: one item per subject, each completed or failed",
            verdict::nothing_lost(seeded.plan, &by_subject),
        ),
        Verdict::new(
            "each item ended as its channels' faults dictate: every channel sent once per attempt until delivered, never after; receipts match",
            summarize(wrong, items.len()),
        ),
        Verdict::new(
            "no channel delivered twice",
            if redelivered == 0 {
                Ok(())
            } else {
                Err(format!("{redelivered} deliveries of channels already delivered"))
            },
        ),
        Verdict::new(
            "batch finished once, counts add up",
            verdict::batch_counts(&driven.batch, batch.total, batch.total - failed, failed),
        ),
        Verdict::new(
            "the completion callback, refused once, was received once with the batch's summary",
            delivered_once(&called, &records, Some(2)).map(|_| ()),
        ),
    ];
    let invocations = api.invocations_since(seeded.known).await?;
    verdicts.push(Verdict::new(
        "no invocation used more subrequests than its budget",
        verdict::within_budget(&invocations),
    ));
    let ours_inv: Vec<&Invocation> = invocations.iter().collect();
    let total = by_key.values().map(Vec::len).sum::<usize>() as u64;
    RunReport::build(
        Observed {
            spec: seeded.spec,
            settings: &target.settings,
            batch: &driven.batch,
            items: &items,
            invocations: &ours_inv,
            deliveries: Some(Deliveries {
                total,
                per_item: metrics::ratio(total as f64, items.len() as f64),
                duplicates: redelivered,
            }),
            ticks: driven.ticks,
            in_flight_at_kill: None,
        },
        verdicts,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invocation(id: Option<&str>, batch: &str) -> Invocation {
        let mut i = verdict::test_invocation();
        i.summary.invocation = id.map(str::to_string);
        i.summary.tally.batch_ids = [batch.to_string()].into();
        i
    }

    #[test]
    fn a_request_must_name_an_invocation_that_dispatched_from_its_batch() {
        let ours = [invocation(Some("t1"), "b"), invocation(Some("t2"), "other")];
        let req = |id: Option<&str>| vec![("s".to_string(), id.map(str::to_string))];
        assert!(named_by_invocations(&req(Some("t1")), &ours, "b").is_ok());
        // Another batch's invocation, an unknown id, no header, nothing at all.
        assert!(named_by_invocations(&req(Some("t2")), &ours, "b").is_err());
        assert!(named_by_invocations(&req(Some("t9")), &ours, "b").is_err());
        assert!(named_by_invocations(&req(None), &ours, "b").is_err());
        assert!(named_by_invocations(&[], &ours, "b").is_err());
        // A summary stored without an id names nothing, not even a missing header.
        assert!(named_by_invocations(&req(None), &[invocation(None, "b")], "b").is_err());
    }

    fn summary(finished_at: &str, failed: u64) -> Summary {
        Summary {
            batch_id: "b".into(),
            key: "k".into(),
            status: "finished".into(),
            total: 3,
            completed: 3 - failed,
            failed,
            cancelled: 0,
            created_at: "2026-11-21T12:00:00.000Z".into(),
            finished_at: finished_at.into(),
        }
    }

    fn record(seq: u64, s: Summary, status: Option<u16>) -> CallbackRecord {
        CallbackRecord {
            seq,
            name: "cb".into(),
            idempotency_key: Some(end_key(&s)),
            delivery_no: seq as u32 + 1,
            signature: "valid".into(),
            summary: Some(s),
            status,
            received_at: "2026-11-21T12:01:00.000Z".into(),
            error: None,
            invocation: None,
        }
    }

    #[test]
    fn each_end_needs_exactly_one_success_and_it_comes_last() {
        let a = summary("2026-11-21T12:01:00.000Z", 1);
        let b = summary("2026-11-21T12:05:00.000Z", 0);
        let ok = [
            record(0, a.clone(), Some(503)),
            record(1, a.clone(), Some(200)),
            record(2, b.clone(), None),
            record(3, b.clone(), Some(204)),
        ];
        let refs: Vec<&CallbackRecord> = ok.iter().collect();
        let ends = one_success_per_end(&refs).unwrap();
        assert_eq!(ends.len(), 2);
        assert_eq!(ends[1].1, [None, Some(204)]);
        for bad in [
            vec![
                record(0, a.clone(), Some(200)),
                record(1, a.clone(), Some(200)),
            ],
            vec![
                record(0, a.clone(), Some(200)),
                record(1, a.clone(), Some(503)),
            ],
            vec![record(0, a.clone(), Some(503))],
        ] {
            let refs: Vec<&CallbackRecord> = bad.iter().collect();
            assert!(one_success_per_end(&refs).is_err(), "{bad:?}");
        }
        // The first end's key on the second end's summary: what a replayed batch
        // sent before each end had its own key.
        let mut stale_key = record(1, b.clone(), Some(200));
        stale_key.idempotency_key = Some(end_key(&a));
        let stale = [record(0, a.clone(), Some(200)), stale_key];
        let refs: Vec<&CallbackRecord> = stale.iter().collect();
        assert!(one_success_per_end(&refs)
            .unwrap_err()
            .contains("Idempotency-Key"));
        let mut unsigned = record(0, a.clone(), Some(200));
        unsigned.signature = "mismatch".into();
        assert!(one_success_per_end(&[&unsigned]).is_err());
        let changed = [
            record(0, a.clone(), Some(503)),
            record(1, summary(&a.finished_at, 0), Some(200)),
        ];
        let refs: Vec<&CallbackRecord> = changed.iter().collect();
        assert!(one_success_per_end(&refs).unwrap_err().contains("changed"));
    }

    /// The summary's batch with its callback in `state` after `attempts` tries.
    fn ended(state: &str, attempts: u32) -> Batch {
        let s = summary("2026-11-21T12:01:00.000Z", 0);
        Batch {
            id: Id(s.batch_id),
            key: Some(s.key),
            status: s.status,
            total: s.total,
            pending: 0,
            processing: 0,
            completed: s.completed,
            failed: s.failed,
            cancelled: s.cancelled,
            percent: 100.0,
            rate_per_min: None,
            eta: None,
            created_at: s.created_at,
            finished_at: Some(s.finished_at),
            schedule_id: None,
            on_finish: Some(json!({"url": "https://cb.example/x"})),
            priority: 0,
            callback: Some(crate::runtime::api::Callback {
                status: state.into(),
                attempts,
                last_error: None,
            }),
        }
    }

    #[test]
    fn a_kill_mid_callback_is_received_once_if_the_interrupted_delivery_went_unanswered() {
        let s = summary("2026-11-21T12:01:00.000Z", 0);
        let at_restart = ended("pending", 1);
        let interrupted = [record(0, s.clone(), None), record(1, s.clone(), Some(200))];
        assert_eq!(
            killed_then_delivered(&at_restart, &ended("delivered", 2), &interrupted),
            Ok(())
        );
        // The receiver answered both: received twice.
        let twice = [
            record(0, s.clone(), Some(200)),
            record(1, s.clone(), Some(200)),
        ];
        assert!(killed_then_delivered(&at_restart, &ended("delivered", 2), &twice).is_err());
        // No retry after the restart (the kill missed the delivery).
        let once = [record(0, s.clone(), Some(200))];
        assert!(killed_then_delivered(&at_restart, &ended("delivered", 1), &once).is_err());
        // Delivered before the restart, or an attempt not counted.
        assert!(killed_then_delivered(
            &ended("delivered", 2),
            &ended("delivered", 2),
            &interrupted
        )
        .is_err());
        assert!(killed_then_delivered(&at_restart, &ended("delivered", 3), &interrupted).is_err());
        // A summary that is not the batch's.
        let other = summary("2026-11-21T12:01:00.000Z", 1);
        let wrong = [record(0, other.clone(), None), record(1, other, Some(200))];
        assert!(killed_then_delivered(&at_restart, &ended("delivered", 2), &wrong).is_err());
    }

    #[test]
    fn a_channel_is_sent_until_delivered_or_refused() {
        let twice = Faults {
            fail_first: 2,
            ..Faults::default()
        };
        assert_eq!(
            expected_channel(&twice, "1:push", 3),
            (vec![Some(503), Some(503), Some(200)], true)
        );
        assert_eq!(
            expected_channel(&twice, "1:push", 2),
            (vec![Some(503), Some(503)], false)
        );
        // A hang is a transient failure the sink never answers.
        let hangs_twice = Faults {
            hang_ms: 3_000,
            hang_first: 2,
            ..Faults::default()
        };
        assert_eq!(
            expected_channel(&hangs_twice, "1:push", 3),
            (vec![None, None, Some(200)], true)
        );
        let hangs = Faults {
            hang_ms: 3_000,
            ..Faults::default()
        };
        assert_eq!(
            expected_channel(&hangs, "1:push", 2),
            (vec![None, None], false)
        );
        let gone = Faults {
            status: Some(400),
            ..Faults::default()
        };
        assert_eq!(
            expected_channel(&gone, "1:push", 3),
            (vec![Some(400)], false)
        );
        assert_eq!(
            expected_channel(&Faults::default(), "1:email", 3),
            (vec![Some(200)], true)
        );
    }
}
