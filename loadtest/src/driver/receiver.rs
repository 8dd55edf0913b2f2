//! Webhooks against a receiver that takes a number of requests a second and
//! answers `429` with `Retry-After: 1` above it (the sink's `accept_per_s`
//! fault), on a Worker of their own: what `bench --only-backpressure` measures
//! and the e2e learned-rates part checks.

use crate::driver::drive;
use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::runtime::api::Api;
use crate::sink::faults::Faults;
use anyhow::Result;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;

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

/// A Worker of its own for webhooks against an `accept_per_s` receiver, with
/// `more` settings over the bench's.
pub async fn open(args: &TargetArgs, name: &str, more: &[(&str, &str)]) -> Result<Target> {
    let mut settings = vec![
        // The sink listens on 127.0.0.1.
        ("ALLOW_PRIVATE_TARGETS", "true"),
        ("SUBREQUEST_BUDGET", "10000"),
        ("MAX_CHILD_INVOCATIONS", "10000"),
        ("INVOCATION_DEADLINE_MS", "60000"),
        ("JOB_TIMEOUT_MS", "5000"),
        // Attempts enough that refusals show as calls, not as failures.
        ("MAX_ATTEMPTS", "20"),
    ];
    settings.extend_from_slice(more);
    Target::open(args, name, &settings, Secrets::Random, true).await
}

/// `n` webhooks (subjects `<prefix>-00000`…) to a receiver of `per_s` a second
/// (429 + Retry-After: 1 above) in one batch, drained by ticks every 200 ms (one
/// at a time) until it ends: what the receiver saw since the sink's
/// last reset, and the makespan.
pub async fn send(
    target: &Target,
    per_s: u32,
    n: usize,
    prefix: &str,
    timeout: Duration,
) -> Result<Receiver> {
    let api: Api = target.api.clone();
    let faults = Faults {
        accept_per_s: per_s,
        retry_after: Some(1),
        ..Faults::default()
    };
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let id = format!("{prefix}-{i:05}");
            json!({"subject_id": id, "kind": "webhook",
                   "payload": {"url": target.sink.hook_url(&id, &faults), "data": {}}})
        })
        .collect();
    let key = format!("{prefix}-{per_s}-{n}");
    let (driven, makespan_s) = drive::batch_until_finished(&api, &key, items, timeout).await?;
    let stats = target.sink.stats(false).await?;
    let refused = stats.by_status.get("429").copied().unwrap_or(0);
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
