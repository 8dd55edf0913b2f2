//! The dashboard's view of delivery in the real browser, run by
//! `ui::dashboard`: a batch's completion callback as it goes from pending to
//! delivered (on the batch the browser watches) or to failed (its receiver
//! refuses it), and a `multi` item's per-channel receipts — one channel
//! delivered, one refused — in both item lists, readable at phone width.
//!
//! Each check reads what the operator sees (the badge's word, the line's text,
//! each receipt's channel, state, time or error) and compares it with what the
//! API says, so a page without the callback line or the receipts fails them.

use crate::check;
use crate::driver::checks::{text, Checks};
use crate::driver::drive::until_called_back;
use crate::driver::target::Target;
use crate::e2e::ui::browser::Browser;
use crate::e2e::ui::browser::{fits_width, WAIT};
use crate::runtime::api::{encode, Id, Item};
use crate::sink::faults::Faults;
use anyhow::{bail, ensure, Context, Result};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;

/// What the batch view shows of its completion callback (`#callback`).
#[derive(Debug, Clone, Default, Deserialize)]
struct CallbackShown {
    /// The badge's word: `pending`, `delivered`, `failed` (absent: "none").
    badge: Option<String>,
    /// The whole line as read.
    text: String,
    /// Where it goes, as shown.
    to: Option<String>,
    /// The last error line, if shown.
    error: Option<String>,
}

const CALLBACK: &str = "const el = document.getElementById('callback'); if (!el) return null;\
    const part = (css) => { const p = el.querySelector(css); return p ? p.textContent : null; };\
    return {badge: part('.badge'), text: el.textContent, to: part('[data-callback-to]'),\
      error: part('[data-callback-error]')};";

async fn callback_shown(b: &Browser) -> Result<Option<CallbackShown>> {
    let v = b.client.execute(CALLBACK, vec![]).await?;
    Ok(serde_json::from_value(v)?)
}

/// Waits until the callback line shows what `want` accepts (at most `WAIT`).
async fn until_callback(
    b: &Browser,
    what: &str,
    want: impl Fn(&CallbackShown) -> bool,
) -> Result<CallbackShown> {
    b.until(what, WAIT, || async {
        Ok(callback_shown(b).await?.filter(|c| want(c)))
    })
    .await
}

/// The origin of the sink, which is all the page may show of a callback URL.
fn origin(base: &str) -> Result<String> {
    let url = reqwest::Url::parse(base).with_context(|| format!("parsing {base}"))?;
    Ok(url.origin().ascii_serialization())
}

/// On the open view of `id`, a finished batch with `on_finish` whose callback no
/// tick has sent yet: the page shows it pending ("the next tick sends it"), then,
/// after the next tick and without a reload, delivered after 1 attempt, with the
/// receiver's origin and not its path. A check of the dashboard's list.
pub async fn callback_delivered(b: &Browser, target: &Target, id: &Id) -> Result<()> {
    let api = &target.api;
    let before = api.batch(id).await?;
    let pending = until_callback(b, "the callback pending", |c| {
        c.badge.as_deref() == Some("pending")
    })
    .await;
    let called = until_called_back(api, id, WAIT).await?;
    let delivered = until_callback(b, "the callback delivered", |c| {
        c.badge.as_deref() == Some("delivered")
    })
    .await;
    let to = format!("{}/…", origin(target.sink.base())?);
    let (p, d) = match (pending, delivered) {
        (Ok(p), Ok(d)) => (p, d),
        (p, d) => bail!(
            "pending: {:?}; delivered: {:?}",
            p.map_err(text),
            d.map_err(text)
        ),
    };
    let api_says = (before.callback.as_ref(), called.callback.as_ref());
    let api_ok = matches!(api_says, (Some(p), Some(d))
        if (p.status.as_str(), p.attempts) == ("pending", 0)
            && (d.status.as_str(), d.attempts) == ("delivered", 1));
    ensure!(
        api_ok
            && p.text.contains("the next tick sends it")
            && d.text.contains("after 1 attempt")
            && d.to.as_deref() == Some(to.as_str())
            && d.error.is_none()
            && !d.text.contains("/callback/"),
        "shown {p:?} then {d:?} (want to {to:?}); API {api_says:?}"
    );
    println!("#   callback shown: {:?} then {:?}", p.text, d.text);
    Ok(())
}

