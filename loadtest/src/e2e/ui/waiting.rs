//! What holds a batch's pending items, in the real browser, run by
//! `ui::dashboard` on a Worker of its own (`e2e::waiting`'s settings and
//! batches): while a tick runs, a batch with items in backoff, behind a
//! receiver's pause, a rate key and a concurrency limit; after it, a batch
//! behind a higher priority. Each time the batch view shows the same counts per
//! reason and the same keys with their state as `GET /batches/{id}` answers,
//! each pending item's row the reason `GET /batches/{id}/items` gives it, and
//! the limits view links each key to the batches it holds as `GET /limits` says.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::target::{Target, TargetArgs};
use crate::e2e::suite::open_worker;
use crate::e2e::ui::browser::{Browser, WAIT};
use crate::e2e::waiting::{seed_held, seed_turn, settings};
use crate::runtime::api::{Api, TICK_CRON};
use anyhow::{ensure, Context, Result};
use reqwest::Method;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The slow receiver's latency: long enough for the browser to sign in, open
/// the batch and compare while the concurrency key's item is in flight.
const SLOW_MS: u64 = 20_000;
/// The keys the held batch's items wait on.
const KEYS: [&str; 3] = ["host:localhost", "rate:e2e", "conc:e2e"];

/// What the batch view shows of what holds its pending items.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct Shown {
    /// Reason → count, the non-zero ones.
    counts: BTreeMap<String, u64>,
    keys: Vec<KeyRow>,
    /// Subject → (reason, key) of the pending items listed.
    /// Each item's reason, key and the receiver's word (a pause's), as shown.
    items: BTreeMap<String, (String, Option<String>, Option<String>)>,
}

/// A row of the view's keys, or what the API's `waiting_keys` entry should show.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
struct KeyRow {
    key: String,
    reason: String,
    items: String,
    /// `n of m in flight`, or the instant named (paused until, next token).
    state: String,
    word: Option<String>,
}

const SHOWN: &str = "
  const counts = {};
  for (const li of document.querySelectorAll('#waiting-on [data-waiting-count]')) {
    counts[li.dataset.waitingCount] = Number(li.textContent.replace(/[^0-9]/g, ''));
  }
  const keys = [...document.querySelectorAll('#waiting-on tbody tr')].map((tr) => {
    const col = (k) => tr.querySelector(`td[data-col=\"${k}\"]`);
    const at = col('state').querySelector('time');
    const word = col('state').querySelector('[data-word]');
    return {
      key: col('key').textContent, reason: col('reason').firstChild.dataset.reason,
      items: col('items').textContent,
      state: at ? at.getAttribute('datetime') : col('state').textContent,
      word: word ? word.textContent : null,
    };
  });
  const items = {};
  for (const tr of document.querySelectorAll('#items tbody tr:not(.detail)')) {
    const w = tr.querySelector('[data-waiting]');
    const said = w && w.querySelector('[data-word]');
    const subject = tr.querySelector('td[data-col=\"subject\"]');
    if (subject) items[subject.textContent] = w ? [w.dataset.waiting, w.dataset.waitingKey || null, said ? said.textContent : null] : ['', null, null];
  }
  return {counts, keys, items};";

