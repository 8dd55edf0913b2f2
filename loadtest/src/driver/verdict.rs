//! Pure checks of what the Worker did, computed from API reads and sink records.
//! Each returns `Err(why)` with enough detail to start debugging from the CI log.

use crate::driver::plan::{Expect, Planned};
use crate::runtime::api::{Batch, Invocation, Item};
use crate::sink::Delivery;
use std::collections::HashMap;

/// Sink records grouped by Idempotency-Key (the item id as text, or
/// `<item id>:<channel>` for a channel of a `multi` item), each group in arrival
/// order. Only deliveries whose body names `batch_id` are kept.
pub fn deliveries_by_item<'a>(
    deliveries: &'a [Delivery],
    batch_id: &str,
) -> HashMap<String, Vec<&'a Delivery>> {
    let mut map: HashMap<String, Vec<&Delivery>> = HashMap::new();
    for d in deliveries
        .iter()
        .filter(|d| d.batch_id.as_deref() == Some(batch_id))
    {
        map.entry(d.idempotency_key.clone().unwrap_or_default())
            .or_default()
            .push(d);
    }
    for list in map.values_mut() {
        list.sort_by_key(|d| d.seq);
    }
    map
}

/// Whether one item ended as its subject's webhook dictates.
pub fn item_outcome(
    expect: Expect,
    max_attempts: u32,
    item: &Item,
    deliveries: &[&Delivery],
) -> Result<(), String> {
    let error = item
        .last_error
        .as_deref()
        .unwrap_or("")
        .to_ascii_lowercase();
    let (status, attempt, error_has): (&str, u32, &[&str]) = match expect {
        Expect::Healthy => ("completed", 1, &[]),
        Expect::FailFirst(n) => ("completed", n + 1, &[]),
        Expect::ServerError => ("failed", max_attempts, &["500"]),
        Expect::ClientError => ("failed", 1, &["400"]),
        Expect::Hang => ("failed", max_attempts, &["timeout", "timed out"]),
        Expect::Redirect => ("failed", 1, &["redirects are not followed"]),
        Expect::Any => return Ok(()),
    };
    let mut wrong = Vec::new();
    if item.status != status {
        wrong.push(format!("status {} (want {status})", item.status));
    }
    if item.attempt != attempt {
        wrong.push(format!("attempt {} (want {attempt})", item.attempt));
    }
    if !error_has.is_empty() && !error_has.iter().any(|s| error.contains(s)) {
        wrong.push(format!(
            "last_error {:?} (want it to mention {})",
            item.last_error,
            error_has.join(" or ")
        ));
    }
    // One delivery per attempt, carrying that attempt number, in order.
    let seen: Vec<Option<u32>> = deliveries.iter().map(|d| d.attempt).collect();
    let want: Vec<Option<u32>> = (1..=attempt).map(Some).collect();
    if seen != want {
        wrong.push(format!("delivered attempts {seen:?} (want {want:?})"));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join(", "))
    }
}

/// `item_outcome` over every planned subject with expectation `kind`.
pub fn outcomes_of_kind(
    plan: &[Planned],
    kind: Expect,
    max_attempts: u32,
    items: &HashMap<String, Item>,
    deliveries: &HashMap<String, Vec<&Delivery>>,
) -> Result<(), String> {
    let mut failures = Vec::new();
    let mut n = 0;
    for p in plan.iter().filter(|p| p.expect == kind) {
        n += 1;
        let result = match items.get(&p.id) {
            None => Err("no item in the batch".to_string()),
            Some(item) => {
                let ds = deliveries
                    .get(&item.id.to_string())
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                item_outcome(kind, max_attempts, item, ds)
            }
        };
        if let Err(why) = result {
            failures.push(format!("{}: {why}", p.id));
        }
    }
    if n == 0 {
        return Err(format!("the plan has no {} subject", kind.label()));
    }
    summarize(failures, n)
}

/// Every delivery of the batch is signed, keyed by its item id, and names the
/// subject its URL belongs to.
/// Every delivery carried its subject's `data` exactly: `expected` maps subject id
/// to the digest of the data it was given (`sink::data_digest`).
pub fn data_intact(
    expected: &HashMap<String, String>,
    deliveries: &[&Delivery],
) -> Result<(), String> {
    if deliveries.is_empty() {
        return Err("no deliveries to check".into());
    }
    let wrong: Vec<String> = deliveries
        .iter()
        .filter(|d| expected.get(&d.subject_id) != d.data_sha256.as_ref())
        .map(|d| {
            format!(
                "seq {} ({}) carried other data than its subject's",
                d.seq, d.subject_id
            )
        })
        .collect();
    summarize(wrong, deliveries.len())
}

