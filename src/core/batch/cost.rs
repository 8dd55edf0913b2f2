//! What a batch costs: each invocation's measured costs shared among the batches
//! it worked on (`split`), and the money at Cloudflare's published prices
//! (`PRICES`, the one price table; `BatchCost::priced`).
//!
//! The split is made once, when the summary is built, and stored with it in
//! `per_batch` (each batch's `cost`); the summary's insert adds each share to its
//! batch's counters (migration 0026): a batch's cost is then one row to read,
//! kept as long as the batch, and always the sum of the shares its invocations'
//! summaries carry.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::core::batch::model::{InvocationSummary, Tally};

pub use crate::core::batch::model::Cost;

/// The batches an invocation's costs are shared among, with their weights: the
/// items it ended of each (`per_batch`), since an item's insert, claim and
/// commit are nearly all of what an invocation writes and reads; when it ended
/// none, its batches (`batch_ids`: created or claimed from) in equal parts, so
/// that a tick that only filled a batch and sent drainers is still that batch's.
/// Empty for an invocation that touched no batch (an idle tick): no batch's cost.
pub fn weights(tally: &Tally) -> Vec<(&str, i64)> {
    let ended: Vec<(&str, i64)> = tally
        .per_batch
        .iter()
        .map(|(b, t)| (b.as_str(), t.completed + t.failed))
        .filter(|(_, n)| *n > 0)
        .collect();
    if !ended.is_empty() {
        return ended;
    }
    tally.batch_ids.iter().map(|b| (b.as_str(), 1)).collect()
}

/// How many batches a summary will charge (`weights`): each is one row its
/// insert writes, which the summary counts before the split.
pub fn charged(tally: &Tally) -> i64 {
    weights(tally).len() as i64
}

/// `total` in integer parts proportional to `weights` (largest remainder; ties to
/// the earlier entry): the parts always add up to `total` exactly, which is what
/// makes a batch's cost the exact sum of its shares.
pub fn apportion(total: i64, weights: &[i64]) -> Vec<i64> {
    let sum: i128 = weights.iter().map(|&w| i128::from(w.max(0))).sum();
    if sum == 0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<(i64, i128)> = weights
        .iter()
        .map(|&w| {
            let scaled = i128::from(total) * i128::from(w.max(0));
            ((scaled / sum) as i64, scaled % sum)
        })
        .collect();
    let mut parts: Vec<i64> = exact.iter().map(|(q, _)| *q).collect();
    let left = total - parts.iter().sum::<i64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // Stable sort: equal remainders keep their order.
    order.sort_by(|&a, &b| exact[b].1.cmp(&exact[a].1));
    for &i in order.iter().take(left.max(0) as usize) {
        parts[i] += 1;
    }
    parts
}

/// Each charged batch's share of `summary`'s costs; the shares add up to
/// `Cost::of(summary)` exactly, field by field.
pub fn split(summary: &InvocationSummary) -> BTreeMap<String, Cost> {
    let weighted = weights(&summary.tally);
    let w: Vec<i64> = weighted.iter().map(|(_, n)| *n).collect();
    let total = Cost::of(summary).fields();
    let per_field: Vec<Vec<i64>> = total.iter().map(|&t| apportion(t, &w)).collect();
    weighted
        .iter()
        .enumerate()
        .map(|(i, (batch, _))| {
            let mut f = [0; 6];
            for (k, parts) in per_field.iter().enumerate() {
                f[k] = parts[i];
            }
            (batch.to_string(), Cost::from_fields(f))
        })
        .collect()
}

/// Store each charged batch's share in the summary's `per_batch` (a batch it
/// charges without having ended any of its items gets an entry of zero counts).
pub fn attach(summary: &mut InvocationSummary) {
    for (batch, share) in split(summary) {
        summary.tally.per_batch.entry(batch).or_default().cost = Some(share);
    }
}

/// When the prices below were read from their pages.
pub const PRICES_AS_OF: &str = "2026-12-06";

/// One billed unit of the Workers platform: its Free quota and its Paid plan's
/// included amount and price beyond it, with the page that says so.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// The `Cost` field it prices, or a unit a batch's cost does not measure.
    pub unit: &'static str,
    /// Free plan: a day's quota (`None`: not a daily quota, see `free_note`).
    pub free_per_day: Option<f64>,
    pub free_note: &'static str,
    /// Workers Paid: included a month, then `paid_usd` per `paid_per` units
    /// beyond it.
    pub paid_included_per_month: f64,
    pub paid_usd: f64,
    pub paid_per: f64,
    pub page: &'static str,
}