/// One receipt as a row's receipt list shows it.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
struct ReceiptShown {
    channel: String,
    state: String,
    /// The time shown and its title (the UTC instant), for a delivered channel.
    time: Option<String>,
    title: Option<String>,
    error: Option<String>,
}

const RECEIPTS: &str = "const list = document.querySelector(arguments[0]); if (!list) return null;\
    return [...list.querySelectorAll('li')].map((li) => {\
      const part = (css) => { const p = li.querySelector(css); return p ? p.textContent : null; };\
      const t = li.querySelector('time');\
      return {channel: part('.channel') || '', state: part('.state') || '', time: t && t.textContent,\
        title: t && t.title, error: part('.error-text')};\
    });";

async fn receipts_shown(b: &Browser, list: &str) -> Result<Option<Vec<ReceiptShown>>> {
    let v = b.client.execute(RECEIPTS, vec![json!(list)]).await?;
    Ok(serde_json::from_value(v)?)
}

/// The receipts shown match the item's in the API: every channel, `email`
/// delivered with a time (its UTC instant as the title), `push` failed with the
/// error the API gives.
fn receipts_match(shown: &[ReceiptShown], item: &Item) -> Result<(), String> {
    let r = item.receipts.as_ref().ok_or("the API shows no receipts")?;
    let field = |c: &str, f: &str| r[c][f].as_str().map(str::to_string);
    let api_ok = field("email", "status").as_deref() == Some("delivered")
        && field("push", "status").as_deref() == Some("failed")
        && field("push", "error").is_some_and(|e| e.contains("400"));
    let at = field("email", "at").filter(|_| api_ok);
    let at = at.ok_or(format!(
        "API receipts {r}: want email delivered, push failed (400)"
    ))?;
    let want = [
        ReceiptShown {
            channel: "email".into(),
            state: "✓ delivered".into(),
            time: None,
            title: Some(format!(
                "{} UTC",
                at.replace('T', " ").trim_end_matches('Z')
            )),
            error: None,
        },
        ReceiptShown {
            channel: "push".into(),
            state: "✗ failed".into(),
            time: None,
            title: None,
            error: field("push", "error"),
        },
    ];
    // The time is in the viewer's zone and locale: shown on the delivered one only.
    let timed: Vec<bool> = shown
        .iter()
        .map(|s| s.time.as_deref().is_some_and(|t| t.contains(':')))
        .collect();
    let untimed: Vec<ReceiptShown> = shown
        .iter()
        .map(|s| ReceiptShown {
            time: None,
            ..s.clone()
        })
        .collect();
    if untimed == want && timed == [true, false] {
        Ok(())
    } else {
        Err(format!("shown {shown:?}, want {want:?} (API {r})"))
    }
}

