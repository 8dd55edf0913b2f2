//! `loadtest bench --only-backpressure`: webhook items against receivers that
//! take 5, 50 and 500 requests a second and answer `429` with `Retry-After: 1`
//! above that (the sink's `accept_per_s` fault), no limit set, drained by ticks,
//! each on a fresh runtime: the receiver's calls per item (1.0 is no refusal at
//! all) and the makespan ÷ the ideal (items ÷ the receiver's rate). Local
//! `wrangler dev` starts about 150 webhooks a second at best, so the 500 a second
//! receiver is never the bound here.

use crate::bench::limits;
use crate::driver::drive::{self, Pace};
use crate::driver::target::TargetArgs;
use crate::run::table::Table;
use crate::runtime::api::Api;
use crate::sink::faults::Faults;
use anyhow::{ensure, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// (receiver's requests a second, items): about 10 s of the receiver's time
/// each, the fastest capped by what the local runtime can start.
const RECEIVERS: [(u32, usize); 3] = [(5, 50), (50, 500), (500, 1_000)];

#[derive(Debug, Serialize)]
pub struct Receiver {
    pub accept_per_s: u32,
    pub items: usize,
    pub completed: u64,
    pub failed: u64,
    /// Requests the receiver got, refused ones included.
    pub calls: u64,
    pub refused: u64,
    pub calls_per_item: f64,
    pub makespan_s: f64,
    pub ideal_s: f64,
    pub makespan_over_ideal: f64,
}

#[derive(Debug, Serialize)]
pub struct BackpressureBench {
    pub receivers: Vec<Receiver>,
}

impl BackpressureBench {
    pub fn table(&self, t: &mut Table) {
        t.section("Backpressure (loadtest bench --only-backpressure)");
        for r in &self.receivers {
            t.row(&[format!(
                "receiver of {}/s, {} webhooks: {} completed, {} failed; {:.2} calls per item ({} refused); makespan {:.1} s, {:.2} × the ideal {:.1} s",
                r.accept_per_s,
                r.items,
                r.completed,
                r.failed,
                r.calls_per_item,
                r.refused,
                r.makespan_s,
                r.makespan_over_ideal,
                r.ideal_s,
            )]);
        }
    }
}

pub async fn measure(args: &TargetArgs, timeout: Duration) -> Result<BackpressureBench> {
    let mut receivers = Vec::new();
    for (per_s, items) in RECEIVERS {
        eprintln!("== backpressure: {items} webhooks to a receiver of {per_s}/s (429 + Retry-After: 1 above)");
        receivers.push(receiver(args, per_s, items, timeout).await?);
    }
    Ok(BackpressureBench { receivers })
}

async fn receiver(args: &TargetArgs, per_s: u32, n: usize, timeout: Duration) -> Result<Receiver> {
    let name = format!("bench-bp-{per_s}");
    // Attempts enough that refusals show as calls, not as failures.
    let mut target = limits::open(args, &name, &[("MAX_ATTEMPTS", "20")]).await?;
    let api: Api = target.api.clone();
    let faults = Faults {
        accept_per_s: per_s,
        retry_after: Some(1),
        ..Faults::default()
    };
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let id = format!("bp-{i:05}");
            json!({"subject_id": id, "kind": "webhook",
                   "payload": {"url": target.sink.hook_url(&id, &faults), "data": {}}})
        })
        .collect();
    let (created, b) = api
        .create_batch(&json!({"key": name, "items": items}))
        .await?;
    ensure!(created, "batch {name} existed");
    let started = Instant::now();
    let pace = Pace {
        every: Duration::from_millis(200),
        max_in_flight: 2,
        timeout,
    };
    let driven = drive::until_finished(&api, &b, pace, JoinSet::new()).await?;
    let makespan_s = started.elapsed().as_secs_f64();
    let stats = target.sink.stats(false).await?;
    let refused = stats.by_status.get("429").copied().unwrap_or(0);
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    let ideal_s = n as f64 / f64::from(per_s);
    Ok(Receiver {
        accept_per_s: per_s,
        items: n,
        completed: driven.batch.completed,
        failed: driven.batch.failed,
        calls: stats.total,
        refused,
        calls_per_item: stats.total as f64 / n as f64,
        makespan_s,
        ideal_s,
        makespan_over_ideal: makespan_s / ideal_s,
    })
}
