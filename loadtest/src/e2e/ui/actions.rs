//! The dashboard's batch actions in the real browser, run by `ui::dashboard`:
//! "Retry" on a failed item's row and "Retry failed" after the sink is fixed;
//! pause (progress stops while ticks go on), resume and cancel of a running
//! batch; a refused action (409) showing the API's message. The page helpers
//! they use are `page`; the schedules view is `schedules`.
//!
//! Each action is pressed the way an operator does (its button, then the dialog's
//! confirm button) with the page's polling frozen, so what the page shows next
//! comes from the action itself, not from the next poll.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive::tick_until_finished;
use crate::driver::steps::webhook_batch;
use crate::driver::target::Target;
use crate::e2e::ui::browser::Browser;
use crate::e2e::ui::browser::{no_errors, number, WAIT};
use crate::e2e::ui::page::{
    enabled, freeze_polling, press, shown, thaw_polling, until_batch, until_shown, Shown, Ticker,
};
use crate::runtime::api::{encode, Api, Batch, Id};
use crate::sink::faults::Faults;
use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// The page's refresh period (`REFRESH_MS` in app.js) plus slack: waiting this
/// long lets at least one poll land.
const ONE_POLL: Duration = Duration::from_millis(3_800);
/// Items of the batch that is paused, resumed and cancelled, and how slow each
/// delivery is: it must still have pending items after a pause and a resume.
const CONTROL_ITEMS: usize = 1_000;
const CONTROL_LATENCY_MS: u64 = 500;
/// Ticks that fire while the batch is paused, in which nothing may progress.
const PAUSED_TICKS: u64 = 3;

// ---------------------------------------------------------------- retry failed

/// How late the page gets the answer of each read of failed items while the
/// retries are checked: a view that drew its counts before its lists would be
/// seen between the two (the Worker answers a page read in a few milliseconds,
/// too fast to catch that reliably).
const SLOW_FAILED_READ_MS: u64 = 500;

/// Wraps the page's `fetch` so that its reads of failed items (`status=failed`:
/// the failed list and the items tab) reach the page `delay_ms` after the Worker
/// answered; with `hold`, those started from now on are kept, once answered,
/// until `release_held_reads`, and counted in `taken` once the page has read
/// their body. Returns how many are kept now.
async fn gate_failed_reads(b: &Browser, delay_ms: u64, hold: bool) -> Result<u64> {
    let v = b
        .client
        .execute(
            "const [delay, hold] = arguments;\
             const later = window.__setTimeout || window.setTimeout;\
             if (!window.__gate) {\
               const gate = { fetch: window.fetch, delay: 0, hold: false, held: [], released: 0, taken: 0 };\
               window.__gate = gate;\
               window.fetch = async (input, init) => {\
                 if (!String(input).includes('status=failed')) return gate.fetch.call(window, input, init);\
                 const kept = gate.hold;\
                 const res = await gate.fetch.call(window, input, init);\
                 const body = await res.text();\
                 if (!kept) {\
                   await new Promise((go) => later(go, gate.delay));\
                   return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });\
                 }\
                 await new Promise((go) => gate.held.push(go));\
                 const answer = new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });\
                 const json = answer.json.bind(answer);\
                 answer.json = async () => { const v = await json(); gate.taken++; return v; };\
                 return answer;\
               };\
             }\
             window.__gate.delay = delay; window.__gate.hold = hold;\
             return window.__gate.held.length;",
            vec![json!(delay_ms), json!(hold)],
        )
        .await?;
    v.as_u64().context("a count of held reads")
}

/// Hands the held reads to the page, and waits until it has read their answers
/// (what it does with one then runs before any script of the test can: it is
/// all promise continuations, no more I/O). Returns how many have been handed
/// over since the gate was put on.
async fn release_held_reads(b: &Browser) -> Result<u64> {
    let v = b
        .client
        .execute(
            "const held = window.__gate.held.splice(0);\
             held.forEach((go) => go());\
             window.__gate.released += held.length;\
             return window.__gate.released;",
            vec![],
        )
        .await?;
    let released = v.as_u64().context("a count of released reads")?;
    b.until("the page to read the held answers", WAIT, || async {
        let taken = b
            .client
            .execute("return window.__gate.taken;", vec![])
            .await?
            .as_u64()
            .context("a count of answers read")?;
        Ok((taken == released).then_some(()))
    })
    .await?;
    Ok(released)
}