/// The same, from the API: the batch and the pending items' page.
async fn answered(api: &Api, batch: &str) -> Result<Shown> {
    let b = get(api, &format!("/batches/{batch}")).await?;
    let counts = b["waiting_on"]
        .as_object()
        .context("no waiting_on")?
        .iter()
        .filter_map(|(r, n)| Some((r.clone(), n.as_u64()?)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let keys = b["waiting_keys"]
        .as_array()
        .context("no waiting_keys")?
        .iter()
        .map(key_row)
        .collect();
    let page = get(
        api,
        &format!("/batches/{batch}/items?status=pending&limit=20"),
    )
    .await?;
    let items = page["items"]
        .as_array()
        .context("no items")?
        .iter()
        .map(|i| {
            let w = &i["waiting_on"];
            let subject = i["subject_id"].as_str().unwrap_or_default().to_string();
            let reason = w["reason"].as_str().unwrap_or_default().to_string();
            let word = w["word"].as_str().map(|w| format!("receiver: {w}"));
            (
                subject,
                (reason, w["key"].as_str().map(str::to_string), word),
            )
        })
        .collect();
    Ok(Shown {
        counts,
        keys,
        items,
    })
}

/// A `waiting_keys` entry as the view should show it.
fn key_row(k: &Value) -> KeyRow {
    let s = |f: &str| k[f].as_str().map(str::to_string);
    let state = match k["reason"].as_str() {
        Some("concurrency") => format!("{} of {} in flight", k["in_flight"], k["concurrency"]),
        Some("rate") => s("next_token_at").unwrap_or_default(),
        _ => s("until").unwrap_or_default(),
    };
    KeyRow {
        key: s("key").unwrap_or_default(),
        reason: s("reason").unwrap_or_default(),
        items: k["items"].to_string(),
        state,
        word: s("word").map(|w| format!("receiver: {w}")),
    }
}

async fn get(api: &Api, path: &str) -> Result<Value> {
    let r = api.admin_raw(Method::GET, path, None).await?;
    ensure!(r.status.is_success(), "GET {path}: {}", r.status);
    r.json().with_context(|| format!("GET {path} is not JSON"))
}

/// Opens batch `id`'s view and waits until it shows what the API answers for
/// it, reloading the items list each round (it is not polled): a state moving
/// under the page (a tick runs) has the page and the API agree once it holds.
/// The last view and answer when they never agree within `WAIT`.
async fn until_agreed(
    b: &Browser,
    api: &Api,
    id: &str,
    ready: &dyn Fn(&Shown) -> bool,
) -> (Shown, Shown) {
    let mut last = (Shown::default(), Shown::default());
    let start = std::time::Instant::now();
    let _ = b
        .client
        .goto(&format!("{}/#/batches/{id}", api.base()))
        .await;
    while start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let _ = b.click("#items .tabs button.link").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let read = async {
            let v = b.client.execute(SHOWN, vec![]).await?;
            let shown = serde_json::from_value::<Shown>(v)?;
            Ok::<_, anyhow::Error>((shown, answered(api, id).await?))
        };
        match read.await {
            Ok((shown, api_says)) => {
                let agreed = shown == api_says && ready(&api_says);
                last = (shown, api_says);
                if agreed {
                    break;
                }
            }
            // The next round reads again; the checks say what never agreed.
            Err(e) => println!("#   waiting: a read of the view or the API failed: {e:#}"),
        }
    }
    last
}

/// What the checks share: the browser, the Worker, what the views showed.
struct Seen<'a> {
    b: &'a Browser,
    target: &'a Target,
    shots: &'a Path,
    held: String,
    /// The held batch's view and the API's answer, while the tick ran.
    during: (Shown, Shown),
}

pub async fn waiting_view(
    b: &Browser,
    args: &TargetArgs,
    shots: &Path,
    checks: &mut Checks,
) -> Result<()> {
    if args.url.is_some() {
        println!("# dashboard waiting_on part skipped: --url mode cannot start a Worker with its settings");
        return Ok(());
    }
    let mut target = open_worker(args, "e2e-dashboard-waiting", settings(SLOW_MS), Vec::new())
        .await
        .context("starting the dashboard's waiting_on Worker")?;
    let result = checked(b, &target, shots, checks).await;
    // Off its origin before it stops: a poll of a stopped Worker is a console error.
    let left = b.client.goto("about:blank").await;
    target.stop_checked("dashboard waiting: ", checks).await;
    left?;
    result
}

