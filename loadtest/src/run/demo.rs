//! `loadtest demo`: the README's demo. Starts the Worker on a persistent local
//! state dir with the secrets from `.dev.vars`, seeds subjects with realistic
//! latencies and a few faults, saves a one-off schedule due now, and fires a tick
//! every second (production ticks every minute): the first tick fires the
//! schedule's batch; the demo shows its progress until it finishes. Then it
//! prints the dashboard's URL and the admin token and keeps the Worker up until
//! Ctrl-C.

use crate::driver::drive::{self, Pace};
use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::runtime::api::{Api, Batch, SubjectIn, TICK_CRON};
use crate::sink::Stats;
use crate::{driver::plan, driver::steps};
use anyhow::{bail, Result};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

/// The demo subjects' group, which its schedule selects.
pub const GROUP: &str = "demo";

/// Demo settings: production's small subrequest budget (so the batch visibly
/// spreads over several ticks) with retries and leases scaled down to seconds.
pub const SETTINGS: &[(&str, &str)] = &[
    ("MAX_ATTEMPTS", "3"),
    ("JOB_TIMEOUT_MS", "2000"),
    ("LEASE_SECONDS", "10"),
    ("RETRY_BASE_MS", "500"),
    ("RETRY_MAX_MS", "2000"),
    ("CLAIM_CHUNK", "25"),
    ("DISPATCH_CONCURRENCY", "25"),
    ("SUBREQUEST_BUDGET", "45"),
    ("INVOCATION_DEADLINE_MS", "20000"),
    // The sink listens on 127.0.0.1, a private target the Worker refuses by default.
    ("ALLOW_PRIVATE_TARGETS", "true"),
];

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Subjects to seed.
    #[arg(long, default_value_t = 200)]
    pub subjects: usize,
    /// Seconds between tick crons.
    #[arg(long, default_value_t = 1.0)]
    pub tick_every: f64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Once the batch is done, seconds between ticks while the Worker stays up
    /// for the dashboard (local `wrangler dev` fires no crons by itself).
    #[arg(long, default_value_t = 10.0)]
    pub idle_tick_every: f64,
    /// Stop the Worker once the batch is done instead of keeping it up.
    #[arg(long)]
    pub exit: bool,
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let mut target = Target::open(&args.target, "demo", SETTINGS, Secrets::DevVars, false).await?;
    let api = target.api.clone();

    let plan = plan::demo(args.subjects);
    // In a group of their own, as the README's subjects: the default `daily`
    // schedule reaches only subjects without a group, so it adds no batch over them.
    let subjects: Vec<_> = plan
        .iter()
        .enumerate()
        .map(|(n, p)| SubjectIn {
            group: Some(GROUP.into()),
            ..p.subject(&target.sink, n)
        })
        .collect();
    let upserted = api.put_subjects(&subjects).await?;
    println!(
        "seeded {upserted} subjects in group {GROUP} (latency 50..500 ms, a few failing webhooks)"
    );

    // The state dir persists, so each demo saves the one-off again with a new
    // instant: a new key, a new batch.
    let (body, key) = steps::one_off_now_with(&api, "demo", json!({ "group": GROUP })).await?;
    println!("saved the schedule demo {body}; the next tick fires batch {key}");
    let mut running = tokio::task::JoinSet::new();
    let first = api.clone();
    running.spawn(async move { first.fire_cron(TICK_CRON).await });
    let batch = steps::await_batch(&api, &key, &mut running, Duration::from_secs(60)).await?;

    let pace = Pace {
        every: Duration::from_secs_f64(args.tick_every),
        max_in_flight: 2,
        timeout: Duration::from_secs(args.timeout_secs),
    };
    let finished = drive::until_finished(&api, &batch, pace, running)
        .await?
        .batch;
    println!(
        "\nfinal batch:\n{}",
        serde_json::to_string_pretty(&finished)?
    );
    let failed = api.all_items(&finished.id, Some("failed")).await?;
    if !failed.is_empty() {
        println!("\nfailed items:");
        for item in &failed {
            println!(
                "  {:<10} attempt {}/{}  {}",
                item.subject_id,
                item.attempt,
                item.max_attempts,
                item.last_error.as_deref().unwrap_or("-")
            );
        }
    }
    let stats = target.sink.stats(true).await?;
    println!(
        "\nsink: {} deliveries ({} with a valid signature), answers {:?}, {} redeliveries",
        stats.total, stats.valid_signatures, stats.by_status, stats.duplicates
    );
    let summary = sink_matches_batch(&finished, &stats, subjects.len())?;
    println!("check: {summary}");
    if !args.exit {
        serve_dashboard(&api, &args).await;
    }
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(())
}