/// A batch of one `multi` item (email delivered, push refused with 400) whose
/// callback receiver refuses it too: before it ends its callback shows pending;
/// then failed with its error; the item's receipts in the failed list and in the
/// failed items tab; all of it within a phone's width.
pub async fn receipts_and_refused_callback(
    b: &Browser,
    target: &Target,
    shots: &Path,
    checks: &mut Checks,
) -> Result<()> {
    let (api, sink) = (&target.api, &target.sink);
    let refused = Faults {
        status: Some(400),
        ..Faults::default()
    };
    let key = format!("ui-delivery-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S"));
    let item = json!({"subject_id": "ui-multi", "kind": "multi", "payload": {
        "channels": [
            {"name": "email", "url": sink.hook_url("ui-multi-email", &Faults::default())},
            {"name": "push", "url": sink.hook_url("ui-multi-push", &refused)},
        ],
        "data": {"digest": "dashboard"}}});
    let body = json!({"key": key, "items": [item],
        "on_finish": {"url": sink.callback_url("ui-refused", &refused)}});
    let (_, batch) = api.create_batch(&body).await?;
    // Tall enough for the callback line and the failed list in one screenshot.
    b.client.set_window_size(1280, 1700).await?;
    b.client
        .goto(&format!("{}/#/batches/{}", api.base(), encode(&batch.id.0)))
        .await?;
    let mut f = Delivery {
        b,
        target,
        shots,
        id: batch.id,
        item: None,
    };
    checks
        .run(
            &mut f,
            vec![
                check!(
                    "browser: before a batch with on_finish ends, its callback shows pending, sent when the batch ends",
                    the_callback_shows_pending_before_the_end
                ),
                check!(
                    "browser: a callback its receiver refuses for good (400) shows failed after 1 attempt, with its last error",
                    a_refused_callback_shows_failed_with_its_error
                ),
                check!(
                    "browser: a multi item with one channel delivered and one refused shows both receipts in the failed list: email ✓ delivered with its time, push ✗ failed with its error",
                    the_failed_list_shows_both_receipts
                ),
                check!(
                    "browser: the same receipts in the items by status (failed tab)",
                    the_failed_tab_shows_the_same_receipts
                ),
                check!(
                    "browser: at phone width (390 px) the callback line and each receipt fit the screen, no horizontal scrolling",
                    the_callback_and_receipts_fit_a_phone
                ),
            ],
        )
        .await;
    Ok(())
}

/// What the delivery checks share: the browser on the view of the batch of one
/// `multi` item, and that item once it failed.
struct Delivery<'a> {
    b: &'a Browser,
    target: &'a Target,
    shots: &'a Path,
    id: Id,
    item: Option<Item>,
}

impl Delivery<'_> {
    fn item(&self) -> Result<&Item> {
        self.item
            .as_ref()
            .context("no failed multi item (see the check before)")
    }
}

/// The item's receipt list in the failed list, and in the items tab.
fn receipt_lists(item: &Item) -> (String, String) {
    (
        format!("#failed-items [data-receipts=\"{}\"]", item.id),
        format!("#items [data-receipts=\"{}\"]", item.id),
    )
}

/// Before its end: pending, sent when the batch ends.
async fn the_callback_shows_pending_before_the_end(f: &mut Delivery<'_>) -> Result<()> {
    let c = until_callback(f.b, "the callback pending before the end", |c| {
        c.badge.as_deref() == Some("pending")
    })
    .await?;
    ensure!(c.text.contains("sent when the batch ends"), "shown {c:?}");
    Ok(())
}

/// Ticks run the item (push refused for good: failed on attempt 1), end the
/// batch, then send its callback, which is refused too.
async fn a_refused_callback_shows_failed_with_its_error(f: &mut Delivery<'_>) -> Result<()> {
    let ended = until_called_back(&f.target.api, &f.id, WAIT).await?;
    let cb = ended
        .callback
        .clone()
        .context("the batch has no callback")?;
    let c = until_callback(f.b, "the callback failed", |c| {
        c.badge.as_deref() == Some("failed")
    })
    .await?;
    ensure!(
        cb.status == "failed"
            && c.text.contains("after 1 attempt")
            && cb.last_error.as_ref().is_some_and(|e| {
                e.contains("400") && c.error.as_deref() == Some(&format!("last error: {e}"))
            }),
        "shown {c:?}, API {cb:?}"
    );
    println!("#   callback shown: {:?}", c.text);
    Ok(())
}

async fn the_failed_list_shows_both_receipts(f: &mut Delivery<'_>) -> Result<()> {
    let item = f
        .target
        .api
        .all_items(&f.id, Some("failed"))
        .await?
        .into_iter()
        .next()
        .context("the multi item did not fail")?;
    let (list, _) = receipt_lists(&item);
    let shown = wait_receipts(f.b, &list).await;
    f.item = Some(item);
    receipts_match(&shown?, f.item()?).map_err(anyhow::Error::msg)
}