const WORKERS_PAGE: &str = "https://developers.cloudflare.com/workers/platform/pricing/";
const D1_PAGE: &str = "https://developers.cloudflare.com/d1/platform/pricing/";
const QUEUES_PAGE: &str = "https://developers.cloudflare.com/queues/platform/pricing/";

/// The price table, the only one: the money of `GET /batches/{id}`, the
/// operating guide's and `loadtest bench --only-cost`'s figures come from it.
pub const PRICES: [Price; 6] = [
    Price {
        unit: "worker_requests",
        free_per_day: Some(100_000.0),
        free_note: "100,000 requests a day",
        paid_included_per_month: 10_000_000.0,
        paid_usd: 0.30,
        paid_per: 1e6,
        page: WORKERS_PAGE,
    },
    Price {
        unit: "cpu_ms",
        free_per_day: None,
        free_note: "10 ms of CPU per invocation (a limit, not a quota)",
        paid_included_per_month: 30_000_000.0,
        paid_usd: 0.02,
        paid_per: 1e6,
        page: WORKERS_PAGE,
    },
    Price {
        unit: "d1_rows_read",
        free_per_day: Some(5_000_000.0),
        free_note: "5 million rows a day",
        paid_included_per_month: 25_000_000_000.0,
        paid_usd: 0.001,
        paid_per: 1e6,
        page: D1_PAGE,
    },
    Price {
        unit: "d1_rows_written",
        free_per_day: Some(100_000.0),
        free_note: "100,000 rows a day",
        paid_included_per_month: 50_000_000.0,
        paid_usd: 1.00,
        paid_per: 1e6,
        page: D1_PAGE,
    },
    Price {
        // GB-months: US$0.75 a GB-month beyond 5 GB.
        unit: "d1_storage_gb",
        free_per_day: None,
        free_note: "5 GB in all",
        paid_included_per_month: 5.0,
        paid_usd: 0.75,
        paid_per: 1.0,
        page: D1_PAGE,
    },
    Price {
        unit: "queue_operations",
        free_per_day: Some(10_000.0),
        free_note: "10,000 operations a day",
        paid_included_per_month: 1_000_000.0,
        paid_usd: 0.40,
        paid_per: 1e6,
        page: QUEUES_PAGE,
    },
];

/// The price of `unit` in [`PRICES`].
pub fn price(unit: &str) -> Option<&'static Price> {
    PRICES.iter().find(|p| p.unit == unit)
}

/// A batch's `cost` as `GET /batches/{id}` shows it: what it used, and the money.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchCost {
    #[serde(flatten)]
    pub used: Cost,
    /// Share of one day's Free quota each billed unit used (%, 3 decimals).
    pub free_quota_used_percent: BTreeMap<&'static str, f64>,
    /// Share of a month's Paid included amount each billed unit used (%).
    pub paid_included_used_percent: BTreeMap<&'static str, f64>,
    /// US$ on Workers Paid once the month's included amounts are used up: the
    /// batch's units at the prices beyond them (6 decimals). CPU time is not
    /// measured by the Worker and is not in it; nor is storage, which is kept
    /// items, not work.
    pub paid_usd_beyond_included: f64,
    pub prices_as_of: &'static str,
}

