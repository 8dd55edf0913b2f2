//! Scenario steps that the e2e suite and `loadtest run` share: creating the daily
//! batch, crashing the runtime mid-batch, and re-firing the daily cron.

use crate::api::{Api, Batch, Id, DAILY_CRON, TICK_CRON};
use crate::target::Target;
use anyhow::{ensure, Context, Result};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The keys a daily batch created on any of `dates` has: `daily:<UTC date>`.
pub fn daily_keys(dates: &[chrono::NaiveDate]) -> HashSet<String> {
    dates
        .iter()
        .map(|d| format!("daily:{}", d.format("%Y-%m-%d")))
        .collect()
}

/// The batches whose key is one of `keys`.
pub async fn daily_batches(api: &Api, keys: &HashSet<String>) -> Result<Vec<Batch>> {
    Ok(api
        .batches(100)
        .await?
        .into_iter()
        .filter(|b| b.key.as_ref().is_some_and(|k| keys.contains(k)))
        .collect())
}

/// Fires the daily cron once and returns the keys today's batch may have (two
/// when the UTC date rolls over during the call) and the batches that carry one.
pub async fn fire_daily(api: &Api) -> Result<(HashSet<String>, Vec<Batch>)> {
    let before = chrono::Utc::now().date_naive();
    api.fire_cron(DAILY_CRON).await?;
    let after = chrono::Utc::now().date_naive();
    let keys = daily_keys(&[before, after]);
    let found = daily_batches(api, &keys).await?;
    Ok((keys, found))
}

/// Fires ticks (one at a time) until some but not all items of batch `id` are
/// completed, then SIGKILLs the runtime. Returns the batch as last seen before
/// the kill. The caller restarts the runtime.
pub async fn kill_mid_batch(target: &mut Target, id: &Id, timeout: Duration) -> Result<Batch> {
    let api = target.api.clone();
    let deadline = Instant::now() + timeout;
    let mut tick: Option<tokio::task::JoinHandle<Result<()>>> = None;
    let at_kill = loop {
        if tick.as_ref().is_none_or(|t| t.is_finished()) {
            if let Some(done) = tick.take() {
                done.await??;
            }
            let api = api.clone();
            tick = Some(tokio::spawn(async move { api.fire_cron(TICK_CRON).await }));
        }
        let b = api.batch(id).await?;
        if b.completed > 0 && b.completed + b.failed < b.total {
            break b;
        }
        ensure!(
            b.completed + b.failed < b.total,
            "the batch finished before the kill: {}",
            b.progress()
        );
        ensure!(
            Instant::now() < deadline,
            "no item completed within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let runtime = target.runtime.as_mut().context("no local runtime")?;
    runtime.kill_hard();
    if let Some(t) = tick {
        // The in-flight trigger request dies with the runtime; its error is expected.
        let _ = t.await;
    }
    Ok(at_kill)
}

/// Fires crons again after `daily` finished — a tick and the old daily expression
/// (every cron runs a tick) — : the key must still name that one batch, unchanged,
/// and the sink must have seen no new delivery.
pub async fn refire(target: &Target, daily: &Batch, deliveries_before: u64) -> Result<()> {
    target.api.fire_cron(TICK_CRON).await?;
    target.api.fire_cron(DAILY_CRON).await?;
    let batches = target.api.batches(100).await?;
    let same: Vec<&Batch> = batches.iter().filter(|b| b.key == daily.key).collect();
    ensure!(
        same.len() == 1,
        "{} batches with key {:?}",
        same.len(),
        daily.key
    );
    let b = same[0];
    ensure!(
        b.id == daily.id,
        "the key now names batch {}, was {}",
        b.id,
        daily.id
    );
    ensure!(
        b.total == daily.total && b.is_finished(),
        "batch changed: total {} status {}",
        b.total,
        b.status
    );
    let now = target.sink.stats(false).await?.total;
    ensure!(
        now == deliveries_before,
        "{} new deliveries",
        now - deliveries_before
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daily_keys_per_date() {
        let d = chrono::NaiveDate::from_ymd_opt(2026, 1, 31).unwrap();
        let next = d.succ_opt().unwrap();
        assert_eq!(
            daily_keys(&[d, d]),
            HashSet::from(["daily:2026-01-31".to_string()])
        );
        assert_eq!(daily_keys(&[d, next]).len(), 2);
    }
}