async fn the_failed_tab_shows_the_same_receipts(f: &mut Delivery<'_>) -> Result<()> {
    let (b, item) = (f.b, f.item()?);
    b.click("#items .tabs button:nth-child(4)").await?;
    let (_, tab) = receipt_lists(item);
    let shown = wait_receipts(b, &tab).await;
    b.client
        .execute("window.scrollTo(0, 0); return 0;", vec![])
        .await?;
    b.screenshot(&f.shots.join("batch-delivery.png")).await?;
    receipts_match(&shown?, item).map_err(anyhow::Error::msg)
}

/// Phone width: the callback line and every receipt within the screen.
async fn the_callback_and_receipts_fit_a_phone(f: &mut Delivery<'_>) -> Result<()> {
    let (b, item) = (f.b, f.item()?);
    let (list, tab) = receipt_lists(item);
    b.client.set_window_size(390, 844).await?;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let fits = fits_width(b).await?;
    let inside = within_screen(b, &format!("#callback, {list} li, {tab} li")).await?;
    b.screenshot_of("failed-items", &f.shots.join("phone-batch-delivery.png"))
        .await?;
    b.client.set_window_size(1280, 900).await?;
    match inside {
        // The callback line and two receipts in each list.
        (5, 5) if fits => Ok(()),
        (n, inside) => {
            bail!("{inside} of {n} elements (want 5) within the screen; page fits: {fits}")
        }
    }
}

/// Waits for the receipt list `list` (at most `WAIT`).
async fn wait_receipts(b: &Browser, list: &str) -> Result<Vec<ReceiptShown>> {
    b.until(&format!("the receipts in {list}"), WAIT, || async {
        Ok(receipts_shown(b, list).await?.filter(|r| !r.is_empty()))
    })
    .await
}

/// How many elements match `css`, and how many of them lie within the window's
/// width (visible without scrolling sideways, also inside a scrolled table).
async fn within_screen(b: &Browser, css: &str) -> Result<(u64, u64)> {
    let v: Value = b
        .client
        .execute(
            "const els = [...document.querySelectorAll(arguments[0])];\
             const inside = els.filter((el) => { const r = el.getBoundingClientRect();\
               return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth; });\
             return [els.length, inside.length];",
            vec![json!(css)],
        )
        .await?;
    let (n, inside): (u64, u64) = serde_json::from_value(v)?;
    Ok((n, inside))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item() -> Item {
        serde_json::from_value(json!({"id": 7, "subject_id": "ui-multi", "kind": "multi",
            "status": "failed", "attempt": 1, "max_attempts": 3, "last_error": null,
            "run_after": null, "started_at": null, "completed_at": null,
            "receipts": {"email": {"status": "delivered", "at": "2026-11-21T12:00:01.250Z"},
                         "push": {"status": "failed", "error": "HTTP 400"}}}))
        .unwrap()
    }

    fn shown() -> Vec<ReceiptShown> {
        vec![
            ReceiptShown {
                channel: "email".into(),
                state: "✓ delivered".into(),
                time: Some("21:30:01".into()),
                title: Some("2026-11-21 12:00:01.250 UTC".into()),
                error: None,
            },
            ReceiptShown {
                channel: "push".into(),
                state: "✗ failed".into(),
                error: Some("HTTP 400".into()),
                ..ReceiptShown::default()
            },
        ]
    }

    #[test]
    fn receipts_shown_as_the_api_gives_them_match() {
        assert_eq!(receipts_match(&shown(), &item()), Ok(()));
    }

    #[test]
    fn a_receipt_shown_otherwise_does_not_match() {
        let mut no_time = shown();
        no_time[0].time = None;
        let mut other_error = shown();
        other_error[1].error = Some("HTTP 500".into());
        let mut pending = shown();
        pending[1].state = "… pending".into();
        let one = shown()[..1].to_vec();
        for wrong in [no_time, other_error, pending, one, Vec::new()] {
            assert!(receipts_match(&wrong, &item()).is_err(), "{wrong:?}");
        }
    }
}
