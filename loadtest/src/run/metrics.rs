//! Pure measurements over what the API and the sink report: timestamps,
//! makespan, latency percentiles, attempts, per-item costs and ratios.

use crate::runtime::api::{Invocation, Item};
use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

/// Milliseconds since the epoch of an RFC 3339 timestamp (the API's format).
pub fn timestamp_ms(text: &str) -> Result<i64> {
    Ok(chrono::DateTime::parse_from_rfc3339(text)
        .with_context(|| format!("`{text}` is not an RFC 3339 timestamp"))?
        .timestamp_millis())
}

/// Latency distribution in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub max: u64,
}

impl Percentiles {
    /// `None` for no samples. hdrhistogram with 3 significant digits: a
    /// percentile is exact to 0.1%, whatever the range, in constant memory.
    pub fn of(samples_ms: &[u64]) -> Option<Percentiles> {
        if samples_ms.is_empty() {
            return None;
        }
        let mut h = Histogram::<u64>::new(3).expect("3 significant digits is valid");
        for &s in samples_ms {
            // Auto-resizing histograms only fail on u64 overflow of the count.
            h.record(s).expect("auto-resizing histogram");
        }
        Some(Percentiles {
            count: h.len(),
            p50: h.value_at_quantile(0.50),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
        })
    }
}

/// Per item: `completed_at - created_at` in ms (items not yet ended are skipped;
/// a clock step backwards counts as 0).
pub fn item_latencies(created_at_ms: i64, items: &[Item]) -> Result<Vec<u64>> {
    items
        .iter()
        .filter_map(|i| i.completed_at.as_deref())
        .map(|t| Ok((timestamp_ms(t)? - created_at_ms).max(0) as u64))
        .collect()
}

/// Batch creation to the last item's end, in ms (`None` when nothing ended).
pub fn makespan_ms(created_at_ms: i64, items: &[Item]) -> Result<Option<u64>> {
    Ok(item_latencies(created_at_ms, items)?.into_iter().max())
}

/// Items by their final attempt number.
pub fn attempts_histogram(items: &[Item]) -> BTreeMap<u32, u64> {
    let mut h = BTreeMap::new();
    for i in items {
        *h.entry(i.attempt).or_insert(0) += 1;
    }
    h
}

/// `a / b`, `None` when `b` is zero (a ratio over nothing is not a number).
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b != 0.0).then(|| a / b)
}

/// Items per second over a makespan.
pub fn per_second(items: u64, elapsed_ms: u64) -> Option<f64> {
    ratio(items as f64 * 1000.0, elapsed_ms as f64)
}

/// The median (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// D1 and subrequest use, summed over a set of invocations.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    pub invocations: u64,
    pub d1_statements: i64,
    pub d1_rows_written: i64,
    /// D1 rows read (summaries stored before migration 0024 count 0).
    pub d1_rows_read: i64,
    /// Items claimed by these invocations (retries count again).
    pub claimed: i64,
    pub max_subrequests: i64,
    pub subrequest_budget: i64,
}

impl Usage {
    pub fn of<'a>(invocations: impl IntoIterator<Item = &'a Invocation>) -> Usage {
        let mut u = Usage::default();
        for Invocation { summary: i, .. } in invocations {
            u.invocations += 1;
            u.d1_statements += i.d1_statements;
            u.d1_rows_written += i.d1_rows_written;
            u.d1_rows_read += i.d1_rows_read.unwrap_or(0);
            u.claimed += i.tally.claimed;
            u.max_subrequests = u.max_subrequests.max(i.subrequests);
            u.subrequest_budget = u.subrequest_budget.max(i.subrequest_budget);
        }
        u
    }
}

/// A run's D1 cost: per item overall, and split between the invocation that
/// fired the run's batch (a tick that created it from a schedule, then drained
/// what it could: "init plus its share of the drain") and the other ticks (drain
/// only). The firing one is the earliest-started invocation listing the batch in
/// its `batch_ids`; runs fire one tick at a time, so no other tick can claim from
/// the batch before it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct D1Cost {
    pub total: Usage,
    pub firing: Usage,
    pub ticks: Usage,
    pub statements_per_item: Option<f64>,
    pub rows_written_per_item: Option<f64>,
    pub rows_read_per_item: Option<f64>,
    /// Ticks' statements per item they claimed: the drain's own cost.
    pub tick_statements_per_claim: Option<f64>,
    pub tick_rows_written_per_claim: Option<f64>,
}