/// Takes the gate off: the page's own `fetch` again.
async fn ungate_reads(b: &Browser) -> Result<()> {
    b.client
        .execute(
            "if (window.__gate) { window.__gate.held.splice(0).forEach((go) => go());\
               window.fetch = window.__gate.fetch; delete window.__gate; }\
             return 0;",
            vec![],
        )
        .await?;
    Ok(())
}

/// Rows of the batch view's failed list and of its items table (the items tab
/// shown).
async fn rows(b: &Browser) -> Result<(usize, usize)> {
    Ok((
        b.count("#failed-items tbody tr").await?,
        b.count("#items tbody tr").await?,
    ))
}

/// On the open view of the finished batch `batch`, whose `failing` subjects
/// failed for good: fixes their receivers, retries one from its row, another
/// through the API (another operator) while a refresh of the page is on its way,
/// then the rest with "Retry failed", and watches the batch run again and
/// finish.
///
/// With polling frozen, what the page shows when the confirmation dialog closes
/// must be the action's whole result (the page promises that: it closes the
/// dialog once the batch after the action and every list the action changed are
/// drawn), and no answer of a read started before the action may replace it.
pub async fn retry_failed(
    b: &Browser,
    target: &Target,
    batch: &Batch,
    failing: &[String],
    shots: &Path,
    checks: &mut Checks,
) -> Result<()> {
    let failed = failing.len() as u64;
    ensure!(failed >= 3, "{failed} failing subjects: the checks need 3");
    target.sink.fix(failing).await?;
    let (left, total) = (failed - 2, batch.total);
    let mut f = Retry {
        b,
        api: &target.api,
        batch,
        shots,
        failed,
    };
    checks
        .run(
            &mut f,
            vec![
                check!(
                    format!("browser: \"Retry\" on a failed item's row, confirmed, requeues it at once (polling frozen): failed {failed} → {}, and its row has left the failed list when the dialog closes", failed - 1),
                    retry_on_a_row_requeues_the_item_at_once
                ),
                check!(
                    format!("browser: \"Retry failed\", confirmed after the sink is fixed: failed {left} → 0 and the batch running again at once, the failed list and the failed items tab empty when the dialog closes"),
                    retry_failed_requeues_the_rest_at_once
                ),
                check!(
                    format!("browser: an answer of a read started before \"Retry failed\" ({left} failed rows, held until after it) does not replace the view: still failed 0, no failed row"),
                    an_answer_read_before_the_retry_does_not_replace_the_view
                ),
                check!(
                    format!("browser: the replayed batch runs and finishes again: finished, {total} completed, 0 failed"),
                    the_replayed_batch_finishes_again
                ),
            ],
        )
        .await;
    Ok(())
}

/// What the retry checks share: the browser on the finished batch's view, and
/// how many of its items failed.
struct Retry<'a> {
    b: &'a Browser,
    api: &'a Api,
    batch: &'a Batch,
    shots: &'a Path,
    failed: u64,
}

async fn retry_on_a_row_requeues_the_item_at_once(f: &mut Retry<'_>) -> Result<()> {
    let b = f.b;
    freeze_polling(b).await?;
    gate_failed_reads(b, SLOW_FAILED_READ_MS, false).await?;
    press(b, "#failed-items [data-retry-item]", None).await?;
    let one = until_shown(b, "one failed item fewer", |s| {
        s.failed == Some(f.failed - 1) && !s.dialog_open
    })
    .await;
    let (listed, _) = rows(b).await?;
    one?;
    ensure!(listed as u64 == f.failed - 1, "{listed} failed rows listed");
    Ok(())
}

