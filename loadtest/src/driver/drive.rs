//! Firing tick crons until a batch reaches a state: finished with a progress bar
//! on stderr (`until_finished`, the runs), two ticks at a time printing progress
//! lines (`in_pairs`, the e2e suite), one at a time until ended, called back or
//! finished (the e2e parts).

use crate::runtime::api::{Api, Batch, Id, TICK_CRON};
use anyhow::{bail, ensure, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::time::{Duration, Instant};
use tokio::task::{JoinHandle, JoinSet};

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

/// Creates a batch of `items` under `key` and fires ticks every 200 ms, one at
/// a time, until it ends: the batch as it ended, and the seconds from its
/// creation to then.
pub async fn batch_until_finished(
    api: &Api,
    key: &str,
    items: Vec<serde_json::Value>,
    timeout: Duration,
) -> Result<(Driven, f64)> {
    let (created, b) = api
        .create_batch(&serde_json::json!({"key": key, "items": items}))
        .await?;
    ensure!(created, "batch {key} existed");
    let started = Instant::now();
    let pace = Pace {
        every: Duration::from_millis(200),
        max_in_flight: 1,
        timeout,
    };
    let driven = until_finished(api, &b, pace, JoinSet::new()).await?;
    Ok((driven, started.elapsed().as_secs_f64()))
}

/// How often the progress bar reads `GET /batches/{id}`: often enough to watch,
/// rarely enough not to load the single-writer database being measured.
const POLL: Duration = Duration::from_millis(250);

/// Fires ticks at `pace` and updates a progress bar until `batch` ends (finishes,
/// or ends cancelled).
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
        // Finished, or cancelled with nothing left in flight.
        if b.has_ended() {
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

/// How often `ticks_until` reads the batch: a request meant to land mid-batch must
/// not miss the moment.
const WATCH: Duration = Duration::from_millis(20);

/// Fires ticks one after another in the background until `ready` holds for the
/// batch (it must not end first); returns the batch as seen then and the tick still
/// running (await it, or kill the runtime under it).
pub async fn ticks_until(
    api: &Api,
    id: &Id,
    timeout: Duration,
    ready: impl Fn(&Batch) -> bool,
) -> Result<(Batch, JoinHandle<Result<()>>)> {
    let deadline = Instant::now() + timeout;
    let mut tick: Option<JoinHandle<Result<()>>> = None;
    loop {
        if tick.as_ref().is_none_or(|t| t.is_finished()) {
            if let Some(done) = tick.take() {
                done.await??;
            }
            let api = api.clone();
            tick = Some(tokio::spawn(async move { api.fire_cron(TICK_CRON).await }));
        }
        let b = api.batch(id).await?;
        if ready(&b) {
            return Ok((b, tick.context("a tick is running")?));
        }
        ensure!(
            !b.has_ended(),
            "batch {id} ended before the request: {}",
            b.progress()
        );
        ensure!(
            Instant::now() < deadline,
            "batch {id} not ready within {timeout:?}: {}",
            b.progress()
        );
        tokio::time::sleep(WATCH).await;
    }
}

/// Minimum time between two tick rounds of [`in_pairs`].
const TICK_PACING: Duration = Duration::from_millis(200);

/// Fires tick crons (two concurrently, to exercise exclusive claims) until the
/// batch is finished, printing progress whenever it changes.
pub async fn in_pairs(api: &Api, id: &Id, timeout: Duration, label: &str) -> Result<Batch> {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let b = api.batch(id).await?;
        let progress = b.progress();
        if progress != last {
            eprintln!(
                "  [{label} {:>5.1}s] {progress}",
                start.elapsed().as_secs_f64()
            );
            last = progress;
        }
        if b.is_finished() {
            return Ok(b);
        }
        if start.elapsed() >= timeout {
            bail!("not finished after {timeout:?}: {last}");
        }
        let round = Instant::now();
        let (a, b) = tokio::join!(api.fire_cron(TICK_CRON), api.fire_cron(TICK_CRON));
        a?;
        b?;
        tokio::time::sleep_until((round + TICK_PACING).into()).await;
    }
}

/// Fires ticks (one at a time) until the batch has ended; returns it.
pub async fn until_ended(api: &Api, id: &Id, timeout: Duration) -> Result<Batch> {
    let deadline = Instant::now() + timeout;
    loop {
        let b = api.batch(id).await?;
        if b.has_ended() {
            return Ok(b);
        }
        ensure!(
            Instant::now() < deadline,
            "batch {id} not ended within {timeout:?}: {}",
            b.progress()
        );
        api.fire_cron(TICK_CRON).await?;
    }
}

/// Fires ticks (one at a time) until the batch's callback is no longer pending;
/// returns the batch then.
pub async fn until_called_back(api: &Api, id: &Id, timeout: Duration) -> Result<Batch> {
    let deadline = Instant::now() + timeout;
    loop {
        let b = api.batch(id).await?;
        let cb = b.callback.as_ref().context("the batch has no callback")?;
        if b.has_ended() && cb.status != "pending" {
            return Ok(b);
        }
        ensure!(
            Instant::now() < deadline,
            "batch {id}'s callback still {} after {timeout:?}: {}",
            cb.status,
            b.progress()
        );
        api.fire_cron(TICK_CRON).await?;
    }
}

/// Fires ticks one after another until the batch is finished (at most 2 minutes).
pub async fn tick_until_finished(api: Api, id: Id) -> Result<Batch> {
    let start = Instant::now();
    loop {
        api.fire_cron(TICK_CRON).await?;
        let b = api.batch(&id).await?;
        if b.is_finished() {
            return Ok(b);
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("not finished after 2 minutes: {}", b.progress());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A batch `key` over every subject, ticked one at a time every 200 ms until it
/// finishes: the batch and how it was driven.
pub async fn subjects_batch_finished(
    api: &Api,
    key: &str,
    timeout: Duration,
) -> Result<(Batch, Driven)> {
    let (_, batch) = api
        .create_batch(&serde_json::json!({"key": key, "source": "subjects"}))
        .await?;
    let pace = Pace {
        every: Duration::from_millis(200),
        max_in_flight: 1,
        timeout,
    };
    let driven = until_finished(api, &batch, pace, JoinSet::new()).await?;
    Ok((batch, driven))
}
