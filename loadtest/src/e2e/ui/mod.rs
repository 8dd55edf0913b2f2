//! The e2e suite's checks of what an operator sees: the dashboard in a real
//! headless Chromium (sign-in, a running batch's progress moving, one batch's
//! failed items and throughput chart, the views at phone width, no console
//! errors or CSP violations, polling that stops while the tab is hidden). The
//! batch actions (`actions`, on the page helpers of `page`) and the schedules
//! view (`schedules`), when the Worker has their routes, are called from here,
//! and so are the completion callbacks and per-channel receipts (`delivery`) and
//! the limits view (`limits`) and what holds a batch's pending items
//! (`waiting`, on a Worker of its own); all drive the browser of `browser`. The numbers
//! behind the dashboard, over HTTP, are `e2e::metrics`.
//! Screenshots go to `.loadtest/screenshots/`.

pub mod actions;
pub mod browser;
pub mod delivery;
pub mod limits;
pub mod page;
pub mod schedules;
pub mod waiting;

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive::tick_until_finished;
use crate::driver::target::{Target, TargetArgs};
use crate::e2e::ui::browser::{fits_width, no_errors, number, Browser, WAIT};
use crate::runtime::api::Batch;
use crate::sink::faults::Faults;
use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

const TOKEN_KEY: &str = "cron-fanout.admin-token";
/// Items of the batch the browser watches, and how slow each delivery is: slow
/// enough that the batch runs over several ticks (the suite's budget lets one
/// tick do about 190 items), fast enough to stay under JOB_TIMEOUT_MS.
const UI_ITEMS: usize = 500;
const UI_LATENCY_MS: u64 = 500;
/// One item in this many answers 400: a permanent failure with a `last_error`.
const UI_FAIL_EVERY: usize = 100;

/// The dashboard in a real browser. Not optional: without Chromium the checks
/// fail, saying how to install it.
/// `args`: what starts the Worker of the `waiting` part.
pub async fn dashboard(target: &Target, args: &TargetArgs, checks: &mut Checks) -> Result<()> {
    let started = Instant::now();
    let repo = &args.repo;
    let shots = repo.join(".loadtest/screenshots");
    std::fs::create_dir_all(&shots)?;
    let browser = Browser::start(&repo.join(".loadtest/browser")).await;
    let Some(browser) = checks.step("headless Chromium starts under chromedriver", browser) else {
        return Ok(());
    };
    let result = scenario(&browser, target, args, &shots, checks).await;
    let closed = browser.close().await;
    result?;
    checks.step("the browser session closes", closed);
    println!(
        "# browser part took {:.1} s; screenshots in {}",
        started.elapsed().as_secs_f64(),
        shots.display()
    );
    Ok(())
}

/// What the dashboard's checks share: the browser, the Worker, the batch the
/// browser watches (with failing items and a completion callback), and what a
/// check leaves for the ones after it.
struct Dashboard<'a> {
    b: &'a Browser,
    target: &'a Target,
    shots: &'a Path,
    token: String,
    base: String,
    batch: Batch,
    /// The subjects of the batch's items that fail for good.
    failing: Vec<String>,
    /// The batch's card in the list.
    card: String,
    /// The Worker has the batch-control routes (and the page their buttons).
    control: bool,
    /// The sign-in check passed: every view after the first list reads the
    /// signed-in page.
    signed_in: bool,
    /// The ticks that run the batch, from the sign-in until it finishes.
    ticking: Option<JoinHandle<Result<Batch>>>,
    finished: Option<Batch>,
}