async fn retry_failed_requeues_the_rest_at_once(f: &mut Retry<'_>) -> Result<()> {
    let (b, api, failed) = (f.b, f.api, f.failed);
    // The items tab of failed items, which the replay empties too.
    b.click("#items .tabs button:nth-child(4)").await?;
    b.until("the items tab of failed items", WAIT, || async {
        let pressed = b.text("#items .tabs button[aria-pressed=true]").await?;
        let (_, items) = rows(b).await?;
        Ok(
            (pressed.is_some_and(|p| p.starts_with("failed")) && items as u64 == failed - 1)
                .then_some(()),
        )
    })
    .await?;

    // Another operator requeues one more through the API; a refresh of the page
    // (as a poll would) reads the failed list, and that answer is held back until
    // after the replay below.
    let first = api
        .all_items(&f.batch.id, Some("failed"))
        .await?
        .into_iter()
        .next()
        .context("a failed item")?;
    ensure!(
        api.retry_item(first.id).await? == 1,
        "item {} not requeued",
        first.id
    );
    let left = failed - 2;
    gate_failed_reads(b, SLOW_FAILED_READ_MS, true).await?;
    b.client
        .execute(
            "document.dispatchEvent(new Event('visibilitychange')); return 0;",
            vec![],
        )
        .await?;
    b.until(
        "a refresh's read of the failed items, answered and held",
        WAIT,
        || async {
            Ok((gate_failed_reads(b, SLOW_FAILED_READ_MS, true).await? == 1).then_some(()))
        },
    )
    .await?;
    gate_failed_reads(b, SLOW_FAILED_READ_MS, false).await?;

    press(
        b,
        "#batch-actions [data-action=retry]",
        Some(&f.shots.join("confirm-retry.png")),
    )
    .await?;
    let all = until_shown(b, "no failed item and the batch running", |s| {
        s.failed == Some(0) && s.status == "running" && !s.dialog_open
    })
    .await;
    let notice = b.text("#notice").await?.unwrap_or_default();
    let (listed, tab) = rows(b).await?;
    all?;
    ensure!(
        notice.contains(&format!("Requeued {left} failed items")),
        "notice {notice:?}"
    );
    ensure!(
        (listed, tab) == (0, 0),
        "{listed} failed rows still listed, {tab} in the failed items tab"
    );
    Ok(())
}

/// The refresh's read, started before the replay, reaches the page once the
/// replay's own reads have been drawn (at once on a page that keeps its
/// promise; a bounded wait for one that does not, so the stale answer really
/// comes last). Then the page's own reads and polling again.
async fn an_answer_read_before_the_retry_does_not_replace_the_view(
    f: &mut Retry<'_>,
) -> Result<()> {
    let b = f.b;
    let verdict: Result<()> = async {
        let emptied = b
            .until("the failed list emptied", WAIT, || async {
                Ok((rows(b).await?.0 == 0).then_some(()))
            })
            .await;
        let released = release_held_reads(b).await?;
        let after = shown(b).await?;
        let (listed, _) = rows(b).await?;
        emptied?;
        ensure!(released == 1, "{released} held reads handed over");
        ensure!(
            after.failed == Some(0) && listed == 0,
            "shown {after:?}, {listed} failed rows listed"
        );
        Ok(())
    }
    .await;
    let restored = async {
        ungate_reads(b).await?;
        thaw_polling(b).await
    }
    .await;
    verdict.and(restored)
}

async fn the_replayed_batch_finishes_again(f: &mut Retry<'_>) -> Result<()> {
    tick_until_finished(f.api.clone(), f.batch.id.clone()).await?;
    let total = f.batch.total;
    until_shown(f.b, "the batch finished again", |s| {
        s.status == "finished" && s.completed == Some(total) && s.failed == Some(0)
    })
    .await?;
    Ok(())
}

// ---------------------------------------------------------------- pause, resume, cancel

/// A running batch paused, resumed and cancelled from its view while ticks fire.
pub async fn pause_resume_cancel(
    b: &Browser,
    target: &Target,
    shots: &Path,
    checks: &mut Checks,
) -> Result<()> {
    let api = &target.api;
    let key = format!("ui-control-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S"));
    let faults = Faults {
        latency_ms: CONTROL_LATENCY_MS,
        ..Faults::default()
    };
    let batch = webhook_batch(api, &target.sink, &key, CONTROL_ITEMS, &faults).await?;
    b.client
        .goto(&format!("{}/#/batches/{}", api.base(), encode(&batch.id.0)))
        .await?;
    until_shown(b, "the new batch running", |s| {
        s.status == "running" && s.total == Some(CONTROL_ITEMS as u64)
    })
    .await?;
    let mut f = Control {
        b,
        api,
        shots,
        id: batch.id,
        ticker: Ticker::start(api.clone()),
        paused: None,
    };
    let result = pause_resume_cancel_ticking(&mut f, checks).await;
    let stopped = f.ticker.stop().await;
    result?;
    stopped
}

