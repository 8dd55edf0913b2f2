//! Firing tick crons until a batch finishes, with a progress bar on stderr.

use crate::api::{Api, Batch, TICK_CRON};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// How ticks are fired.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Minimum time between two tick starts (production ticks every minute).
    pub every: Duration,
    /// Ticks allowed to run at once, as overlapping cron runs would.
    pub max_in_flight: usize,
    /// Give up after this long.
    pub timeout: Duration,
}

/// The finished batch and how many ticks it took.
#[derive(Debug)]
pub struct Driven {
    pub batch: Batch,
    pub ticks: u64,
}

/// How often the progress bar reads `GET /batches/{id}`: often enough to watch,
/// rarely enough not to load the single-writer database being measured.
const POLL: Duration = Duration::from_millis(250);

/// Fires ticks at `pace` and updates a progress bar until `batch` finishes.
/// `running` holds scheduled runs already under way (e.g. the tick that fired the
/// batch and drains it); they count against `max_in_flight` but not
/// as ticks. Runs still going at the end are awaited, so that their invocation
/// summaries are stored before anyone reads `GET /invocations`.
pub async fn until_finished(
    api: &Api,
    batch: &Batch,
    pace: Pace,
    mut running: JoinSet<Result<()>>,
) -> Result<Driven> {
    let bar = ProgressBar::new(batch.total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40.cyan/blue} {pos}/{len} {msg}",
        )
        .context("progress bar template")?,
    );
    let start = Instant::now();
    let ticks = &mut running;
    let mut next_tick = Instant::now();
    let mut fired = 0u64;
    loop {
        while let Some(done) = ticks.try_join_next() {
            done??;
        }
        if Instant::now() >= next_tick && ticks.len() < pace.max_in_flight {
            let api = api.clone();
            ticks.spawn(async move { api.fire_cron(TICK_CRON).await });
            fired += 1;
            next_tick = Instant::now() + pace.every;
        }
        let b = api.batch(&batch.id).await?;
        bar.set_position(b.completed + b.failed);
        bar.set_message(format!("{} | ticks {fired}", b.progress()));
        if b.is_finished() {
            bar.finish();
            while let Some(done) = ticks.join_next().await {
                done??;
            }
            return Ok(Driven {
                batch: b,
                ticks: fired,
            });
        }
        if start.elapsed() > pace.timeout {
            bar.abandon();
            bail!("batch {} not finished after {:?}", b.id, pace.timeout);
        }
        tokio::time::sleep(POLL).await;
    }
}