/// Seeds the batch the browser watches and runs the checks in order: its own
/// lists and, between them, those of `actions` and `delivery` (each with
/// a fixture of its own), as far as the Worker's features go.
async fn scenario(
    b: &Browser,
    target: &Target,
    args: &TargetArgs,
    shots: &Path,
    checks: &mut Checks,
) -> Result<()> {
    let api = &target.api;
    let (batch, failing) = seed_ui_batch(target).await?;
    // The parts of the page the Worker's routes switch on.
    let features = cron_fanout::api::page::features();
    let features: Vec<&str> = features.split(' ').collect();
    let f = &mut Dashboard {
        b,
        target,
        shots,
        token: api.token().to_string(),
        base: api.base().to_string(),
        card: format!("#batches [data-batch-id=\"{}\"]", batch.id.0),
        batch,
        failing,
        control: features.contains(&"batch-control"),
        signed_in: false,
        ticking: None,
        finished: None,
    };

    checks
        .run(
            f,
            vec![
                check!(
                    "browser: a wrong token shows a clear error, stores nothing and shows no data",
                    a_wrong_token_shows_an_error_and_no_data
                ),
                check!(
                    "browser: the wrong token's 401 is the only console error",
                    the_wrong_tokens_401_is_the_only_console_error
                ),
                check!(needed
                    "browser: a running batch's progress moves on its own, without a page reload",
                    a_running_batchs_progress_moves_without_a_reload
                ),
                check!(
                    "browser: a running batch shows its rate (items/min) and ETA",
                    a_running_batch_shows_its_rate_and_eta
                ),
                check!(
                    "the browser's batch finishes while ticks fire",
                    the_batch_finishes_while_ticks_fire
                ),
                check!(
                    "browser: a finished batch's view opens on its first status with items (completed), and never reads the empty pending list",
                    a_finished_batch_opens_on_its_first_status_with_items
                ),
                check!(
                    "browser: the batch view lists its failed items with last_error",
                    the_batch_view_lists_its_failed_items
                ),
                check!(
                    "browser: the throughput chart (SVG) has points",
                    the_throughput_chart_has_points
                ),
                check!(
                    "browser: a batch with on_finish shows its completion callback pending once it ended (the next tick sends it), then delivered after 1 attempt when that tick ran, without a reload; the receiver's origin shown, not its path",
                    the_completion_callback_shows_pending_then_delivered
                ),
                check!(
                    "browser: items by status, paged (20 completed items on the first page)",
                    items_by_status_are_paged
                ),
            ],
        )
        .await;
    // The sign-in check failed and cut the list above: everything after reads the
    // signed-in page.
    if !f.signed_in {
        println!("# skipped (needs the sign-in): the rest of the dashboard");
        // A tick task left running would tick on into the next part.
        if let Some(ticking) = f.ticking.take() {
            ticking.abort();
        }
        return Ok(());
    }

    // Batch control: retry the failed items once their receivers are fixed.
    if f.control {
        actions::retry_failed(b, target, &f.batch, &f.failing, shots, checks).await?;
    }
    // A multi item's receipts, and a callback its receiver refuses.
    delivery::receipts_and_refused_callback(b, target, shots, checks).await?;
    checks
        .run(
            f,
            vec![
                check!(
                    "browser: polling stops while the tab is hidden and resumes when visible",
                    polling_stops_while_the_tab_is_hidden
                ),
                check!(
                    "browser: the invocations view lists recent ticks",
                    the_invocations_view_lists_recent_ticks
                ),
            ],
        )
        .await;

    // Batch control: pause, resume and cancel a running batch; a refusal.
    if f.control {
        actions::pause_resume_cancel(b, target, shots, checks).await?;
        actions::refused_action(b, api, shots, checks).await?;
        b.client.goto(&format!("{}/#/", f.base)).await?;
    }
    checks
        .run(
            f,
            vec![check!(
                "browser: usable at phone width (390 px, no horizontal scrolling)",
                usable_at_phone_width
            )],
        )
        .await;
    if features.contains(&"schedules") {
        schedules::schedules_view(b, api, shots, checks).await?;
    }
    if features.contains(&"limits") {
        limits::limits_view(b, api, shots, checks).await?;
        // On another origin (its own Worker): back to this one's signed-in page.
        let waited = waiting::waiting_view(b, args, shots, checks).await;
        b.client.goto(&format!("{}/#/", f.base)).await?;
        waited?;
    }
    checks
        .run(
            f,
            vec![
                check!(
                    "browser: the token is in sessionStorage only (no cookie, not in the URL)",
                    the_token_is_in_session_storage_only
                ),
                check!(
                    "browser: signing out forgets the token and shows no data",
                    signing_out_forgets_the_token_and_the_data
                ),
                check!(
                    "browser: no console errors and no CSP violations while signed in",
                    no_console_errors_while_signed_in
                ),
                check!(
                    "browser: the CSP blocks an injected inline script, and the console reports it",
                    the_csp_blocks_an_injected_inline_script
                ),
            ],
        )
        .await;
    if let Some(done) = &f.finished {
        eprintln!("  [browser] batch {}: {}", done.id, done.progress());
    }
    Ok(())
}