async fn pause_resume_cancel_ticking(f: &mut Control<'_>, checks: &mut Checks) -> Result<()> {
    until_shown(f.b, "the batch to progress", |s| {
        s.completed.is_some_and(|c| c > 0)
    })
    .await?;
    checks
        .run(
            f,
            vec![
                check!(needed
                    "browser: \"Pause\", confirmed, shows the batch paused at once (polling frozen); Pause is then disabled, Resume enabled",
                    pause_shows_the_batch_paused_at_once
                ),
                check!(
                    "browser: the list shows the batch paused, offering only Resume and Cancel batch",
                    the_list_shows_the_batch_paused
                ),
            ],
        )
        .await;
    // The next check's name carries what the pause held, known only now.
    let Some(held) = f.paused.as_ref().map(|p| p.held.completed) else {
        return Ok(());
    };
    let total = CONTROL_ITEMS;
    checks
        .run(
            f,
            vec![
                check!(
                    format!("browser: a paused batch does not progress: completed stays {held} over {PAUSED_TICKS} ticks, on the page and in the API, and it stays paused"),
                    a_paused_batch_does_not_progress
                ),
                check!(
                    "browser: \"Resume\", confirmed, shows the batch running at once, and its progress moves again",
                    resume_shows_the_batch_running_and_moving
                ),
                check!(needed
                    "browser: \"Cancel batch\", confirmed, shows the batch cancelled at once with its cancelled count (stats and bar legend)",
                    cancel_shows_the_batch_cancelled_at_once
                ),
                check!(
                    format!("browser: the cancelled batch's counts add up on the page: completed + failed + cancelled = {total}, and a `cancelled` items tab with its count"),
                    the_cancelled_batchs_counts_add_up
                ),
            ],
        )
        .await;
    Ok(())
}

/// What the pause, resume and cancel checks share: the browser, the batch they
/// act on, the ticks that fire meanwhile, and what the pause held.
struct Control<'a> {
    b: &'a Browser,
    api: &'a Api,
    shots: &'a Path,
    id: Id,
    ticker: Ticker,
    paused: Option<Paused>,
}

/// The paused batch once nothing was in flight (`held`), and after
/// `PAUSED_TICKS` more ticks, in the API (`after`) and on the page.
struct Paused {
    held: Batch,
    after: Batch,
    page: Shown,
}

/// Pause: shown at once (polling frozen, then started again).
async fn pause_shows_the_batch_paused_at_once(f: &mut Control<'_>) -> Result<()> {
    let b = f.b;
    let verdict: Result<()> = async {
        freeze_polling(b).await?;
        press(b, "#batch-actions [data-action=pause]", None).await?;
        let paused = until_shown(b, "the batch paused", |s| {
            s.status == "paused" && !s.dialog_open
        })
        .await;
        let buttons = (enabled(b, "pause").await?, enabled(b, "resume").await?);
        let s = paused?;
        ensure!(
            buttons == (Some(false), Some(true)),
            "shown {s:?}, pause/resume enabled: {buttons:?}"
        );
        Ok(())
    }
    .await;
    verdict.and(thaw_polling(b).await)
}