impl D1Cost {
    pub fn of(invocations: &[&Invocation], items: u64, batch_id: &str) -> D1Cost {
        let total = Usage::of(invocations.iter().copied());
        let firing_id = invocations
            .iter()
            .filter(|i| i.summary.tally.batch_ids.contains(batch_id))
            .min_by_key(|i| (i.summary.started_at, i.id))
            .map(|i| i.id);
        let is_firing = |i: &&Invocation| Some(i.id) == firing_id;
        let firing = Usage::of(invocations.iter().copied().filter(is_firing));
        let ticks = Usage::of(invocations.iter().copied().filter(|i| !is_firing(i)));
        D1Cost {
            statements_per_item: ratio(total.d1_statements as f64, items as f64),
            rows_written_per_item: ratio(total.d1_rows_written as f64, items as f64),
            rows_read_per_item: ratio(total.d1_rows_read as f64, items as f64),
            tick_statements_per_claim: ratio(ticks.d1_statements as f64, ticks.claimed as f64),
            tick_rows_written_per_claim: ratio(ticks.d1_rows_written as f64, ticks.claimed as f64),
            total,
            firing,
            ticks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cron_fanout::core::model::{InvocationSummary, StopReason, Tally, Trigger};

    fn item(attempt: u32, completed_at: Option<&str>) -> Item {
        Item {
            id: 1,
            subject_id: "s".into(),
            kind: "noop".into(),
            status: "completed".into(),
            attempt,
            max_attempts: 3,
            last_error: None,
            run_after: None,
            started_at: None,
            completed_at: completed_at.map(str::to_string),
            receipts: None,
        }
    }

    fn invocation(
        trigger: Trigger,
        statements: i64,
        rows: i64,
        claimed: i64,
        sub: i64,
    ) -> Invocation {
        Invocation {
            id: 1,
            summary: InvocationSummary {
                invocation: None,
                trigger,
                started_at: 0,
                elapsed_ms: 1,
                tally: Tally {
                    claimed,
                    completed: claimed,
                    ..Tally::default()
                },
                subrequests: sub,
                subrequest_budget: 100,
                d1_statements: statements,
                d1_rows_written: rows,
                d1_rows_read: Some(rows),
                stop_reason: StopReason::Drained,
                drainer: None,
                chain: None,
            },
        }
    }

    #[test]
    fn timestamps_and_latencies() {
        let created = timestamp_ms("2026-01-01T12:00:00.000Z").unwrap();
        assert_eq!(
            timestamp_ms("2026-01-01T12:00:01.250+00:00").unwrap() - created,
            1250
        );
        assert!(timestamp_ms("yesterday").is_err());
        let items = [
            item(1, Some("2026-01-01T12:00:00.100Z")),
            item(2, Some("2026-01-01T12:00:02.000Z")),
            item(1, None),
            // Before creation (clock skew): clamped to 0.
            item(1, Some("2026-01-01T11:59:59.000Z")),
        ];
        assert_eq!(item_latencies(created, &items).unwrap(), [100, 2000, 0]);
        assert_eq!(makespan_ms(created, &items).unwrap(), Some(2000));
        assert_eq!(makespan_ms(created, &items[2..3]).unwrap(), None);
        assert_eq!(attempts_histogram(&items), BTreeMap::from([(1, 3), (2, 1)]));
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let samples: Vec<u64> = (1..=1000).collect();
        let p = Percentiles::of(&samples).unwrap();
        assert_eq!(
            (p.count, p.p50, p.p95, p.p99, p.max),
            (1000, 500, 950, 990, 1000)
        );
        let one = Percentiles::of(&[7]).unwrap();
        assert_eq!((one.p50, one.p99, one.max), (7, 7, 7));
        assert!(Percentiles::of(&[]).is_none());
        // Large values keep 3 significant digits.
        let big = Percentiles::of(&[1_000_000, 2_000_000]).unwrap();
        assert!((big.max as f64 - 2_000_000.0).abs() / 2_000_000.0 < 1e-3);
    }

    #[test]
    fn ratios_and_medians() {
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(per_second(5000, 2500), Some(2000.0));
        assert_eq!(per_second(1, 0), None);
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn d1_cost_splits_the_firing_tick_from_the_others() {
        let mut invs = [
            invocation(Trigger::Tick, 20, 300, 150, 160),
            invocation(Trigger::Tick, 10, 1003, 50, 12),
            invocation(Trigger::Tick, 2, 1, 0, 3),
        ];
        // The second started first and lists the batch: it fired it.
        for (n, (inv, started)) in invs.iter_mut().zip([2_000, 1_000, 3_000]).enumerate() {
            inv.id = n as i64 + 1;
            inv.summary.started_at = started;
        }
        invs[0].summary.tally.batch_ids.insert("b".into());
        invs[1].summary.tally.batch_ids.insert("b".into());
        let refs: Vec<&Invocation> = invs.iter().collect();
        let c = D1Cost::of(&refs, 200, "b");
        assert_eq!(c.total.invocations, 3);
        assert_eq!(c.total.d1_statements, 32);
        assert_eq!(c.total.max_subrequests, 160);
        assert_eq!(c.total.subrequest_budget, 100);
        assert_eq!((c.firing.invocations, c.firing.d1_rows_written), (1, 1003));
        assert_eq!(c.statements_per_item, Some(0.16));
        assert_eq!(c.rows_written_per_item, Some(1304.0 / 200.0));
        assert_eq!(c.tick_statements_per_claim, Some(22.0 / 150.0));
        assert_eq!(D1Cost::of(&[], 0, "b").statements_per_item, None);
    }
}