/// The demo's own summary check: every delivery the sink saw is of the demo's
/// batch, and the distinct subjects delivered are exactly its items (a retried
/// item is delivered more than once, so deliveries are counted per subject). An
/// error, so the demo exits non-zero, when another batch reached the sink or an
/// item was never delivered.
pub fn sink_matches_batch(batch: &Batch, stats: &Stats, seeded: usize) -> Result<String> {
    let deliveries = stats.deliveries.as_deref().unwrap_or_default();
    let others: BTreeSet<&str> = deliveries
        .iter()
        .filter(|d| d.batch_id.as_deref() != Some(batch.id.0.as_str()))
        .map(|d| d.batch_id.as_deref().unwrap_or("none"))
        .collect();
    let subjects: BTreeSet<&str> = deliveries.iter().map(|d| d.subject_id.as_str()).collect();
    if !others.is_empty() {
        bail!(
            "the sink received deliveries of batches other than the demo's {}: {others:?}",
            batch.id.0
        );
    }
    if subjects.len() as u64 != batch.total || batch.total != seeded as u64 {
        bail!(
            "the sink saw {} subjects delivered, the batch has {} items, {seeded} subjects were seeded",
            subjects.len(),
            batch.total
        );
    }
    Ok(format!(
        "the sink's {} deliveries are all of batch {} and cover its {} items, each at least once",
        deliveries.len(),
        batch.id.0,
        batch.total
    ))
}

/// Prints where the dashboard is and how to sign in, then keeps the Worker up,
/// firing a tick now and then as the minute cron would. Never returns: on Ctrl-C
/// `main` drops this future, and the runtime's destructor stops wrangler dev.
async fn serve_dashboard(api: &Api, args: &DemoArgs) {
    println!("\ndashboard:   {}/dashboard", api.base());
    println!(
        "admin token: {}   (ADMIN_TOKEN from .dev.vars; this Worker is local)",
        api.token()
    );
    println!(
        "The Worker stays up (a tick every {} s drains new batches). Ctrl-C stops it.",
        args.idle_tick_every
    );
    let every = Duration::from_secs_f64(args.idle_tick_every.max(1.0));
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = api.fire_cron(TICK_CRON).await {
            eprintln!("tick failed: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(total: u64) -> Batch {
        serde_json::from_value(json!({
            "id": "b1", "key": "demo:x", "status": "finished", "total": total,
            "pending": 0, "processing": 0, "completed": total, "failed": 0, "cancelled": 0,
            "percent": 100.0, "created_at": "2026-11-24T12:00:00.000Z",
            "finished_at": "2026-11-24T12:01:00.000Z", "schedule_id": "demo"
        }))
        .unwrap()
    }

    fn stats(deliveries: &[(&str, &str)]) -> Stats {
        let deliveries: Vec<_> = deliveries
            .iter()
            .enumerate()
            .map(|(n, (batch, subject))| {
                json!({
                    "seq": n, "subject_id": subject, "idempotency_key": null, "delivery_no": 1,
                    "item_id": n, "batch_id": batch, "body_subject_id": subject, "attempt": 1,
                    "signature": "valid", "status": 200,
                    "received_at": "2026-11-24T12:00:30.000Z", "error": null
                })
            })
            .collect();
        serde_json::from_value(json!({
            "total": deliveries.len(), "valid_signatures": deliveries.len(),
            "invalid_signatures": 0, "unanswered": 0, "by_status": {}, "per_key": {},
            "duplicates": 0, "deliveries": deliveries
        }))
        .unwrap()
    }

    /// The Worker starts with the demo's settings: its lease is the smallest
    /// `core::timing` allows (2 calls of 2 s + 2 s grace, plus the 2 s wind-down),
    /// so a change to those rules shows here before `scripts/demo.sh` does.
    #[test]
    fn the_worker_accepts_the_demo_settings() {
        let lookup = |name: &str| {
            SETTINGS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        assert!(cron_fanout::core::settings::Settings::from_lookup(lookup).is_ok());
        let shorter = |name: &str| match name {
            "LEASE_SECONDS" => Some("9".to_string()),
            _ => lookup(name),
        };
        let err = cron_fanout::core::settings::Settings::from_lookup(shorter).unwrap_err();
        assert!(err.starts_with("LEASE_SECONDS"), "{err}");
    }

    #[test]
    fn the_check_passes_when_every_delivery_is_of_the_batch_and_covers_its_items() {
        let s = stats(&[("b1", "a"), ("b1", "b"), ("b1", "b")]);
        assert!(sink_matches_batch(&batch(2), &s, 2).is_ok());
    }

    #[test]
    fn the_check_fails_when_another_batch_reached_the_sink() {
        // What a `daily` fire over the demo's subjects looked like: the same
        // subjects delivered twice, once per batch.
        let s = stats(&[("b1", "a"), ("b1", "b"), ("d1", "a"), ("d1", "b")]);
        let e = sink_matches_batch(&batch(2), &s, 2).unwrap_err();
        assert!(e.to_string().contains("d1"), "{e}");
    }

    #[test]
    fn the_check_fails_when_an_item_was_never_delivered() {
        let s = stats(&[("b1", "a")]);
        assert!(sink_matches_batch(&batch(2), &s, 2).is_err());
    }
}