/// Items claimed before the pause still run and commit; then nothing moves while
/// ticks go on. The list shows it paused too, with what can be done to it.
async fn the_list_shows_the_batch_paused(f: &mut Control<'_>) -> Result<()> {
    let (b, api, id) = (f.b, f.api, &f.id);
    let held = until_batch(api, id, "nothing in flight", |b| b.processing == 0).await?;
    let since = f.ticker.fired();
    f.ticker.until_fired(since, PAUSED_TICKS).await?;
    tokio::time::sleep(ONE_POLL).await;
    let after = api.batch(id).await?;
    let page = shown(b).await?;
    b.screenshot(&f.shots.join("batch-paused.png")).await?;
    f.paused = Some(Paused { held, after, page });
    b.client.goto(&format!("{}/#/", api.base())).await?;
    let card = format!("#batches [data-batch-id=\"{id}\"]");
    let listed = b
        .until("the paused batch in the list", WAIT, || async {
            let status = b.text(&format!("{card} .badge")).await?;
            let actions: Vec<String> = serde_json::from_value(
                b.client
                    .execute(
                        "return [...document.querySelectorAll(arguments[0] + ' [data-action]')].map(e => e.dataset.action);",
                        vec![json!(card)],
                    )
                    .await?,
            )?;
            Ok((status.as_deref() == Some("paused")).then_some(actions))
        })
        .await;
    b.screenshot(&f.shots.join("batches-paused.png")).await?;
    let actions = listed?;
    ensure!(
        actions == ["resume", "cancel"],
        "actions offered: {actions:?}"
    );
    Ok(())
}

async fn a_paused_batch_does_not_progress(f: &mut Control<'_>) -> Result<()> {
    let b = f.b;
    let Paused { held, after, page } = f.paused.as_ref().context("the batch was not paused")?;
    b.client
        .goto(&format!("{}/#/batches/{}", f.api.base(), encode(&f.id.0)))
        .await?;
    until_shown(b, "the paused batch's view", |s| s.status == "paused").await?;
    ensure!(
        after.completed == held.completed
            && after.status == "paused"
            && page.completed == Some(held.completed)
            && page.status == "paused",
        "held {}, then API {} ({}), page {page:?}",
        held.progress(),
        after.progress(),
        after.status
    );
    Ok(())
}

/// Resume: running at once, and progress moves again.
async fn resume_shows_the_batch_running_and_moving(f: &mut Control<'_>) -> Result<()> {
    let b = f.b;
    let held = f
        .paused
        .as_ref()
        .context("the batch was not paused")?
        .held
        .completed;
    freeze_polling(b).await?;
    press(b, "#batch-actions [data-action=resume]", None).await?;
    let resumed = until_shown(b, "the batch running", |s| {
        s.status == "running" && !s.dialog_open
    })
    .await;
    thaw_polling(b).await?;
    resumed?;
    let s = until_shown(b, "progress after the resume", |s| {
        s.completed.is_some_and(|c| c > held)
    })
    .await?;
    println!(
        "#   completed {held} when paused, {:?} after the resume",
        s.completed
    );
    Ok(())
}

/// Cancel: cancelled at once, with the count of items it cancelled (polling
/// frozen, then started again).
async fn cancel_shows_the_batch_cancelled_at_once(f: &mut Control<'_>) -> Result<()> {
    let b = f.b;
    let before = f.api.batch(&f.id).await?;
    ensure!(
        before.pending > 0,
        "nothing left to cancel: {}",
        before.progress()
    );
    let verdict: Result<()> = async {
        freeze_polling(b).await?;
        press(
            b,
            "#batch-actions [data-action=cancel]",
            Some(&f.shots.join("confirm-cancel.png")),
        )
        .await?;
        let cancelled = until_shown(b, "the batch cancelled", |s| {
            s.status == "cancelled" && s.cancelled.is_some_and(|n| n > 0) && !s.dialog_open
        })
        .await;
        let legend = number(b.text("#view [data-count=cancelled]").await?)?;
        let s = cancelled?;
        ensure!(legend == s.cancelled, "shown {s:?}, legend {legend:?}");
        println!("#   cancelled {:?} of {CONTROL_ITEMS}", s.cancelled);
        Ok(())
    }
    .await;
    verdict.and(thaw_polling(b).await)
}

