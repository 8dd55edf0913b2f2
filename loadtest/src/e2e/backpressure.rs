//! `loadtest e2e --only-backpressure` (and part of the full suite): a receiver's
//! "slow down" as the sink sees it, on a Worker of its own. Every webhook item
//! holds its receiver's implicit key (`host:127.0.0.1` here, the sink's host); a
//! `503` with `Retry-After` pauses that key, `GET /limits` lists the pause, and
//! no item holding the key reaches the receiver before the pause ends, whichever
//! batch it belongs to, however many ticks run meanwhile. This Worker runs with
//! `LEARN_LIMITS=false`: the pause alone, and no learned rate after the refusal.
//! The learned rates have their own part (`learn`, `--only-learn`).

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive;
use crate::driver::target::{Target, TargetArgs};
use crate::e2e::suite::open_worker;
use crate::runtime::api::{Batch, TICK_CRON};
use crate::runtime::wrangler::min_lease_seconds;
use crate::sink::faults::Faults;
use anyhow::{ensure, Context, Result};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

/// This part's job timeout (as the flow part's).
const JOB_TIMEOUT_MS: u64 = 5_000;
/// The receiver's delay, in seconds: long enough for ticks to run inside it.
const RETRY_AFTER_S: u32 = 4;
/// The implicit key of every item sent to the sink.
const SINK_KEY: &str = "host:127.0.0.1";
/// Healthy items created while the key is paused.
const SIBLINGS: usize = 10;

pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let lease = min_lease_seconds(JOB_TIMEOUT_MS, 50, 25);
    let mut target = open_worker(
        args,
        "e2e-backpressure",
        [
            ("JOB_TIMEOUT_MS", JOB_TIMEOUT_MS.to_string()),
            ("LEASE_SECONDS", lease.to_string()),
            // The suite's retry cap (400 ms) would cut the receiver's delay.
            ("RETRY_MAX_MS", "60000".to_string()),
            // The pause alone: a learned rate would space the siblings out.
            ("LEARN_LIMITS", "false".to_string()),
        ],
        Vec::new(),
    )
    .await
    .context("starting the backpressure Worker")?;
    let mut b = Backpressure {
        target: &target,
        timeout,
        paused_until: None,
        refused: None,
        siblings: None,
    };
    let pause = vec![
        check!(needed
            format!("backpressure: a 503 with Retry-After: {RETRY_AFTER_S} pauses the item's implicit key {SINK_KEY}, listed by GET /limits until then"),
            a_delayed_retry_pauses_the_receivers_key
        ),
        check!(
            "backpressure: with LEARN_LIMITS=false the refusal teaches no rate (GET /limits lists no learned key)",
            learning_off_learns_nothing
        ),
        check!(
            format!("backpressure: {SIBLINGS} items of another batch to the same receiver, ticked meanwhile, are not sent before the pause ends, then all complete"),
            siblings_wait_for_the_pause
        ),
        check!(
            "backpressure: the refused item is retried after the delay and completes on its first attempt (a refusal spends none)",
            the_refused_item_completes
        ),
        check!(
            format!("backpressure: the items list their implicit key {SINK_KEY}"),
            items_list_their_implicit_key
        ),
    ];
    checks.run(&mut b, pause).await;
    target.stop_checked("backpressure: ", checks).await;
    Ok(())
}

async fn learning_off_learns_nothing(b: &mut Backpressure<'_>) -> Result<()> {
    let r = b.target.api.admin_raw(Method::GET, "/limits", None).await?;
    let body = r.json().context("GET /limits is not JSON")?;
    ensure!(body["learned"] == json!([]), "learned: {}", body["learned"]);
    Ok(())
}

/// What the checks share.
struct Backpressure<'a> {
    target: &'a Target,
    timeout: Duration,
    /// The pause `GET /limits` listed (ms).
    paused_until: Option<i64>,
    refused: Option<Batch>,
    siblings: Option<Batch>,
}

fn millis(at: &str) -> Result<i64> {
    Ok(chrono::DateTime::parse_from_rfc3339(at)
        .with_context(|| format!("not RFC 3339: {at}"))?
        .timestamp_millis())
}

fn webhook(b: &Backpressure<'_>, id: &str, faults: &Faults) -> Value {
    json!({"subject_id": id, "kind": "webhook",
           "payload": {"url": b.target.sink.hook_url(id, faults), "data": {}}})
}