// ---------------------------------------------------------------- signing in

async fn a_wrong_token_shows_an_error_and_no_data(f: &mut Dashboard<'_>) -> Result<()> {
    let b = f.b;
    b.client.goto(&format!("{}/", f.base)).await?;
    b.until("the sign-in form", WAIT, || async {
        Ok((b.count("#signin:not([hidden]) #token").await? == 1).then_some(()))
    })
    .await?;
    b.type_into("#token", "not-the-admin-token-0123").await?;
    b.click("#signin-button").await?;
    let message = b
        .until("the sign-in error", WAIT, || async {
            let visible = b.count("#signin-error:not([hidden])").await? == 1;
            Ok(if visible {
                b.text("#signin-error").await?
            } else {
                None
            })
        })
        .await;
    let stored = session_token(b).await?;
    let shown = b.count("#view *").await?;
    b.screenshot(&f.shots.join("signin-wrong-token.png"))
        .await?;
    let message = message?;
    ensure!(
        message.contains("not accepted") && stored.is_none() && shown == 0,
        "message {message:?}, stored token {stored:?}, {shown} elements in the view"
    );
    Ok(())
}

async fn the_wrong_tokens_401_is_the_only_console_error(f: &mut Dashboard<'_>) -> Result<()> {
    let logs = f.b.logs().await?;
    no_errors(&logs, &|e| e.message.contains("status of 401")).map_err(anyhow::Error::msg)
}

/// Signs in and watches the batch move while ticks fire, without a reload.
async fn a_running_batchs_progress_moves_without_a_reload(f: &mut Dashboard<'_>) -> Result<()> {
    let b = f.b;
    let completed = format!("{} [data-count=completed]", f.card);
    b.type_into("#token", &f.token).await?;
    b.click("#signin-button").await?;
    let shown_first = b
        .until("the batch in the list", WAIT, || async {
            number(b.text(&completed).await?)
        })
        .await?;
    b.client
        .execute("window.__notReloaded = true; return true;", vec![])
        .await?;
    let api = f.target.api.clone();
    f.ticking = Some(tokio::spawn(tick_until_finished(api, f.batch.id.clone())));
    let moved = b
        .until("the progress to move", WAIT, || async {
            let now = number(b.text(&completed).await?)?;
            Ok(now.filter(|&n| n > shown_first))
        })
        .await;
    let same_page = b
        .client
        .execute("return window.__notReloaded === true;", vec![])
        .await?
        == json!(true);
    let n = moved?;
    ensure!(same_page, "the page was reloaded");
    println!("#   completed shown: {shown_first} then {n}");
    f.signed_in = true;
    Ok(())
}

async fn a_running_batch_shows_its_rate_and_eta(f: &mut Dashboard<'_>) -> Result<()> {
    let (b, card) = (f.b, &f.card);
    let rate = b
        .until("a rate and an ETA", WAIT, || async {
            let rate = b.text(&format!("{card} [data-rate]")).await?;
            let eta = b.text(&format!("{card} [data-eta]")).await?;
            Ok(match (rate, eta) {
                (Some(r), Some(e)) if r.ends_with("/min") && e.starts_with("in ") => Some((r, e)),
                (Some(r), Some(e)) if r.ends_with("/min") && e == "any moment" => Some((r, e)),
                _ => None,
            })
        })
        .await;
    b.screenshot(&f.shots.join("batches.png")).await?;
    let (r, e) = rate?;
    println!("#   rate {r}, ETA {e}");
    Ok(())
}