pub fn deliveries_well_formed(deliveries: &[&Delivery]) -> Result<(), String> {
    let failures: Vec<String> = deliveries
        .iter()
        .filter_map(|d| {
            let mut wrong = Vec::new();
            if d.signature != "valid" {
                wrong.push(format!("signature {}", d.signature));
            }
            if d.idempotency_key != d.item_id.map(|id| id.to_string()) {
                wrong.push(format!(
                    "Idempotency-Key {:?} but item_id {:?}",
                    d.idempotency_key, d.item_id
                ));
            }
            if d.body_subject_id.as_deref() != Some(d.subject_id.as_str()) {
                wrong.push(format!("body subject_id {:?}", d.body_subject_id));
            }
            if let Some(e) = &d.error {
                wrong.push(format!("refused: {e}"));
            }
            (!wrong.is_empty()).then(|| {
                format!(
                    "delivery #{} to {}: {}",
                    d.seq,
                    d.subject_id,
                    wrong.join(", ")
                )
            })
        })
        .collect();
    if deliveries.is_empty() {
        return Err("no deliveries at all".into());
    }
    summarize(failures, deliveries.len())
}

/// The batch is finished and its counts add up to the expected totals.
pub fn batch_counts(b: &Batch, total: u64, completed: u64, failed: u64) -> Result<(), String> {
    let mut wrong = Vec::new();
    if b.pending + b.processing + b.completed + b.failed != b.total {
        wrong.push("pending+processing+completed+failed != total".to_string());
    }
    if (b.total, b.completed, b.failed) != (total, completed, failed) {
        wrong.push(format!(
            "want total {total} completed {completed} failed {failed}"
        ));
    }
    if (b.percent - 100.0).abs() > 1e-9 {
        wrong.push("percent is not 100".into());
    }
    if !b.is_finished() || b.finished_at.is_none() {
        wrong.push("not marked finished with finished_at".into());
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}: total {} {}",
            wrong.join("; "),
            b.total,
            b.progress()
        ))
    }
}

/// A D1 cost per item (`what`: "rows written", "statements") within `max`.
pub fn cost_per_item(what: &str, got: Option<f64>, max: f64) -> Result<(), String> {
    match got {
        Some(v) if v <= max => Ok(()),
        Some(v) => Err(format!("{v:.3} {what} per item, more than {max}")),
        None => Err(format!("no item to count {what} per")),
    }
}

/// No invocation used more subrequests than its budget.
pub fn within_budget(invocations: &[Invocation]) -> Result<(), String> {
    if invocations.is_empty() {
        return Err("GET /invocations lists no invocation".into());
    }
    let over: Vec<String> = invocations
        .iter()
        .filter(|i| i.summary.subrequests > i.summary.subrequest_budget)
        .map(|Invocation { id, summary: i }| {
            format!(
                "invocation {id} ({}): {} subrequests > budget {}",
                i.trigger.as_str(),
                i.subrequests,
                i.subrequest_budget
            )
        })
        .collect();
    summarize(over, invocations.len())
}

/// No invocation dispatched more than `cap` items (claimed, less those given back
/// unrun), and at least one stopped at the cap: the batch needed later ticks.
pub fn within_child_cap(invocations: &[Invocation], cap: i64) -> Result<(), String> {
    use cron_fanout::core::model::StopReason;
    let over: Vec<String> = invocations
        .iter()
        .filter(|i| i.summary.tally.claimed - i.summary.tally.released > cap)
        .map(|Invocation { id, summary: i }| {
            format!(
                "invocation {id}: {} claimed, {} given back: over the cap of {cap}",
                i.tally.claimed, i.tally.released
            )
        })
        .collect();
    summarize(over, invocations.len())?;
    if !invocations
        .iter()
        .any(|i| i.summary.stop_reason == StopReason::ChildCap)
    {
        return Err(format!(
            "none of {} invocations stopped at the cap of {cap}",
            invocations.len()
        ));
    }
    Ok(())
}

