//! `loadtest e2e --only-waiting` (and part of the full suite): what holds each
//! pending item (`waiting_on`) as `GET /batches/{id}/items` and `GET
//! /batches/{id}` answer it, on a Worker of its own. One batch: an item a
//! receiver refuses (429 + Retry-After: it waits in backoff and pauses
//! `host:localhost`), its sibling on that host (paused), two items on a rate key
//! of one a minute (the second waits for a token), two on a key of concurrency
//! 1 whose first is in flight (a slow receiver) when the page is read. Then, the
//! tick over, a batch of a higher priority with a claim's worth due makes the
//! batch's last free item wait its turn. Each time the counts add up to the
//! batch's pending items, and the page's rows read are printed. The dashboard's
//! check of the same batches (`e2e::ui::waiting`) seeds them with `seed_held`
//! and `seed_turn`, on a Worker of these `settings`.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::steps::put_limit;
use crate::driver::target::{Target, TargetArgs};
use crate::e2e::suite::open_worker;
use crate::runtime::api::Api;
use crate::runtime::api::TICK_CRON;
use crate::runtime::wrangler::min_lease_seconds;
use crate::sink::faults::Faults;
use anyhow::{ensure, Context, Result};
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// This Worker's claim size: the higher-priority batch's items make one claim.
pub const CLAIM_CHUNK: usize = 5;
/// The slow receiver's latency: the concurrency key's item is in flight meanwhile.
const SLOW_MS: u64 = 8_000;
/// The suite's DISPATCH_CONCURRENCY, which the lease must cover.
const DISPATCH_CONCURRENCY: u64 = 25;
/// A page of 100 pending items must read at most a few hundred rows.
const MOST_ROWS_READ: i64 = 400;

/// `_timeout`: nothing here waits for a batch to finish.
pub async fn e2e(args: &TargetArgs, _timeout: Duration, checks: &mut Checks) -> Result<()> {
    let mut target = open_worker(args, "e2e-waiting", settings(SLOW_MS), Vec::new())
        .await
        .context("starting the waiting_on Worker")?;
    let mut w = Waiting {
        target: &target,
        batch: None,
    };
    let list = vec![
        check!(needed
            "waiting: during a tick, the items say backoff (with the receiver's error), paused (host:localhost, with the receiver's word), rate (its next token) and concurrency (1 of 1 in flight); the batch's counts add up to its pending items",
            each_item_says_what_holds_it
        ),
        check!(
            format!("waiting: a higher-priority batch of {CLAIM_CHUNK} due items makes the free item wait its turn; the counts still add up"),
            a_higher_priority_makes_the_free_item_wait_its_turn
        ),
    ];
    checks.run(&mut w, list).await;
    target.stop_checked("waiting: ", checks).await;
    Ok(())
}

/// The Worker's settings for a slow receiver of `slow_ms`: a claim of
/// [`CLAIM_CHUNK`], calls that outlast it, and a receiver's delay of a minute
/// kept (RETRY_MAX_MS).
pub fn settings(slow_ms: u64) -> Vec<(&'static str, String)> {
    let job_timeout = slow_ms + 5_000;
    // A call's time of slack past the Worker's minimums: a drain dispatches an
    // item only if its call and its commit (at the D1 round trips it measured,
    // slow on a loaded machine) end before the lease and the deadline.
    let slack = job_timeout / 1_000;
    let lease =
        (min_lease_seconds(job_timeout, CLAIM_CHUNK as u64, DISPATCH_CONCURRENCY) + slack).max(40);
    let deadline = (2 * job_timeout).max(30_000);
    vec![
        ("CLAIM_CHUNK", CLAIM_CHUNK.to_string()),
        ("JOB_TIMEOUT_MS", job_timeout.to_string()),
        ("LEASE_SECONDS", lease.to_string()),
        ("INVOCATION_DEADLINE_MS", deadline.to_string()),
        ("RETRY_MAX_MS", "120000".to_string()),
    ]
}

struct Waiting<'a> {
    target: &'a Target,
    batch: Option<String>,
}

fn webhook(target: &Target, id: &str, faults: &Faults, host: &str, keys: &[&str]) -> Value {
    let url = target.sink.hook_url(id, faults).replace("127.0.0.1", host);
    json!({"subject_id": id, "kind": "webhook", "limits": keys,
           "payload": {"url": url, "data": {}}})
}