async fn checked(b: &Browser, target: &Target, shots: &Path, checks: &mut Checks) -> Result<()> {
    let api = &target.api;
    sign_in(b, api).await?;
    let held = seed_held(target, SLOW_MS).await?;
    let ticking = {
        let api = api.clone();
        tokio::spawn(async move { api.fire_cron(TICK_CRON).await })
    };
    // Once the refusal is committed and the slow item in flight: every reason.
    let all = |s: &Shown| {
        ["backoff", "paused", "rate", "concurrency"]
            .iter()
            .all(|r| s.counts.contains_key(*r))
    };
    let during = until_agreed(b, api, &held, &all).await;
    b.client.set_window_size(1280, 1100).await?;
    b.screenshot(&shots.join("batch-waiting.png")).await?;
    let mut f = Seen {
        b,
        target,
        shots,
        held,
        during,
    };
    checks
        .run(
            &mut f,
            vec![
                check!(
                    "browser: while a tick runs, a batch's view counts its pending items by what holds them (backoff, a receiver's pause, a rate key, a concurrency limit) as GET /batches/{id} does",
                    the_view_counts_what_holds_the_pending_items
                ),
                check!(
                    "browser: the batch's view lists the keys holding its items with their state (n of m in flight, next token at, paused until with the receiver's word), as waiting_keys says",
                    the_view_lists_the_keys_with_their_state
                ),
                check!(
                    "browser: each pending item's row says its reason and key, as GET /batches/{id}/items says",
                    each_pending_item_says_its_reason
                ),
                check!(
                    "browser: the limits view links each key to the batches it holds, as GET /limits says, and a link opens the batch",
                    the_limits_view_links_each_key_to_its_batches
                ),
            ],
        )
        .await;
    ticking.await.context("the tick task")??;
    checks
        .run(
            &mut f,
            vec![check!(
                "browser: a batch behind a higher-priority batch's claim of due items shows its item waiting its turn, as the API says",
                a_batch_behind_a_higher_priority_waits_its_turn
            )],
        )
        .await;
    Ok(())
}

async fn sign_in(b: &Browser, api: &Api) -> Result<()> {
    b.client.set_window_size(1280, 900).await?;
    b.client.goto(&format!("{}/", api.base())).await?;
    b.until("the sign-in form", WAIT, || async {
        Ok((b.count("#signin:not([hidden]) #token").await? == 1).then_some(()))
    })
    .await?;
    b.type_into("#token", api.token()).await?;
    b.click("#signin-button").await?;
    b.until("the batches view", WAIT, || async {
        Ok((b.count("#batches").await? == 1).then_some(()))
    })
    .await
}

/// The view against the answer, with what differs.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, shown: &T, api: &T) -> Result<()> {
    ensure!(
        shown == api,
        "{what}: shown {shown:?}, the API says {api:?}"
    );
    Ok(())
}

async fn the_view_counts_what_holds_the_pending_items(f: &mut Seen<'_>) -> Result<()> {
    let (shown, api) = &f.during;
    println!("#   waiting on, shown: {:?}", shown.counts);
    same("counts", &shown.counts, &api.counts)?;
    for r in ["backoff", "paused", "rate", "concurrency"] {
        ensure!(api.counts.get(r) >= Some(&1), "no {r}: {:?}", api.counts);
    }
    Ok(())
}

async fn the_view_lists_the_keys_with_their_state(f: &mut Seen<'_>) -> Result<()> {
    let (shown, api) = &f.during;
    same("keys", &shown.keys, &api.keys)?;
    let by_key = |k: &str| {
        shown
            .keys
            .iter()
            .find(|r| r.key == k)
            .cloned()
            .unwrap_or_default()
    };
    ensure!(
        by_key("conc:e2e").state == "1 of 1 in flight",
        "{:?}",
        shown.keys
    );
    ensure!(by_key("rate:e2e").reason == "rate", "{:?}", shown.keys);
    let paused = by_key("host:localhost");
    ensure!(
        paused.reason == "paused" && paused.word.as_deref().is_some_and(|w| w.contains("429")),
        "{paused:?}"
    );
    Ok(())
}