/// After a crash and recovery: nothing lost, everyone notified, and duplicates
/// bounded by the leases that were live when the runtime died.
pub fn crash_recovery(
    plan: &[Planned],
    items: &HashMap<String, Item>,
    deliveries: &HashMap<String, Vec<&Delivery>>,
    processing_at_kill: u64,
) -> Vec<(&'static str, Result<(), String>)> {
    let not_completed: Vec<String> = plan
        .iter()
        .filter_map(|p| match items.get(&p.id) {
            None => Some(format!("{}: missing", p.id)),
            Some(i) if i.status != "completed" => {
                Some(format!("{}: {} ({:?})", p.id, i.status, i.last_error))
            }
            Some(_) => None,
        })
        .collect();
    let undelivered: Vec<String> = plan
        .iter()
        .filter(|p| {
            items
                .get(&p.id)
                .is_none_or(|i| deliveries.get(&i.id.to_string()).is_none_or(Vec::is_empty))
        })
        .map(|p| p.id.clone())
        .collect();
    let duplicates = duplicate_deliveries(deliveries);
    vec![
        (
            "crash: no item lost, all completed",
            summarize(not_completed, plan.len()),
        ),
        (
            "crash: every subject got at least one delivery",
            summarize(undelivered, plan.len()),
        ),
        (
            "crash: duplicate deliveries <= items in flight at the kill",
            if duplicates <= processing_at_kill {
                Ok(())
            } else {
                Err(format!(
                    "{duplicates} duplicates > {processing_at_kill} processing at the kill"
                ))
            },
        ),
    ]
}

/// Deliveries that came after one the receiver may have acted on (answered 2xx,
/// or never answered because the Worker hung up or died): redeliveries of
/// something already done, not retries of something that failed.
pub fn duplicate_deliveries(deliveries: &HashMap<String, Vec<&Delivery>>) -> u64 {
    deliveries_after_first(deliveries, |d| {
        d.status.is_none_or(|s| (200..300).contains(&s))
    })
}

/// How many deliveries came after each item's first one that `done` accepts,
/// summed over the items (each list in delivery order).
pub fn deliveries_after_first(
    deliveries: &HashMap<String, Vec<&Delivery>>,
    done: impl Fn(&Delivery) -> bool,
) -> u64 {
    deliveries
        .values()
        .map(|list| {
            let first = list.iter().position(|d| done(d));
            first.map_or(0, |i| (list.len() - i - 1) as u64)
        })
        .sum()
}

/// Every planned subject has an item and every item ended (completed or failed).
pub fn nothing_lost(plan: &[Planned], items: &HashMap<String, Item>) -> Result<(), String> {
    let lost: Vec<String> = plan
        .iter()
        .filter_map(|p| match items.get(&p.id) {
            None => Some(format!("{}: no item", p.id)),
            Some(i) if i.status != "completed" && i.status != "failed" => {
                Some(format!("{}: still {}", p.id, i.status))
            }
            Some(_) => None,
        })
        .collect();
    summarize(lost, plan.len())
}

/// Each item ended as its webhook's faults dictate (`Expect::from_faults`), with
/// one delivery per attempt.
pub fn outcomes_match_faults(
    plan: &[Planned],
    max_attempts: u32,
    items: &HashMap<String, Item>,
    deliveries: &HashMap<String, Vec<&Delivery>>,
) -> Result<(), String> {
    let failures: Vec<String> = plan
        .iter()
        .filter_map(|p| {
            let item = items.get(&p.id)?;
            let key = item.id.to_string();
            let expect = Expect::from_faults(&p.faults, &key, max_attempts);
            let ds = deliveries.get(&key).map(Vec::as_slice).unwrap_or(&[]);
            item_outcome(expect, max_attempts, item, ds)
                .err()
                .map(|why| format!("{} ({}): {why}", p.id, expect.label()))
        })
        .collect();
    summarize(failures, plan.len())
}

/// `noop` items: completed on attempt 1.
pub fn noop_outcomes(items: &HashMap<String, Item>) -> Result<(), String> {
    let wrong: Vec<String> = items
        .values()
        .filter(|i| i.status != "completed" || i.attempt != 1)
        .map(|i| {
            format!(
                "{}: {} on attempt {} ({:?})",
                i.subject_id, i.status, i.attempt, i.last_error
            )
        })
        .collect();
    summarize(wrong, items.len())
}

/// `Err` listing up to five failures out of `n`.
fn summarize(failures: Vec<String>, n: usize) -> Result<(), String> {
    if failures.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = failures.iter().take(5).map(String::as_str).collect();
    let more = if failures.len() > 5 {
        format!("; and {} more", failures.len() - 5)
    } else {
        String::new()
    };
    Err(format!(
        "{} of {n} wrong: {}{more}",
        failures.len(),
        shown.join("; ")
    ))
}