fn noop(id: &str, keys: &[&str]) -> Value {
    json!({"subject_id": id, "kind": "noop", "limits": keys, "payload": {}})
}

/// The batch's items by subject, its `waiting_on` counts and its pending count,
/// and the rows the page read (`Fanout-D1-Rows-Read`).
async fn read(w: &Waiting<'_>, batch: &str) -> Result<(BTreeMap<String, Value>, Value, i64)> {
    let api = &w.target.api;
    let page = api
        .admin_raw(
            Method::GET,
            &format!("/batches/{batch}/items?limit=100"),
            None,
        )
        .await?;
    let rows_read: i64 = page
        .header("Fanout-D1-Rows-Read")
        .and_then(|v| v.parse().ok())
        .context("no Fanout-D1-Rows-Read header")?;
    println!("#   waiting: the page read {rows_read} rows");
    ensure!(
        rows_read <= MOST_ROWS_READ,
        "the page read {rows_read} rows"
    );
    let body = page.json().context("items are not JSON")?;
    let mut items = BTreeMap::new();
    for i in body["items"].as_array().context("no items")? {
        let subject = i["subject_id"].as_str().context("no subject")?.to_string();
        items.insert(subject, i.clone());
    }
    let r = api
        .admin_raw(Method::GET, &format!("/batches/{batch}"), None)
        .await?;
    let b = r.json().context("the batch is not JSON")?;
    let counts = b["waiting_on"].clone();
    let sum: i64 = counts
        .as_object()
        .context("no waiting_on counts")?
        .values()
        .filter_map(Value::as_i64)
        .sum();
    let pending = b["pending"].as_i64().context("no pending")?;
    ensure!(
        sum == pending,
        "counts {counts} add up to {sum}, not {pending}"
    );
    // Only pending items say what holds them; one the page listed as pending
    // may have been claimed before its reason was read (a tick runs meanwhile):
    // then it is no longer pending when read again.
    let mut moved = Vec::new();
    for (subject, item) in &items {
        let pending_item = item["status"] == "pending";
        let said = !item["waiting_on"].is_null();
        ensure!(pending_item || !said, "{subject}: {item}");
        if pending_item && !said {
            moved.push(subject.clone());
        }
    }
    if !moved.is_empty() {
        let again = api
            .admin_raw(
                Method::GET,
                &format!("/batches/{batch}/items?status=pending&limit=100"),
                None,
            )
            .await?
            .json()
            .context("items are not JSON")?;
        let still: Vec<&str> = again["items"]
            .as_array()
            .context("no items")?
            .iter()
            .filter_map(|i| i["subject_id"].as_str())
            .filter(|s| moved.iter().any(|m| m == s))
            .collect();
        ensure!(still.is_empty(), "pending, yet no waiting_on: {still:?}");
    }
    Ok((items, counts, pending))
}

fn reason<'a>(items: &'a BTreeMap<String, Value>, subject: &str) -> Result<&'a Value> {
    let item = items
        .get(subject)
        .with_context(|| format!("no {subject}"))?;
    Ok(&item["waiting_on"])
}

/// The limits and the batch `e2e-waiting` whose items, once a tick runs, wait
/// on each key's reason: `a-refused` (429 + Retry-After 60: backoff, and it
/// pauses `host:localhost`), `b-sibling` (paused), `c-rate-1`/`-2` (one token a
/// minute), `d-conc-1` (a receiver slow for `slow_ms`) and `d-conc-2`
/// (concurrency 1), `e-free`. Returns the batch's id; nothing has run yet.
pub async fn seed_held(target: &Target, slow_ms: u64) -> Result<String> {
    let api = &target.api;
    put_limit(
        api,
        "rate:e2e",
        json!({"rate": 1, "per_seconds": 60, "burst": 1}),
    )
    .await?;
    put_limit(api, "conc:e2e", json!({"concurrency": 1})).await?;
    // One at a time on localhost: the refusal comes before its sibling is claimed.
    put_limit(api, "host:localhost", json!({"concurrency": 1})).await?;
    let refuse = Faults {
        fail_first: 1,
        status: Some(429),
        retry_after: Some(60),
        ..Faults::default()
    };
    let slow = Faults {
        latency_ms: slow_ms,
        ..Faults::default()
    };
    let items = vec![
        webhook(target, "a-refused", &refuse, "localhost", &[]),
        webhook(target, "b-sibling", &Faults::default(), "localhost", &[]),
        noop("c-rate-1", &["rate:e2e"]),
        noop("c-rate-2", &["rate:e2e"]),
        webhook(target, "d-conc-1", &slow, "127.0.0.1", &["conc:e2e"]),
        noop("d-conc-2", &["conc:e2e"]),
        noop("e-free", &[]),
    ];
    let (_, batch) = api
        .create_batch(&json!({"key": "e2e-waiting", "items": items}))
        .await?;
    Ok(batch.id.0)
}

