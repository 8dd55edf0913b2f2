//! `loadtest bench --only-cost`: a batch of `--cost-items` no-op items over
//! subjects, fired by `POST /batches` and drained by ticks on a fresh runtime;
//! then its `cost` (`GET /batches/{id}`), checked against the shares its
//! invocations' summaries carry (`GET /invocations`), per item and per million
//! items, and the money per million at the prices of `core::cost::PRICES`.

use super::get_ok;
use crate::driver::plan;
use crate::driver::target::TargetArgs;
use crate::run;
use crate::run::scenario::{Job, Scenario, Spec};
use crate::run::table::Table;
use crate::runtime::api::SubjectIn;
use anyhow::{Context, Result};
use cron_fanout::core::cost::{self, BatchCost, Cost};
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Serialize)]
pub struct CostBench {
    pub items: u64,
    /// The batch's `cost` as `GET /batches/{id}` answered it.
    pub cost: Cost,
    /// The sum of the shares its invocations' summaries carry.
    pub shares: Cost,
    /// The same figures, per item.
    pub per_item: PerItem,
    /// A million such items at the published prices.
    pub per_million: BatchCost,
    pub prices_as_of: &'static str,
}

#[derive(Debug, Serialize)]
pub struct PerItem {
    pub d1_rows_written: f64,
    pub d1_rows_read: f64,
    pub d1_statements: f64,
    pub subrequests: f64,
    pub queue_operations: f64,
    pub worker_requests: f64,
}

impl CostBench {
    /// The batch's cost is exactly its summaries' shares.
    pub fn passed(&self) -> bool {
        self.cost == self.shares
    }

    pub fn table(&self, t: &mut Table) {
        let p = &self.per_item;
        let m = &self.per_million;
        t.section("Cost of a batch (loadtest bench --only-cost)");
        t.row(&[format!(
            "{} no-op items (inserted by POST /batches, not in it): {} rows written, {} rows read, {} statements, {} subrequests, {} queue operations, {} invocations; the summaries' shares {}",
            self.items,
            self.cost.d1_rows_written,
            self.cost.d1_rows_read,
            self.cost.d1_statements,
            self.cost.subrequests,
            self.cost.queue_operations,
            self.cost.worker_requests,
            if self.passed() { "match exactly" } else { "DIFFER" },
        )]);
        t.row(&[format!(
            "per item: {:.4} rows written, {:.2} rows read, {:.4} statements, {:.4} subrequests, {:.4} queue operations, {:.6} invocations",
            p.d1_rows_written, p.d1_rows_read, p.d1_statements, p.subrequests, p.queue_operations, p.worker_requests,
        )]);
        t.row(&[format!(
            "per million items: {} rows written, {} rows read; Free: {:.0} % of a day's rows written, {:.0} % of its rows read; Paid: ${:.2} beyond the included amounts (prices of {})",
            m.used.d1_rows_written,
            m.used.d1_rows_read,
            m.free_quota_used_percent.get("d1_rows_written").copied().unwrap_or(0.0),
            m.free_quota_used_percent.get("d1_rows_read").copied().unwrap_or(0.0),
            m.paid_usd_beyond_included,
            self.prices_as_of,
        )]);
    }
}

pub async fn measure(args: &TargetArgs, items: usize, timeout: Duration) -> Result<CostBench> {
    eprintln!("== cost of a batch of {items} no-op items");
    let spec = Spec {
        scenario: Scenario::Happy,
        items,
        job: Job::Noop,
        latency_ms: 0,
        error_rate: 0.0,
        poison_share: 0.0,
        key_concurrency: None,
    };
    let mut target = run::open_for(args, "bench-cost", &spec).await?;
    let api = target.api.clone();
    let subjects: Vec<SubjectIn> = (0..items)
        .map(|i| plan::noop_subject(format!("cost-{i:07}")))
        .collect();
    for chunk in subjects.chunks(crate::runtime::api::MAX_PAGE) {
        api.put_subjects(chunk).await?;
    }
    let (batch, driven) =
        crate::driver::drive::subjects_batch_finished(&api, "cost", timeout).await?;
    let got = get_ok(&api, &format!("/batches/{}", batch.id)).await?;
    let cost: Cost = serde_json::from_value(
        got.json()
            .and_then(|v| v.get("cost").cloned())
            .context("GET /batches/{id} has no cost")?,
    )?;
    let id = batch.id.to_string();
    let mut shares = Cost::default();
    for inv in api.invocations(1_000).await? {
        if let Some(share) = inv.summary.tally.per_batch.get(&id).and_then(|t| t.cost) {
            shares.add(&share);
        }
    }
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    let n = driven.batch.total.max(1) as f64;
    let per = |x: i64| x as f64 / n;
    let million = |x: i64| (x as f64 * 1e6 / n).round() as i64;
    Ok(CostBench {
        items: driven.batch.total,
        per_item: PerItem {
            d1_rows_written: per(cost.d1_rows_written),
            d1_rows_read: per(cost.d1_rows_read),
            d1_statements: per(cost.d1_statements),
            subrequests: per(cost.subrequests),
            queue_operations: per(cost.queue_operations),
            worker_requests: per(cost.worker_requests),
        },
        per_million: BatchCost::priced(Cost {
            d1_rows_written: million(cost.d1_rows_written),
            d1_rows_read: million(cost.d1_rows_read),
            d1_statements: million(cost.d1_statements),
            subrequests: million(cost.subrequests),
            queue_operations: million(cost.queue_operations),
            worker_requests: million(cost.worker_requests),
        }),
        cost,
        shares,
        prices_as_of: cost::PRICES_AS_OF,
    })
}
