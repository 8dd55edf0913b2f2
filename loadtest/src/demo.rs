//! `loadtest demo`: the README's demo. Starts the Worker on a persistent local
//! state dir with the secrets from `.dev.vars`, seeds subjects with realistic
//! latencies and a few faults, saves a one-off schedule due now, and fires a tick
//! every second (production ticks every minute): the first tick fires the
//! schedule's batch; the demo shows its progress until it finishes. Then it
//! prints the dashboard's URL and the admin token and keeps the Worker up until
//! Ctrl-C.

use crate::api::{Api, TICK_CRON};
use crate::drive::{self, Pace};
use crate::target::{Secrets, Target, TargetArgs};
use crate::{plan, steps};
use anyhow::Result;
use std::time::Duration;

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
    let subjects: Vec<_> = plan
        .iter()
        .enumerate()
        .map(|(n, p)| p.subject(&target.sink, n))
        .collect();
    let upserted = api.put_subjects(&subjects).await?;
    println!("seeded {upserted} subjects (latency 50..500 ms, a few failing webhooks)");

    // The state dir persists, so each demo saves the one-off again with a new
    // instant: a new key, a new batch.
    let (body, key) = steps::one_off_now(&api, "demo").await?;
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
    let stats = target.sink.stats(false).await?;
    println!(
        "\nsink: {} deliveries ({} with a valid signature), answers {:?}, {} redeliveries",
        stats.total, stats.valid_signatures, stats.by_status, stats.duplicates
    );
    if !args.exit {
        serve_dashboard(&api, &args).await;
    }
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(())
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