async fn the_batch_finishes_while_ticks_fire(f: &mut Dashboard<'_>) -> Result<()> {
    let ticking = f.ticking.take().context("no ticks were started")?;
    f.finished = Some(ticking.await.context("the tick task")??);
    Ok(())
}

// ---------------------------------------------------------------- one batch

/// The view just opened on the finished batch (nothing pending): its items tab
/// is the first status with items, `completed`, and no items list it read asked
/// for `pending` (a walk of the whole batch that finds nothing). The page's
/// resource timings show which item lists the view reads as it opens.
async fn a_finished_batch_opens_on_its_first_status_with_items(
    f: &mut Dashboard<'_>,
) -> Result<()> {
    let b = f.b;
    b.client
        .execute(
            "performance.setResourceTimingBufferSize(10000); performance.clearResourceTimings(); return 0;",
            vec![],
        )
        .await?;
    b.click(&format!("{} a.batch-key", f.card)).await?;
    let opened = b
        .until("the items tab", WAIT, || async {
            // Drawn: rows, or the empty list's line.
            let pressed = b.text("#items .tabs button[aria-pressed=true]").await?;
            let drawn = b.count("#items tbody tr, #items .empty").await? > 0;
            Ok(pressed.filter(|_| drawn))
        })
        .await?;
    let reads = b
        .client
        .execute(
            "return performance.getEntriesByType('resource').map((e) => e.name)
               .filter((n) => n.includes('/items?') && !n.includes('status=failed'));",
            vec![],
        )
        .await?;
    let reads: Vec<String> = serde_json::from_value(reads)?;
    match reads.first() {
        Some(first)
            if opened.starts_with("completed")
                && first.contains("status=completed")
                && !reads.iter().any(|r| r.contains("status=pending")) =>
        {
            Ok(())
        }
        _ => bail!("tab {opened:?}, item lists read {reads:?}"),
    }
}

async fn the_batch_view_lists_its_failed_items(f: &mut Dashboard<'_>) -> Result<()> {
    let b = f.b;
    let rows = b
        .until("the failed items", WAIT, || async {
            let rows = b.count("#failed-items tbody tr").await?;
            let text = b.text("#failed-items").await?.unwrap_or_default();
            Ok((rows > 0 && text.contains("HTTP 400")).then_some(rows))
        })
        .await?;
    let want = UI_ITEMS / UI_FAIL_EVERY;
    ensure!(rows == want, "{rows} rows, want {want}");
    Ok(())
}

async fn the_throughput_chart_has_points(f: &mut Dashboard<'_>) -> Result<()> {
    let b = f.b;
    let points = b
        .until("the throughput chart", WAIT, || async {
            let n = b.count("#throughput svg .point").await?;
            Ok((n > 0).then_some(n))
        })
        .await?;
    println!("#   chart points: {points}");
    Ok(())
}

/// Pending until the next tick sends it, then delivered.
async fn the_completion_callback_shows_pending_then_delivered(f: &mut Dashboard<'_>) -> Result<()> {
    delivery::callback_delivered(f.b, f.target, &f.batch.id).await
}

/// The third status tab is `completed`: a full first page and a next one.
async fn items_by_status_are_paged(f: &mut Dashboard<'_>) -> Result<()> {
    let b = f.b;
    b.click("#items .tabs button:nth-child(3)").await?;
    let rows = b
        .until("the completed items", WAIT, || async {
            let pressed = b.text("#items .tabs button[aria-pressed=true]").await?;
            let rows = b.count("#items tbody tr").await?;
            Ok(pressed
                .filter(|p| p.starts_with("completed"))
                .map(|_| rows)
                .filter(|&r| r > 0))
        })
        .await;
    b.client.set_window_size(1280, 1500).await?;
    b.client
        .execute("window.scrollTo(0, 0); return 0;", vec![])
        .await?;
    b.screenshot(&f.shots.join("batch.png")).await?;
    let rows = rows?;
    ensure!(rows == 20, "{rows} rows");
    Ok(())
}