async fn the_cancelled_batchs_counts_add_up(f: &mut Control<'_>) -> Result<()> {
    let b = f.b;
    let ended = until_batch(f.api, &f.id, "the cancelled batch ended", Batch::has_ended).await?;
    let total = CONTROL_ITEMS as u64;
    let adds_up = until_shown(b, "the cancelled batch's final counts", |s| {
        s.status == "cancelled"
            && s.pending == Some(0)
            && s.processing == Some(0)
            && s.completed == Some(ended.completed)
            && s.cancelled == Some(ended.cancelled)
    })
    .await;
    let tab = b.text("#items .tabs button:nth-child(5)").await?;
    b.screenshot(&f.shots.join("batch-cancelled.png")).await?;
    let s = adds_up?;
    let sum = s.completed.unwrap_or(0) + s.failed.unwrap_or(0) + s.cancelled.unwrap_or(0);
    let tab_count = tab
        .as_deref()
        .filter(|t| t.starts_with("cancelled"))
        .and_then(|t| number(Some(t.to_string())).ok().flatten());
    ensure!(
        sum == total && tab_count == Some(ended.cancelled),
        "shown {s:?} (sum {sum}), tab {tab:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------- a refused action

/// The page offers "Pause" for a running batch; another operator cancels it
/// before the confirmation: the 409 the Worker answers is shown as it is, and
/// the view catches up.
pub async fn refused_action(
    b: &Browser,
    api: &Api,
    shots: &Path,
    checks: &mut Checks,
) -> Result<()> {
    let key = format!("ui-refused-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S"));
    let items: Vec<Value> = (0..3)
        .map(|n| json!({"subject_id": format!("{key}-{n}"), "kind": "noop", "payload": {}}))
        .collect();
    let (_, batch) = api
        .create_batch(&json!({"key": key, "items": items}))
        .await?;
    b.client
        .goto(&format!("{}/#/batches/{}", api.base(), encode(&batch.id.0)))
        .await?;
    until_shown(b, "the batch running", |s| s.status == "running").await?;
    let mut f = Refusal {
        b,
        api,
        shots,
        id: batch.id,
    };
    checks
        .run(
            &mut f,
            vec![
                check!(needed
                    "browser: a refused action (409) shows the API's error message in the dialog, and the view catches up (cancelled, 3 cancelled, every action disabled)",
                    a_refused_action_shows_the_apis_message
                ),
                check!(
                    "browser: the refusal's 409 is the only console error",
                    the_refusals_409_is_the_only_console_error
                ),
            ],
        )
        .await;
    Ok(())
}

/// What the refusal's checks share: the browser on the view of a running batch.
struct Refusal<'a> {
    b: &'a Browser,
    api: &'a Api,
    shots: &'a Path,
    id: Id,
}

async fn a_refused_action_shows_the_apis_message(f: &mut Refusal<'_>) -> Result<()> {
    let b = f.b;
    // The console from here on: the refusal's.
    b.logs().await?;
    b.click("#batch-actions [data-action=pause]").await?;
    b.until("the confirmation dialog", WAIT, || async {
        Ok((b.count("#confirm[open]").await? == 1).then_some(()))
    })
    .await?;
    // Another operator, meanwhile.
    f.api.control(&f.id, "cancel").await?;
    b.click("#confirm-yes").await?;
    let message = b
        .until("the refusal in the dialog", WAIT, || async {
            Ok(if b.count("#confirm-error:not([hidden])").await? == 1 {
                b.text("#confirm-error").await?
            } else {
                None
            })
        })
        .await;
    let caught_up = until_shown(b, "the view showing the batch cancelled", |s| {
        s.status == "cancelled" && s.cancelled == Some(3)
    })
    .await;
    let mut enabled_ones = Vec::new();
    for action in ["pause", "resume", "cancel", "retry"] {
        if enabled(b, action).await? != Some(false) {
            enabled_ones.push(action);
        }
    }
    b.screenshot(&f.shots.join("refused.png")).await?;
    let want = format!(
        "invalid_transition: cannot pause batch \"{}\": it is cancelled",
        f.id
    );
    match (message, caught_up) {
        (Ok(m), Ok(_)) if m.contains(&want) && enabled_ones.is_empty() => {
            println!("#   shown: {m}");
            Ok(())
        }
        (Ok(m), Ok(_)) => {
            bail!("message {m:?} (want {want:?}), enabled: {enabled_ones:?}")
        }
        (m, c) => bail!("message {m:?}, view {c:?}"),
    }
}

async fn the_refusals_409_is_the_only_console_error(f: &mut Refusal<'_>) -> Result<()> {
    f.b.click("#confirm-no").await?;
    let logs = f.b.logs().await?;
    no_errors(&logs, &|e| e.message.contains("status of 409")).map_err(anyhow::Error::msg)
}