/// A batch `e2e-waiting-low` of one free item behind a batch of priority 5
/// with a claim's worth of due items: the free item waits its turn until a
/// tick runs. Returns the low batch's id.
pub async fn seed_turn(api: &Api) -> Result<String> {
    let (_, low) = api
        .create_batch(&json!({"key": "e2e-waiting-low", "items": [noop("free", &[])]}))
        .await?;
    let high: Vec<Value> = (0..CLAIM_CHUNK)
        .map(|i| noop(&format!("h{i}"), &[]))
        .collect();
    api.create_batch(&json!({"key": "e2e-waiting-high", "priority": 5, "items": high}))
        .await?;
    Ok(low.id.0)
}

async fn each_item_says_what_holds_it(w: &mut Waiting<'_>) -> Result<()> {
    let api = &w.target.api;
    let batch = seed_held(w.target, SLOW_MS).await?;
    w.batch = Some(batch.clone());
    let tick = api.fire_cron(TICK_CRON);
    let look = async {
        // Once the slow item is in flight and the refusal committed.
        let deadline = std::time::Instant::now() + Duration::from_millis(SLOW_MS - 2_000);
        loop {
            let (items, counts, pending) = read(w, &batch).await?;
            let ready = reason(&items, "d-conc-2")?["reason"] == "concurrency"
                && reason(&items, "b-sibling")?["reason"] == "paused";
            if ready || std::time::Instant::now() > deadline {
                return Ok::<_, anyhow::Error>((items, counts, pending));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let (ticked, looked) = tokio::join!(tick, look);
    ticked?;
    let (items, counts, pending) = looked?;
    println!("#   waiting: {counts} of {pending} pending");
    let backoff = reason(&items, "a-refused")?;
    ensure!(backoff["reason"] == "backoff", "a-refused: {backoff}");
    ensure!(
        backoff["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("429")),
        "a-refused: {backoff}"
    );
    let paused = reason(&items, "b-sibling")?;
    // The pause names the receiver's word: the refused item's error.
    ensure!(
        paused["reason"] == "paused"
            && paused["key"] == "host:localhost"
            && paused["word"] == backoff["last_error"],
        "b-sibling: {paused}"
    );
    let rate = reason(&items, "c-rate-2")?;
    ensure!(
        rate["reason"] == "rate" && rate["key"] == "rate:e2e" && rate["next_token_at"].is_string(),
        "c-rate-2: {rate}"
    );
    let conc = reason(&items, "d-conc-2")?;
    ensure!(
        conc == &json!({"reason": "concurrency", "key": "conc:e2e", "in_flight": 1, "concurrency": 1}),
        "d-conc-2: {conc}"
    );
    for r in ["backoff", "paused", "rate", "concurrency"] {
        ensure!(counts[r].as_i64() >= Some(1), "{r}: {counts}");
    }
    Ok(())
}

async fn a_higher_priority_makes_the_free_item_wait_its_turn(w: &mut Waiting<'_>) -> Result<()> {
    let api = &w.target.api;
    let batch = w.batch.clone().context("no batch")?;
    // The first batch's free item went with the tick: a fresh batch holds one.
    let low = seed_turn(api).await?;
    let (items, counts, _) = read(w, &low).await?;
    let turn = reason(&items, "free")?;
    ensure!(
        turn == &json!({"reason": "turn", "batches": 1, "priority": 5}),
        "free: {turn}"
    );
    ensure!(counts["turn"] == 1, "{counts}");
    // The first batch's counts still add up (read checks it).
    read(w, &batch).await?;
    Ok(())
}