// ---------------------------------------------------------------- other views

/// Makes the page believe its tab is hidden (the event a real tab switch sends),
/// counts its API calls over three refresh periods, then shows it again.
async fn polling_stops_while_the_tab_is_hidden(f: &mut Dashboard<'_>) -> Result<()> {
    const FETCHES: &str = "return performance.getEntriesByType('resource')\
        .filter(e => e.initiatorType === 'fetch').length;";
    let b = f.b;
    let run = |script: &'static str| async move { b.client.execute(script, vec![]).await };
    run("performance.setResourceTimingBufferSize(100000); performance.clearResourceTimings(); return 0;").await?;
    run("Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});\
         Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});\
         document.dispatchEvent(new Event('visibilitychange')); return 0;")
        .await?;
    // A refresh already on its way may still land: count from a moment later.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = run(FETCHES).await?;
    tokio::time::sleep(Duration::from_millis(9000)).await;
    let after = run(FETCHES).await?;
    let live = b.text("#live").await?.unwrap_or_default();
    run("delete document.hidden; delete document.visibilityState;\
         document.dispatchEvent(new Event('visibilitychange')); return 0;")
    .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let resumed = run(FETCHES).await?;
    ensure!(
        before == after,
        "{before} fetches, then {after} while hidden"
    );
    ensure!(
        live.contains("paused"),
        "the live indicator says {live:?} while hidden"
    );
    ensure!(
        resumed.as_u64() > after.as_u64(),
        "no fetch after showing the tab again ({after} → {resumed})"
    );
    Ok(())
}

async fn the_invocations_view_lists_recent_ticks(f: &mut Dashboard<'_>) -> Result<()> {
    let b = f.b;
    b.click("#nav a[data-view=invocations]").await?;
    let ticks = b
        .until("the invocations table", WAIT, || async {
            let rows = b.count("#view tbody tr").await?;
            Ok((rows > 0).then_some(rows))
        })
        .await;
    b.client.set_window_size(1280, 900).await?;
    b.screenshot(&f.shots.join("invocations.png")).await?;
    ticks?;
    Ok(())
}

/// The list and the batch, no sideways scrolling.
async fn usable_at_phone_width(f: &mut Dashboard<'_>) -> Result<()> {
    let (b, base, card) = (f.b, &f.base, &f.card);
    b.client.set_window_size(390, 844).await?;
    b.client.goto(&format!("{base}/#/")).await?;
    b.until("the list at phone width", WAIT, || async {
        Ok((b.count(card).await? == 1).then_some(()))
    })
    .await?;
    let list_fits = fits_width(b).await?;
    b.screenshot(&f.shots.join("phone-batches.png")).await?;
    b.client
        .goto(&format!("{base}/#/batches/{}", f.batch.id.0))
        .await?;
    b.until("the batch at phone width", WAIT, || async {
        Ok((b.count("#throughput svg .point").await? > 0).then_some(()))
    })
    .await?;
    let batch_fits = fits_width(b).await?;
    b.screenshot(&f.shots.join("phone-batch.png")).await?;
    if f.control {
        b.screenshot_of("batch-actions", &f.shots.join("phone-batch-actions.png"))
            .await?;
    }
    ensure!(
        list_fits && batch_fits,
        "list fits: {list_fits}, batch fits: {batch_fits}"
    );
    Ok(())
}

// ---------------------------------------------------------------- the token, the CSP