async fn each_pending_item_says_its_reason(f: &mut Seen<'_>) -> Result<()> {
    let (shown, api) = &f.during;
    same("items", &shown.items, &api.items)?;
    let reason = |s: &str| shown.items.get(s).map(|(r, _, _)| r.as_str());
    ensure!(
        reason("a-refused") == Some("backoff")
            && reason("b-sibling") == Some("paused")
            && reason("c-rate-2") == Some("rate")
            && reason("d-conc-2") == Some("concurrency"),
        "{:?}",
        shown.items
    );
    // The paused item names the receiver's word, as the key's row does.
    let word = shown
        .items
        .get("b-sibling")
        .and_then(|(_, _, w)| w.as_deref());
    ensure!(word.is_some_and(|w| w.contains("429")), "{:?}", shown.items);
    Ok(())
}

async fn the_limits_view_links_each_key_to_its_batches(f: &mut Seen<'_>) -> Result<()> {
    let (b, api) = (f.b, &f.target.api);
    const LINKS: &str = "return Object.fromEntries([...document.querySelectorAll('#limits tbody tr:not(.detail)')]\
        .map((tr) => [tr.querySelector('td[data-col=\"key\"]').textContent,\
          [...tr.querySelectorAll('td[data-col=\"batches\"] a[data-batch-link]')].map((a) => a.dataset.batchLink)]));";
    b.client.goto(&format!("{}/#/limits", api.base())).await?;
    let shown: BTreeMap<String, Vec<String>> = b
        .until("the limits listed", WAIT, || async {
            let v = b.client.execute(LINKS, vec![]).await?;
            let rows: BTreeMap<String, Vec<String>> = serde_json::from_value(v)?;
            Ok(KEYS.iter().all(|k| rows.contains_key(*k)).then_some(rows))
        })
        .await?;
    b.screenshot(&f.shots.join("limits-batches.png")).await?;
    let listed = get(api, "/limits").await?;
    let said: BTreeMap<String, Vec<String>> = listed["limits"]
        .as_array()
        .context("no limits")?
        .iter()
        .filter_map(|l| {
            Some((
                l["key"].as_str()?.to_string(),
                serde_json::from_value(l["batches"].clone()).ok()?,
            ))
        })
        .collect();
    same("batches per key", &shown, &said)?;
    // The held batch's items in flight or due hold each key.
    for k in KEYS {
        ensure!(shown[k].contains(&f.held), "{k}: {:?}", shown[k]);
    }
    b.click(&format!(
        "#limits td[data-col=\"batches\"] a[data-batch-link=\"{}\"]",
        f.held
    ))
    .await?;
    let key = b
        .until("the batch opened from its link", WAIT, || async {
            b.text("#view h1.batch-key").await
        })
        .await?;
    ensure!(key == "e2e-waiting", "the link opened {key:?}");
    Ok(())
}

async fn a_batch_behind_a_higher_priority_waits_its_turn(f: &mut Seen<'_>) -> Result<()> {
    let (b, api) = (f.b, &f.target.api);
    let low = seed_turn(api).await?;
    let turn = |s: &Shown| s.counts.contains_key("turn");
    let (shown, said) = until_agreed(b, api, &low, &turn).await;
    b.screenshot(&f.shots.join("batch-waiting-turn.png"))
        .await?;
    same("the low batch", &shown, &said)?;
    ensure!(
        shown.counts == BTreeMap::from([("turn".to_string(), 1)])
            && shown.items.get("free") == Some(&("turn".to_string(), None, None)),
        "{shown:?}"
    );
    let text = b
        .text("#items [data-waiting=turn]")
        .await?
        .unwrap_or_default();
    ensure!(text.contains("1 batch of priority 5 first"), "{text:?}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_keys_state_is_compared_by_its_numbers_or_its_instant() {
        let conc = json!({"items": 1, "reason": "concurrency", "key": "c", "in_flight": 1, "concurrency": 2});
        assert_eq!(key_row(&conc).state, "1 of 2 in flight");
        let paused = json!({"items": 2, "reason": "paused", "key": "h", "until": "2026-12-06T12:00:00.000Z", "word": "HTTP 429"});
        let row = key_row(&paused);
        assert_eq!(
            (row.state.as_str(), row.word.as_deref(), row.items.as_str()),
            ("2026-12-06T12:00:00.000Z", Some("receiver: HTTP 429"), "2")
        );
    }
}