/// For tests: the signed delivery of item `key` (subject `s` of batch `b`) on
/// attempt `attempt`, answered 200.
#[cfg(test)]
pub fn test_delivery(key: &str, attempt: u32) -> Delivery {
    Delivery {
        seq: 0,
        subject_id: "s".into(),
        idempotency_key: Some(key.into()),
        delivery_no: attempt,
        item_id: key.parse().ok(),
        batch_id: Some("b".into()),
        body_subject_id: Some("s".into()),
        attempt: Some(attempt),
        channel: None,
        data_sha256: None,
        signature: "valid".into(),
        status: Some(200),
        received_at: "2026-01-01T00:00:00.000Z".into(),
        error: None,
        invocation: None,
    }
}

/// For tests: invocation 1, a tick that drained with nothing counted, within a
/// budget of 200 subrequests.
#[cfg(test)]
pub fn test_invocation() -> Invocation {
    use cron_fanout::core::model::{InvocationSummary, StopReason, Tally, Trigger};
    Invocation {
        id: 1,
        summary: InvocationSummary {
            invocation: None,
            trigger: Trigger::Tick,
            started_at: 0,
            elapsed_ms: 1,
            tally: Tally::default(),
            subrequests: 0,
            subrequest_budget: 200,
            d1_statements: 0,
            d1_rows_written: 0,
            d1_rows_read: Some(0),
            stop_reason: StopReason::Drained,
            drainer: None,
            chain: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::api::Id;
    use cron_fanout::core::model::StopReason;

    fn item(status: &str, attempt: u32, last_error: Option<&str>) -> Item {
        Item {
            id: 1,
            subject_id: "s".into(),
            kind: "webhook".into(),
            status: status.into(),
            attempt,
            max_attempts: 3,
            last_error: last_error.map(str::to_string),
            run_after: None,
            started_at: None,
            completed_at: None,
            receipts: None,
        }
    }

    fn delivery(seq: u64, key: &str, attempt: u32) -> Delivery {
        Delivery {
            seq,
            ..test_delivery(key, attempt)
        }
    }

    #[test]
    fn data_must_arrive_intact() {
        let mut d = delivery(1, "7", 1);
        let want = crate::sink::data_digest(&serde_json::json!({"n": 1}));
        let expected = HashMap::from([("s".to_string(), want.clone())]);
        assert!(data_intact(&expected, &[&d]).is_err(), "no digest recorded");
        d.data_sha256 = Some(want);
        assert_eq!(data_intact(&expected, &[&d]), Ok(()));
        d.data_sha256 = Some(crate::sink::data_digest(&serde_json::json!({"n": 2})));
        assert!(data_intact(&expected, &[&d])
            .unwrap_err()
            .contains("1 of 1"));
        d.subject_id = "unknown".into();
        assert!(data_intact(&expected, &[&d]).is_err());
        assert!(data_intact(&expected, &[]).is_err());
    }

    fn attempts(n: u32) -> Vec<Delivery> {
        (1..=n).map(|a| delivery(a.into(), "1", a)).collect()
    }

    #[test]
    fn healthy_and_fail_first() {
        let one = attempts(1);
        assert!(item_outcome(Expect::Healthy, 3, &item("completed", 1, None), &[&one[0]]).is_ok());
        let err = item_outcome(Expect::Healthy, 3, &item("completed", 1, None), &[]).unwrap_err();
        assert!(err.contains("delivered attempts []"), "{err}");
        let three = attempts(3);
        let refs: Vec<&Delivery> = three.iter().collect();
        assert!(item_outcome(Expect::FailFirst(2), 3, &item("completed", 3, None), &refs).is_ok());
        assert!(item_outcome(
            Expect::FailFirst(2),
            3,
            &item("completed", 2, None),
            &refs[..2]
        )
        .is_err());
    }

    #[test]
    fn failures_need_the_right_reason() {
        let three = attempts(3);
        let refs: Vec<&Delivery> = three.iter().collect();
        let ok = item("failed", 3, Some("HTTP 500 Internal Server Error"));
        assert!(item_outcome(Expect::ServerError, 3, &ok, &refs).is_ok());
        let wrong_reason = item("failed", 3, Some("boom"));
        assert!(item_outcome(Expect::ServerError, 3, &wrong_reason, &refs)
            .unwrap_err()
            .contains("mention 500"));
        assert!(item_outcome(
            Expect::Hang,
            3,
            &item("failed", 3, Some("job Timed Out after 1000 ms")),
            &refs
        )
        .is_ok());
        assert!(item_outcome(
            Expect::ClientError,
            3,
            &item("failed", 1, Some("status 400")),
            &refs[..1]
        )
        .is_ok());
        let retried_400 = item_outcome(
            Expect::ClientError,
            3,
            &item("failed", 3, Some("status 400")),
            &refs,
        );
        assert!(retried_400.unwrap_err().contains("attempt 3 (want 1)"));
    }

    #[test]
    fn grouping_keeps_the_batch_and_orders_by_arrival() {
        let mut ds = vec![
            delivery(5, "1", 2),
            delivery(2, "1", 1),
            delivery(3, "2", 1),
        ];
        ds[2].batch_id = Some("other".into());
        let map = deliveries_by_item(&ds, "b");
        assert_eq!(map.len(), 1);
        assert_eq!(map["1"].iter().map(|d| d.seq).collect::<Vec<_>>(), [2, 5]);
    }

    #[test]
    fn well_formed_deliveries() {
        let good = delivery(1, "7", 1);
        assert!(deliveries_well_formed(&[&good]).is_ok());
        let mut bad = delivery(2, "7", 1);
        bad.signature = "mismatch".into();
        bad.item_id = Some(8);
        let err = deliveries_well_formed(&[&good, &bad]).unwrap_err();
        assert!(
            err.starts_with("1 of 2 wrong")
                && err.contains("signature mismatch")
                && err.contains("item_id Some(8)"),
            "{err}"
        );
        assert!(deliveries_well_formed(&[]).is_err());
    }

    fn batch(pending: u64, completed: u64, failed: u64, status: &str) -> Batch {
        Batch {
            id: Id("b".into()),
            key: None,
            status: status.into(),
            total: pending + completed + failed,
            pending,
            processing: 0,
            completed,
            failed,
            cancelled: 0,
            percent: (completed + failed) as f64 * 100.0 / (pending + completed + failed) as f64,
            rate_per_min: None,
            eta: None,
            created_at: String::new(),
            finished_at: (status == "finished").then(String::new),
            schedule_id: None,
            on_finish: None,
            priority: 0,
            callback: None,
        }
    }

    #[test]
    fn batch_counts_add_up() {
        assert!(batch_counts(&batch(0, 490, 10, "finished"), 500, 490, 10).is_ok());
        assert!(batch_counts(&batch(0, 491, 9, "finished"), 500, 490, 10).is_err());
        assert!(batch_counts(&batch(1, 489, 10, "running"), 500, 489, 10).is_err());
        let mut inconsistent = batch(0, 490, 10, "finished");
        inconsistent.total = 501;
        assert!(batch_counts(&inconsistent, 501, 490, 10)
            .unwrap_err()
            .contains("!= total"));
    }

    fn invocation(subrequests: i64) -> Invocation {
        let mut i = test_invocation();
        i.summary.subrequests = subrequests;
        i
    }

    #[test]
    fn cost_per_item_is_bounded() {
        assert_eq!(cost_per_item("rows written", Some(3.0), 3.0), Ok(()));
        assert!(cost_per_item("rows written", Some(3.001), 3.0)
            .unwrap_err()
            .contains("3.001 rows written per item"));
        assert!(cost_per_item("statements", None, 0.03).is_err());
    }

    #[test]
    fn budget() {
        assert!(within_budget(&[invocation(200), invocation(3)]).is_ok());
        assert!(within_budget(&[invocation(201)])
            .unwrap_err()
            .contains("201 subrequests > budget 200"));
        assert!(within_budget(&[]).is_err());
    }

    #[test]
    fn child_cap() {
        let with = |claimed: i64, released: i64, stop: StopReason| {
            let mut i = invocation(3);
            i.summary.tally.claimed = claimed;
            i.summary.tally.released = released;
            i.summary.stop_reason = stop;
            i
        };
        let capped = with(31, 0, StopReason::ChildCap);
        assert!(within_child_cap(&[capped.clone(), with(5, 0, StopReason::Drained)], 31).is_ok());
        // Items given back unrun were not dispatched.
        assert!(within_child_cap(&[capped.clone(), with(40, 9, StopReason::Drained)], 31).is_ok());
        assert!(
            within_child_cap(&[capped, with(32, 0, StopReason::Drained)], 31)
                .unwrap_err()
                .contains("32 claimed")
        );
        // The cap never bit: the check proves nothing.
        assert!(within_child_cap(&[with(5, 0, StopReason::Drained)], 31).is_err());
    }

    #[test]
    fn duplicates_are_redeliveries_after_success_or_silence() {
        let mut retried = attempts(3);
        retried[0].status = Some(500);
        retried[1].status = Some(503);
        let mut crashed = [delivery(10, "2", 1), delivery(11, "2", 2)];
        crashed[0].status = None;
        let twice_ok = [delivery(20, "3", 1), delivery(21, "3", 1)];
        let map: HashMap<String, Vec<&Delivery>> = [
            ("1".to_string(), retried.iter().collect()),
            ("2".to_string(), crashed.iter().collect()),
            ("3".to_string(), twice_ok.iter().collect()),
        ]
        .into();
        assert_eq!(duplicate_deliveries(&map), 2);
        assert_eq!(duplicate_deliveries(&HashMap::new()), 0);
    }

    #[test]
    fn counted_after_the_first_delivery_done_decides() {
        let mut silent = [delivery(1, "1", 1), delivery(2, "1", 2)];
        silent[0].status = None;
        let map: HashMap<String, Vec<&Delivery>> =
            [("1".to_string(), silent.iter().collect())].into();
        // Silence counts as done for the crash check, not for a 2xx-only one.
        assert_eq!(duplicate_deliveries(&map), 1);
        let answered_2xx = |d: &Delivery| d.status.is_some_and(|s| (200..300).contains(&s));
        assert_eq!(deliveries_after_first(&map, answered_2xx), 0);
    }

    #[test]
    fn lost_and_fault_driven_outcomes() {
        let plan = vec![
            Planned {
                id: "s".into(),
                faults: Default::default(),
                expect: Expect::Any,
            },
            Planned {
                id: "p".into(),
                faults: crate::sink::faults::Faults {
                    status: Some(500),
                    ..Default::default()
                },
                expect: Expect::Any,
            },
        ];
        let mut p_item = item("failed", 3, Some("HTTP 500"));
        p_item.id = 2;
        p_item.subject_id = "p".into();
        let items: HashMap<String, Item> = [
            ("s".to_string(), item("completed", 1, None)),
            ("p".to_string(), p_item.clone()),
        ]
        .into();
        assert!(nothing_lost(&plan, &items).is_ok());
        let one = attempts(1);
        let mut three = attempts(3);
        three
            .iter_mut()
            .for_each(|d| d.idempotency_key = Some("2".into()));
        let ds: HashMap<String, Vec<&Delivery>> = [
            ("1".to_string(), one.iter().collect()),
            ("2".to_string(), three.iter().collect()),
        ]
        .into();
        assert!(outcomes_match_faults(&plan, 3, &items, &ds).is_ok());
        let short: HashMap<String, Vec<&Delivery>> =
            [("1".to_string(), one.iter().collect())].into();
        let err = outcomes_match_faults(&plan, 3, &items, &short).unwrap_err();
        assert!(err.starts_with("1 of 2 wrong: p (status=500)"), "{err}");
        let mut stuck = items.clone();
        stuck.insert("s".into(), item("processing", 1, None));
        assert!(nothing_lost(&plan, &stuck)
            .unwrap_err()
            .contains("still processing"));
        stuck.remove("s");
        assert!(nothing_lost(&plan, &stuck).unwrap_err().contains("no item"));
        assert!(noop_outcomes(&items)
            .unwrap_err()
            .contains("p: failed on attempt 3"));
    }

    #[test]
    fn crash_bounds_duplicates() {
        let plan = vec![Planned {
            id: "s".into(),
            faults: Default::default(),
            expect: Expect::Healthy,
        }];
        let items: HashMap<String, Item> = [("s".to_string(), item("completed", 2, None))].into();
        let ds = attempts(2);
        let map: HashMap<String, Vec<&Delivery>> = [("1".to_string(), ds.iter().collect())].into();
        let results = crash_recovery(&plan, &items, &map, 1);
        assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");
        let results = crash_recovery(&plan, &items, &map, 0);
        assert!(results[2].1.is_err());
        let empty = HashMap::new();
        let results = crash_recovery(&plan, &items, &empty, 0);
        assert!(results[1].1.is_err());
    }
}