/// `GET /limits` `paused`: (key, until in ms).
async fn paused(b: &Backpressure<'_>) -> Result<Vec<(String, i64)>> {
    let r = b.target.api.admin_raw(Method::GET, "/limits", None).await?;
    let body = r.json().context("GET /limits is not JSON")?;
    let mut out = Vec::new();
    for p in body["paused"].as_array().context("no paused list")? {
        let key = p["key"].as_str().context("a pause without key")?;
        let until = p["paused_until"].as_str().context("a pause without end")?;
        out.push((key.to_string(), millis(until)?));
    }
    Ok(out)
}

async fn a_delayed_retry_pauses_the_receivers_key(b: &mut Backpressure<'_>) -> Result<()> {
    let api = &b.target.api;
    let faults = Faults {
        fail_first: 1,
        retry_after: Some(RETRY_AFTER_S),
        ..Faults::default()
    };
    let body = json!({"key": "e2e-bp-refused", "items": [webhook(b, "refused-0", &faults)]});
    let (_, batch) = api.create_batch(&body).await?;
    let sent = std::time::Instant::now();
    api.fire_cron(TICK_CRON).await?;
    let stats = b.target.sink.stats(false).await?;
    ensure!(
        stats.total == 1,
        "the sink received {} requests",
        stats.total
    );
    let pauses = paused(b).await?;
    let until = pauses
        .iter()
        .find(|(k, _)| k == SINK_KEY)
        .map(|(_, u)| *u)
        .with_context(|| format!("{SINK_KEY} not paused: {pauses:?}"))?;
    let left = until - chrono::Utc::now().timestamp_millis();
    println!(
        "#   backpressure: {SINK_KEY} paused for {left} ms more ({:?} after the tick started)",
        sent.elapsed()
    );
    ensure!(
        left > 1_000 && left <= i64::from(RETRY_AFTER_S) * 1_000,
        "paused for {left} ms more"
    );
    b.paused_until = Some(until);
    b.refused = Some(batch);
    Ok(())
}

async fn siblings_wait_for_the_pause(b: &mut Backpressure<'_>) -> Result<()> {
    let api = &b.target.api;
    let until = b.paused_until.context("no pause")?;
    let items: Vec<Value> = (0..SIBLINGS)
        .map(|i| webhook(b, &format!("sibling-{i}"), &Faults::default()))
        .collect();
    let (_, batch) = api
        .create_batch(&json!({"key": "e2e-bp-siblings", "items": items}))
        .await?;
    let done = drive::in_pairs(api, &batch.id, b.timeout, "e2e-bp-siblings").await?;
    ensure!(
        done.completed == SIBLINGS as u64,
        "finished with {}",
        done.progress()
    );
    let deliveries = b.target.sink.deliveries().await?;
    let mut first = i64::MAX;
    for d in deliveries
        .iter()
        .filter(|d| d.subject_id.starts_with("sibling-"))
    {
        first = first.min(millis(&d.received_at)?);
    }
    println!(
        "#   backpressure: the first sibling arrived {} ms after the pause's end",
        first - until
    );
    ensure!(
        first >= until,
        "a sibling arrived {} ms before the pause ended",
        until - first
    );
    b.siblings = Some(done);
    Ok(())
}

async fn the_refused_item_completes(b: &mut Backpressure<'_>) -> Result<()> {
    let api = &b.target.api;
    let batch = b.refused.as_ref().context("no refused batch")?;
    let done = drive::in_pairs(api, &batch.id, b.timeout, "e2e-bp-refused").await?;
    ensure!(done.completed == 1, "finished with {}", done.progress());
    let items = api.all_items(&batch.id, None).await?;
    // Refused once, run twice: the refusal gave its attempt back.
    ensure!(
        items.len() == 1 && items[0].attempt == 1,
        "attempts: {:?}",
        items.iter().map(|i| i.attempt).collect::<Vec<_>>()
    );
    Ok(())
}

async fn items_list_their_implicit_key(b: &mut Backpressure<'_>) -> Result<()> {
    let api = &b.target.api;
    let batch = b.siblings.as_ref().context("no siblings batch")?;
    let path = format!("/batches/{}/items?limit=1", batch.id);
    let r = api.admin_raw(Method::GET, &path, None).await?;
    let body = r.json().context("items are not JSON")?;
    ensure!(
        body["items"][0]["limits"] == json!([SINK_KEY]),
        "limits: {}",
        body["items"][0]["limits"]
    );
    Ok(())
}