/// The token never leaves the tab's session storage and the header.
async fn the_token_is_in_session_storage_only(f: &mut Dashboard<'_>) -> Result<()> {
    let (b, token) = (f.b, &f.token);
    let cookie = b.client.execute("return document.cookie;", vec![]).await?;
    let url = b.client.current_url().await?.to_string();
    let stored = session_token(b).await?;
    ensure!(
        cookie == json!("") && !url.contains(token) && stored.as_deref() == Some(token),
        "cookie {cookie}, url {url}, stored {}",
        stored.is_some()
    );
    Ok(())
}

/// Sign out: the data goes with the token.
async fn signing_out_forgets_the_token_and_the_data(f: &mut Dashboard<'_>) -> Result<()> {
    let b = f.b;
    b.client.set_window_size(1280, 900).await?;
    b.click("#signout").await?;
    let body = b.text("body").await?.unwrap_or_default();
    let stored = session_token(b).await?;
    ensure!(
        stored.is_none() && !body.contains(&f.batch.key.clone().unwrap_or_default()),
        "stored {}, page text still shows the batch",
        stored.is_some()
    );
    Ok(())
}

async fn no_console_errors_while_signed_in(f: &mut Dashboard<'_>) -> Result<()> {
    let logs = f.b.logs().await?;
    no_errors(&logs, &|_| false).map_err(anyhow::Error::msg)
}

/// The CSP is in force, and the console log the check before read would have
/// shown a violation: an injected inline script does not run, and the console
/// says why.
async fn the_csp_blocks_an_injected_inline_script(f: &mut Dashboard<'_>) -> Result<()> {
    let b = f.b;
    let ran = b
        .client
        .execute(
            "const s = document.createElement('script'); s.textContent = 'window.__inline = 1;';\
             document.body.append(s); return window.__inline === 1;",
            vec![],
        )
        .await?;
    let reported = b
        .until("the CSP report", Duration::from_secs(5), || async {
            let logs = b.logs().await?;
            Ok(logs
                .iter()
                .any(|e| e.message.contains("Content Security Policy"))
                .then_some(()))
        })
        .await;
    match (ran == json!(false), reported) {
        (true, Ok(())) => Ok(()),
        (ran, reported) => bail!("blocked: {ran}, reported: {reported:?}"),
    }
}

// ---------------------------------------------------------------- helpers

/// A batch of slow healthy items and a few permanent failures, created ad hoc
/// with a completion callback to the sink; with the subjects that fail.
async fn seed_ui_batch(target: &Target) -> Result<(Batch, Vec<String>)> {
    let fails = |n: usize| n % UI_FAIL_EVERY == UI_FAIL_EVERY / 2;
    let failing = (0..UI_ITEMS)
        .filter(|&n| fails(n))
        .map(|n| format!("ui-{n:04}"))
        .collect();
    let items: Vec<Value> = (0..UI_ITEMS)
        .map(|n| {
            let subject = format!("ui-{n:04}");
            let faults = if fails(n) {
                Faults {
                    status: Some(400),
                    ..Faults::default()
                }
            } else {
                Faults {
                    latency_ms: UI_LATENCY_MS,
                    ..Faults::default()
                }
            };
            json!({"subject_id": subject, "kind": "webhook",
                   "payload": {"url": target.sink.hook_url(&subject, &faults)}})
        })
        .collect();
    let key = format!("dashboard-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S"));
    let (created, batch) = target
        .api
        .create_batch(&json!({"key": key, "items": items,
            "on_finish": {"url": target.sink.callback_url("ui", &Faults::default())}}))
        .await?;
    ensure!(
        created && batch.total == UI_ITEMS as u64,
        "batch {key}: {batch:?}"
    );
    Ok((batch, failing))
}

async fn session_token(b: &Browser) -> Result<Option<String>> {
    let v = b
        .client
        .execute(
            "return sessionStorage.getItem(arguments[0]);",
            vec![json!(TOKEN_KEY)],
        )
        .await?;
    Ok(v.as_str().map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_from_formatted_counts() {
        assert_eq!(number(Some("1,234".into())).unwrap(), Some(1234));
        assert_eq!(number(Some("—".into())).unwrap(), None);
        assert_eq!(number(None).unwrap(), None);
    }
}