/// The units of `Cost` that are billed, with what the batch used of each.
fn billed(used: &Cost) -> [(&'static str, i64); 4] {
    [
        ("worker_requests", used.worker_requests),
        ("d1_rows_read", used.d1_rows_read),
        ("d1_rows_written", used.d1_rows_written),
        ("queue_operations", used.queue_operations),
    ]
}

fn round_to(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

impl BatchCost {
    pub fn priced(used: Cost) -> BatchCost {
        let mut free = BTreeMap::new();
        let mut included = BTreeMap::new();
        let mut usd = 0.0;
        for (unit, n) in billed(&used) {
            let Some(p) = price(unit) else { continue };
            let n = n as f64;
            if let Some(per_day) = p.free_per_day {
                free.insert(unit, round_to(n * 100.0 / per_day, 3));
            }
            included.insert(unit, round_to(n * 100.0 / p.paid_included_per_month, 6));
            usd += n * p.paid_usd / p.paid_per;
        }
        BatchCost {
            used,
            free_quota_used_percent: free,
            paid_included_used_percent: included,
            paid_usd_beyond_included: round_to(usd, 6),
            prices_as_of: PRICES_AS_OF,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::batch::model::{BatchTally, StopReason, Trigger};

    fn summary(per_batch: &[(&str, i64, i64)], batch_ids: &[&str]) -> InvocationSummary {
        let mut tally = Tally::default();
        for (b, completed, failed) in per_batch {
            tally.per_batch.insert(
                b.to_string(),
                BatchTally {
                    completed: *completed,
                    failed: *failed,
                    cost: None,
                },
            );
        }
        tally.batch_ids = batch_ids.iter().map(|b| b.to_string()).collect();
        tally.queue_operations = 2;
        InvocationSummary {
            invocation: Some("i".into()),
            trigger: Trigger::Tick,
            started_at: 0,
            elapsed_ms: 10,
            tally,
            subrequests: 31,
            subrequest_budget: 1_000,
            d1_statements: 17,
            d1_rows_written: 36_044,
            d1_rows_read: Some(243_046),
            stop_reason: StopReason::Drained,
            drainer: None,
            chain: None,
        }
    }

    fn sum(shares: &BTreeMap<String, Cost>) -> Cost {
        let mut total = Cost::default();
        for share in shares.values() {
            total.add(share);
        }
        total
    }

    #[test]
    fn apportioned_parts_add_up_to_the_total_exactly() {
        assert_eq!(apportion(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(apportion(1, &[1, 3]), vec![0, 1]);
        assert_eq!(apportion(7, &[0, 5]), vec![0, 7]);
        assert_eq!(apportion(5, &[0, 0]), vec![0, 0]);
        for total in [0, 1, 2, 99, 36_044, i64::MAX / 4] {
            let parts = apportion(total, &[3, 7, 11, 1]);
            assert_eq!(parts.iter().sum::<i64>(), total, "{total}");
        }
    }

    #[test]
    fn an_invocations_costs_are_shared_in_proportion_to_the_items_each_batch_ended() {
        let s = summary(&[("a", 9_000, 0), ("b", 2_999, 1)], &["a", "b"]);
        let shares = split(&s);
        assert_eq!(sum(&shares), Cost::of(&s));
        assert_eq!(shares["a"].d1_rows_written, 27_033);
        assert_eq!(shares["b"].d1_rows_written, 9_011);
        // One request: the batch with the larger share of it.
        assert_eq!(
            (shares["a"].worker_requests, shares["b"].worker_requests),
            (1, 0)
        );
    }

    #[test]
    fn an_invocation_that_ended_nothing_shares_its_costs_equally_among_its_batches() {
        // A tick that filled two batches and sent drainers.
        let s = summary(&[], &["a", "b"]);
        let shares = split(&s);
        assert_eq!(shares.len(), 2);
        assert_eq!(sum(&shares), Cost::of(&s));
        assert_eq!(shares["a"].d1_rows_written, 18_022);
    }

    #[test]
    fn an_invocation_that_touched_no_batch_charges_none() {
        let s = summary(&[], &[]);
        assert!(split(&s).is_empty());
        assert_eq!(charged(&s.tally), 0);
    }

    #[test]
    fn attach_gives_every_charged_batch_its_share_and_keeps_the_counts() {
        let mut s = summary(&[("a", 3, 0)], &["a", "b"]);
        attach(&mut s);
        assert_eq!(s.tally.per_batch["a"].completed, 3);
        assert_eq!(s.tally.per_batch["a"].cost, Some(Cost::of(&s)));
        // b was claimed from but ended nothing here: ended items weigh alone.
        assert!(!s.tally.per_batch.contains_key("b"));
    }

    #[test]
    fn the_money_is_the_units_at_the_published_prices() {
        let used = Cost {
            d1_rows_written: 3_000_000,
            d1_rows_read: 20_000_000,
            d1_statements: 27_000,
            subrequests: 40_000,
            queue_operations: 3_000,
            worker_requests: 1_000,
        };
        let c = BatchCost::priced(used);
        // $3 of rows written, $0.02 of rows read, $0.0012 of queue operations,
        // $0.0003 of requests.
        assert_eq!(c.paid_usd_beyond_included, 3.0215);
        assert_eq!(c.free_quota_used_percent["d1_rows_written"], 3_000.0);
        assert_eq!(c.free_quota_used_percent["d1_rows_read"], 400.0);
        assert_eq!(c.free_quota_used_percent["queue_operations"], 30.0);
        assert_eq!(c.paid_included_used_percent["d1_rows_written"], 6.0);
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["d1_rows_written"], 3_000_000);
        assert_eq!(json["prices_as_of"], PRICES_AS_OF);
    }

    #[test]
    fn every_price_names_its_page() {
        for p in PRICES {
            assert!(
                p.page.starts_with("https://developers.cloudflare.com/"),
                "{}",
                p.unit
            );
        }
    }
}
