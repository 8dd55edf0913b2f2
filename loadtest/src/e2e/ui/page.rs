//! What the dashboard checks of actions do on a page and beside it: read a
//! badge, a stat or a button's state, press a button and confirm, hold the page's
//! polling (and gate its reads of failed items) so that what it shows next comes
//! from the action itself, and fire ticks in the background while it watches.

use crate::e2e::ui::browser::Browser;
use crate::e2e::ui::browser::{number, WAIT};
use crate::runtime::api::{Api, Batch, Id, TICK_CRON};
use anyhow::{ensure, Context, Result};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The batch view's status badge (`running`, `paused`, ...).
async fn badge(b: &Browser) -> Result<Option<String>> {
    b.text("#view .batch-head .badge").await
}

/// A number of the batch view's stats (`completed`, `failed`, `cancelled`, ...).
async fn stat(b: &Browser, name: &str) -> Result<Option<u64>> {
    number(b.text(&format!("#view [data-stat={name}]")).await?)
}

/// Whether the batch view's button for `action` is there and enabled.
pub async fn enabled(b: &Browser, action: &str) -> Result<Option<bool>> {
    let v = b
        .client
        .execute(
            "const el = document.querySelector(`#batch-actions [data-action=${arguments[0]}]`);\
             return el ? !el.disabled : null;",
            vec![json!(action)],
        )
        .await?;
    Ok(v.as_bool())
}

/// Stops the page's polling: the timer of its next refresh is cleared (every
/// timer of the page: their ids count up from 1) and no new one can be set. Then
/// waits until a refresh already on its way has landed: no fetch ended for a
/// second.
pub async fn freeze_polling(b: &Browser) -> Result<()> {
    b.client
        .execute(
            "if (!window.__setTimeout) window.__setTimeout = window.setTimeout;\
             const newest = window.__setTimeout(() => {}, 0);\
             for (let id = 1; id <= newest; id++) clearTimeout(id);\
             window.setTimeout = () => 0; return 0;",
            vec![],
        )
        .await?;
    let mut fetches = fetch_count(b).await?;
    let start = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let now = fetch_count(b).await?;
        if now == fetches {
            return Ok(());
        }
        ensure!(
            start.elapsed() < WAIT,
            "the page kept fetching after its polling stopped"
        );
        fetches = now;
    }
}

/// The page's fetches that have ended so far.
async fn fetch_count(b: &Browser) -> Result<u64> {
    let v = b
        .client
        .execute(
            "performance.setResourceTimingBufferSize(100000);\
             return performance.getEntriesByType('resource').filter(e => e.initiatorType === 'fetch').length;",
            vec![],
        )
        .await?;
    v.as_u64().context("a count of fetches")
}

/// Starts the polling again (the page refreshes when its tab becomes visible).
pub async fn thaw_polling(b: &Browser) -> Result<()> {
    b.client
        .execute(
            "window.setTimeout = window.__setTimeout;\
             document.dispatchEvent(new Event('visibilitychange')); return 0;",
            vec![],
        )
        .await?;
    Ok(())
}

/// Presses the button `css`, waits for the confirmation dialog (screenshot to
/// `shot`, if given) and confirms.
pub async fn press(b: &Browser, css: &str, shot: Option<&Path>) -> Result<()> {
    b.click(css).await?;
    b.until("the confirmation dialog", WAIT, || async {
        Ok((b.count("#confirm[open]").await? == 1).then_some(()))
    })
    .await?;
    if let Some(path) = shot {
        b.screenshot(path).await?;
    }
    b.click("#confirm-yes").await
}

/// Waits until the batch view shows what `want` accepts (badge and stats read
/// together), for at most `WAIT`.
pub async fn until_shown<F>(b: &Browser, what: &str, want: F) -> Result<Shown>
where
    F: Fn(&Shown) -> bool,
{
    b.until(what, WAIT, || async {
        let shown = shown(b).await?;
        Ok(want(&shown).then_some(shown))
    })
    .await
}

/// What the batch view shows of a batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shown {
    pub status: String,
    pub completed: Option<u64>,
    pub failed: Option<u64>,
    pub cancelled: Option<u64>,
    pub processing: Option<u64>,
    pub pending: Option<u64>,
    pub total: Option<u64>,
    pub dialog_open: bool,
}

pub async fn shown(b: &Browser) -> Result<Shown> {
    Ok(Shown {
        status: badge(b).await?.unwrap_or_default(),
        completed: stat(b, "completed").await?,
        failed: stat(b, "failed").await?,
        cancelled: stat(b, "cancelled").await?,
        processing: stat(b, "processing").await?,
        pending: stat(b, "pending").await?,
        total: stat(b, "total").await?,
        dialog_open: b.count("#confirm[open]").await? == 1,
    })
}

// ---------------------------------------------------------------- ticks

/// Fires ticks one after another in the background until stopped, counting them.
pub struct Ticker {
    pub stop: Arc<AtomicBool>,
    pub fired: Arc<AtomicU64>,
    pub task: JoinHandle<Result<()>>,
}

impl Ticker {
    pub fn start(api: Api) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(AtomicU64::new(0));
        let (s, f) = (stop.clone(), fired.clone());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::SeqCst) {
                api.fire_cron(TICK_CRON).await?;
                f.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(())
        });
        Ticker { stop, fired, task }
    }

    pub fn fired(&self) -> u64 {
        self.fired.load(Ordering::SeqCst)
    }

    /// Waits until `n` more ticks than `since` have completed.
    pub async fn until_fired(&self, since: u64, n: u64) -> Result<()> {
        let start = std::time::Instant::now();
        while self.fired() < since + n {
            ensure!(
                !self.task.is_finished(),
                "the ticks stopped (a tick failed)"
            );
            ensure!(
                start.elapsed() < WAIT,
                "{n} ticks did not fire within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    pub async fn stop(self) -> Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.context("the tick task")?
    }
}

/// Polls the API until `ready` holds for the batch (at most `WAIT`).
pub async fn until_batch(
    api: &Api,
    id: &Id,
    what: &str,
    ready: impl Fn(&Batch) -> bool,
) -> Result<Batch> {
    let start = std::time::Instant::now();
    loop {
        let batch = api.batch(id).await?;
        if ready(&batch) {
            return Ok(batch);
        }
        ensure!(
            start.elapsed() < WAIT,
            "batch {id}: {what} not within {WAIT:?}: {}",
            batch.progress()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
