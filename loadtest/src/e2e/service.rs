//! The `service` kind end to end: cron-fanout and the example TypeScript handler
//! (`examples/service-handler`, on the `cron-fanout-handler` package) in one
//! multi-worker `wrangler dev`, cron-fanout bound to it as `HANDLER`. Bad payloads
//! are refused with nothing written; one small batch asks the handler (through
//! each item's `data`) for every answer: done, a retry then done, a permanent
//! failure with its text, a timeout, and a `Retry-After` that sets the next
//! attempt's time. A second batch reports channels: a partial success (its
//! channels sent to the sink's Discord fake, one answering 429 once) retried
//! without resending the delivered channel, and a malformed `channels` answer
//! retried, never taken as done. A probe's calls before any item take no
//! item's key. A handler's delay is its item's: one subject's channel retry
//! with `afterSeconds` 40 holds neither the binding nor its other subjects.
//! Learning is on, as in a deployment: none of this teaches the binding a rate.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive::until_ended;
use crate::driver::target::{Target, TargetArgs};
use crate::run::service::{self, open, BINDING};
use crate::runtime::api::{Api, Batch, Item, TICK_CRON};
use crate::sink::fakes::{FakeRequest, FakesClient, Setup};
use anyhow::{bail, ensure, Context, Result};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let target = open(args, "e2e-service").await?;
    let fakes = FakesClient::new(target.sink.base());
    let script = [(format!("discord:{TELEGRAM_FAKE}"), vec![429])];
    fakes
        .setup(&Setup {
            script: script.into_iter().collect(),
            ..Setup::default()
        })
        .await?;
    let mut f = Service {
        target,
        fakes,
        timeout,
        batch: None,
        first: None,
        channels: None,
    };
    checks
        .run(
            &mut f,
            vec![
                check!(refused_line(UNLISTED), unlisted_binding_refused),
                check!(refused_line(UNBOUND), unbound_binding_refused),
                check!(refused_line(BAD_PATH), bad_path_refused),
                check!("service: after a probe (20 calls each way), the first real item still runs: the probe's calls take no item's Idempotency-Key, and the handler, which does an item's work once per key, skips them (Fanout-Probe: 1)", the_first_item_runs_after_a_probe),
                check!(needed "service, first tick: 2xx done; 503 retried; 422 failed for good with the handler's text; a late answer timed out", first_tick_answers_each_outcome),
                check!("service: retry(reason, {afterSeconds: 2}) (a 503 with after_seconds 2) sets the next attempt 2 s after it (not the 5 s+ backoff), spending the attempt", retry_after_sets_the_next_attempt),
                check!("service: the retried items are done on attempt 2, the batch ends 4 completed, 1 failed", retried_items_done_on_attempt_2),
                check!(needed "service channels, first tick: a partial success (Discord done, Telegram 429) keeps Discord delivered and is retried after the channel's Retry-After (1 s); a malformed channels answer is a retry whose last_error names channels, nothing recorded", channels_first_tick),
                check!("service channels: the retry sends Telegram only (Discord's fake saw one message, Telegram's two), completed on attempt 2 with both delivered", partial_success_retried_without_resending),
                check!("service channels: the malformed answer is retried until its attempts run out and ends failed naming channels, never done", malformed_channels_never_taken_as_done),
                check!("POST /probe mode service refuses a binding SERVICE_BINDINGS does not list: 400 invalid_probe", probe_refuses_an_unlisted_binding),
                check!("POST /probe mode service runs a service item's call straight from the caller (as the drain does) and through a SELF child: every call done both ways", probe_times_both_paths),
                check!("service: one subject's channel retry with afterSeconds 40 delays that item alone (attempt spent, due at the retry cap): the binding's 5 other subjects complete in the same tick, and GET /limits shows no pause and no learned rate of service:HANDLER", a_channels_delay_holds_nothing_else),
            ],
        )
        .await;
    f.target.stop().await
}

/// The part's Worker, its batch, and its items after the first tick.
struct Service {
    target: Target,
    fakes: FakesClient,
    timeout: Duration,
    batch: Option<Batch>,
    first: Option<Vec<Item>>,
    /// The channels batch.
    channels: Option<Batch>,
}

/// The Discord fake's webhook ids the two channels of the partial item send to.
const DISCORD_FAKE: &str = "svc-discord";
const TELEGRAM_FAKE: &str = "svc-telegram";

/// Payloads refused: what each is, as its report line says it.
const UNLISTED: &str = "a binding SERVICE_BINDINGS does not list";
const UNBOUND: &str = "a binding listed but not bound";
const BAD_PATH: &str = "a bad path";

async fn probe_refuses_an_unlisted_binding(f: &mut Service) -> Result<()> {
    let body = json!({"mode": "service", "service": "OTHER", "calls": 1});
    let answer = f
        .target
        .api
        .admin_raw(Method::POST, "/probe", Some(body.to_string()))
        .await?;
    answer
        .refused(StatusCode::BAD_REQUEST, "invalid_probe")
        .map_err(anyhow::Error::msg)?;
    ensure!(
        answer.body.contains("SERVICE_BINDINGS"),
        "the refusal does not name SERVICE_BINDINGS: {}",
        answer.body
    );
    Ok(())
}

/// A few calls each way: both paths reach the handler and answer done (their
/// speeds are compared by `bench --only-service-paths`, not here).
async fn probe_times_both_paths(f: &mut Service) -> Result<()> {
    let paths = service::measure(&f.target.api, BINDING, 20, 5, 1).await?;
    println!("#   {}", paths.summary());
    paths.all_done().map_err(anyhow::Error::msg)
}

/// A probe before any item: its calls used to carry the ids and keys 1..N that
/// real items get, so a handler deduping on the key (the example does) took the
/// first items for calls it had done and never ran them. The first item asks
/// for a permanent failure: only a handler that ran it answers one.
async fn the_first_item_runs_after_a_probe(f: &mut Service) -> Result<()> {
    let api = &f.target.api;
    service::measure(api, BINDING, 20, 5, 1)
        .await?
        .all_done()
        .map_err(anyhow::Error::msg)?;
    let payload = json!({"service": BINDING, "path": "/after-probe",
                         "data": {"outcome": "fail", "reason": "ran after the probe"}});
    let body =
        json!({"items": [{"subject_id": "after-probe", "kind": "service", "payload": payload}]});
    let (_, batch): (bool, Batch) = api.create_batch(&body).await?;
    api.fire_cron(TICK_CRON).await?;
    let items = api.all_items(&batch.id, None).await?;
    let item = find(&items, "after-probe")?;
    ensure!(
        item.id <= 20,
        "item id {}: not one a probe call used to take",
        item.id
    );
    expect(
        item,
        "failed",
        1,
        Some("permanent failure: HTTP 422: ran after the probe"),
    )
}

fn refused_line(what: &str) -> String {
    format!("service: {what} is refused with 400 invalid_payload, nothing written")
}

async fn unlisted_binding_refused(f: &mut Service) -> Result<()> {
    refused_with_nothing_written(&f.target.api, json!({"service": "OTHER"})).await
}

async fn unbound_binding_refused(f: &mut Service) -> Result<()> {
    refused_with_nothing_written(&f.target.api, json!({"service": "GONE"})).await
}

async fn bad_path_refused(f: &mut Service) -> Result<()> {
    refused_with_nothing_written(
        &f.target.api,
        json!({"service": BINDING, "path": "no-slash"}),
    )
    .await
}

/// `payload` refused by `PUT /subjects` and `POST /batches`, and no subject or
/// batch written (by it or the ones before).
async fn refused_with_nothing_written(api: &Api, payload: Value) -> Result<()> {
    let subjects = json!({"subjects": [{"id": "s1", "kind": "service", "payload": payload}]});
    let items = json!({"items": [{"subject_id": "s1", "kind": "service", "payload": payload}]});
    let put = api
        .admin_raw(Method::PUT, "/subjects", Some(subjects.to_string()))
        .await?;
    let post = api
        .admin_raw(Method::POST, "/batches", Some(items.to_string()))
        .await?;
    let subjects = api.all_subjects().await?.len();
    let batches = api.batches(10).await?.len();
    match (put.status, post.status, subjects, batches) {
        (StatusCode::BAD_REQUEST, StatusCode::BAD_REQUEST, 0, 0)
            if put.body.contains("invalid_payload") && post.body.contains("invalid_payload") =>
        {
            Ok(())
        }
        other => bail!("{other:?}: {} / {}", put.body, post.body),
    }
}

/// The subjects of the batch and what each asks the handler for.
fn items() -> Value {
    let item = |id: &str, data: Value| json!({"subject_id": id, "kind": "service", "payload": {"service": BINDING, "path": format!("/{id}"), "data": data}});
    json!({"items": [
        item("done", json!({})),
        item("retry-then-done", json!({"outcome": "retry", "times": 1, "reason": "warming up"})),
        item("permanent", json!({"outcome": "fail", "reason": "unknown login"})),
        item("timeout", json!({"sleep_ms": 4000, "times": 1})),
        item("retry-after", json!({"outcome": "retry", "times": 1, "after_seconds": 2})),
    ]})
}

fn find<'a>(items: &'a [Item], subject: &str) -> Result<&'a Item> {
    items
        .iter()
        .find(|i| i.subject_id == subject)
        .with_context(|| format!("no item {subject}"))
}

fn ms(rfc3339: Option<&str>) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(rfc3339?)
        .ok()
        .map(|t| t.timestamp_millis())
}

fn expect(item: &Item, status: &str, attempt: u32, error: Option<&str>) -> Result<()> {
    let got = (
        item.status.as_str(),
        item.attempt,
        item.last_error.as_deref(),
    );
    ensure!(
        got == (status, attempt, error),
        "{}: {got:?}",
        item.subject_id
    );
    Ok(())
}

/// Creates the batch and fires one tick: each item as its first answer left it.
async fn first_tick_answers_each_outcome(f: &mut Service) -> Result<()> {
    let api = &f.target.api;
    let (_, batch): (bool, Batch) = api.create_batch(&items()).await?;
    api.fire_cron(TICK_CRON).await?;
    let first = api.all_items(&batch.id, None).await?;
    f.batch = Some(batch);
    let first = f.first.insert(first);
    expect(find(first, "done")?, "completed", 1, None)?;
    expect(
        find(first, "retry-then-done")?,
        "pending",
        1,
        Some("attempt 1 failed: HTTP 503"),
    )?;
    expect(
        find(first, "permanent")?,
        "failed",
        1,
        Some("permanent failure: HTTP 422: unknown login"),
    )?;
    expect(
        find(first, "timeout")?,
        "pending",
        1,
        Some("attempt 1 failed: timed out after 2000 ms"),
    )
}

async fn retry_after_sets_the_next_attempt(f: &mut Service) -> Result<()> {
    let first = f.first.as_ref().context("no items after the first tick")?;
    let item = find(first, "retry-after")?;
    expect(item, "pending", 1, Some("attempt 1 failed: HTTP 503"))?;
    let (Some(started), Some(due)) = (
        ms(item.started_at.as_deref()),
        ms(item.run_after.as_deref()),
    ) else {
        bail!("times missing: {item:?}");
    };
    let delay = due - started;
    ensure!(
        (2_000..4_000).contains(&delay),
        "run_after - started_at = {delay} ms"
    );
    Ok(())
}

async fn retried_items_done_on_attempt_2(f: &mut Service) -> Result<()> {
    let api = &f.target.api;
    let batch = f.batch.as_ref().context("no batch")?;
    // The first tick is still the latest: it is the one shown.
    if let Some(tick) = api.invocations(1).await?.first() {
        let s = &tick.summary;
        println!(
            "# service, first tick: {} items claimed, {} subrequests of the budget, {} D1 statements",
            s.tally.claimed, s.subrequests, s.d1_statements
        );
    }
    let ended = until_ended(api, &batch.id, f.timeout).await?;
    let last = api.all_items(&batch.id, None).await?;
    for subject in ["retry-then-done", "timeout", "retry-after"] {
        let item = find(&last, subject)?;
        ensure!(
            (item.status.as_str(), item.attempt) == ("completed", 2),
            "{subject}: {} attempt {}",
            item.status,
            item.attempt
        );
    }
    match (ended.completed, ended.failed) {
        (4, 1) => Ok(()),
        other => bail!("batch {other:?}"),
    }
}

/// The channels batch: `partial` sends Discord and Telegram (both to the sink's
/// Discord fake, Telegram's answering 429 once, `Retry-After: 1`); `malformed` is the handler's
/// path that answers a `channels` no handler should.
fn channel_items(fakes: &FakesClient) -> Value {
    let channels = json!({
        "discord": fakes.discord_webhook_url(DISCORD_FAKE, "t"),
        "telegram": fakes.discord_webhook_url(TELEGRAM_FAKE, "t"),
    });
    json!({"key": "service-channels", "items": [
        {"subject_id": "partial", "kind": "service",
         "payload": {"service": BINDING, "path": "/partial", "data": {"channels": channels}}},
        {"subject_id": "malformed", "kind": "service",
         "payload": {"service": BINDING, "path": "/malformed"}},
    ]})
}

/// The status of `channel` in an item's receipts.
fn receipt(item: &Item, channel: &str) -> Option<String> {
    let r = item.receipts.as_ref()?.get(channel)?;
    Some(r.get("status")?.as_str()?.to_string())
}

/// Creates the channels batch and fires one tick.
async fn channels_first_tick(f: &mut Service) -> Result<()> {
    let api = &f.target.api;
    let (_, batch): (bool, Batch) = api.create_batch(&channel_items(&f.fakes)).await?;
    api.fire_cron(TICK_CRON).await?;
    let first = api.all_items(&batch.id, None).await?;
    f.channels = Some(batch);
    let partial = find(&first, "partial")?;
    expect(
        partial,
        "pending",
        1,
        Some("attempt 1 failed: channel telegram: HTTP 429"),
    )?;
    // The channel's Retry-After, not the 5 s+ backoff.
    let delay = ms(partial.run_after.as_deref()).zip(ms(partial.started_at.as_deref()));
    ensure!(
        delay.is_some_and(|(due, started)| (1_000..4_000).contains(&(due - started))),
        "partial: run_after {:?}, started_at {:?}",
        partial.run_after,
        partial.started_at
    );
    let receipts = (receipt(partial, "discord"), receipt(partial, "telegram"));
    ensure!(
        receipts == (Some("delivered".into()), Some("pending".into())),
        "partial receipts {:?}",
        partial.receipts
    );
    let malformed = find(&first, "malformed")?;
    let said = malformed.last_error.as_deref().unwrap_or_default();
    ensure!(
        (malformed.status.as_str(), malformed.attempt) == ("pending", 1)
            && said.starts_with("attempt 1 failed: malformed answer: channels[\"telegram\"]")
            && malformed.receipts.is_none(),
        "malformed: {} attempt {} {said:?} receipts {:?}",
        malformed.status,
        malformed.attempt,
        malformed.receipts
    );
    Ok(())
}

/// The statuses the Discord fake answered for webhook `id`, in order.
fn answered(requests: &[FakeRequest], id: &str) -> Vec<u16> {
    requests
        .iter()
        .filter(|r| r.api == "discord" && r.key.as_deref() == Some(id))
        .map(|r| r.status)
        .collect()
}

/// Runs the channels batch to its end; its items.
async fn channels_ended(f: &mut Service) -> Result<Vec<Item>> {
    let batch = f.channels.as_ref().context("no channels batch")?;
    until_ended(&f.target.api, &batch.id, f.timeout).await?;
    f.target.api.all_items(&batch.id, None).await
}

async fn partial_success_retried_without_resending(f: &mut Service) -> Result<()> {
    let items = channels_ended(f).await?;
    let partial = find(&items, "partial")?;
    let requests = f.fakes.requests().await?;
    let (discord, telegram) = (
        answered(&requests, DISCORD_FAKE),
        answered(&requests, TELEGRAM_FAKE),
    );
    let both = (receipt(partial, "discord"), receipt(partial, "telegram"));
    ensure!(
        (partial.status.as_str(), partial.attempt) == ("completed", 2)
            && both == (Some("delivered".into()), Some("delivered".into()))
            && discord == [204]
            && telegram == [429, 204],
        "partial: {} attempt {} receipts {:?}; Discord answered {discord:?}, Telegram {telegram:?}",
        partial.status,
        partial.attempt,
        partial.receipts
    );
    Ok(())
}

async fn malformed_channels_never_taken_as_done(f: &mut Service) -> Result<()> {
    let items = channels_ended(f).await?;
    let malformed = find(&items, "malformed")?;
    let said = malformed.last_error.as_deref().unwrap_or_default();
    ensure!(
        (malformed.status.as_str(), malformed.attempt) == ("failed", 3)
            && said.contains("malformed answer: channels")
            && malformed.receipts.is_none(),
        "malformed: {} attempt {} {said:?}",
        malformed.status,
        malformed.attempt
    );
    Ok(())
}

/// One subject whose handler reports its channel `slow` retried 40 s later
/// (`retry("asked", {afterSeconds: 40})` for that channel), beside 5 that are
/// done at once.
async fn a_channels_delay_holds_nothing_else(f: &mut Service) -> Result<()> {
    let api = &f.target.api;
    let slow = json!({"retry_channel": "slow", "after_seconds": 40});
    let mut items = vec![json!({"subject_id": "delayed", "kind": "service",
                                "payload": {"service": BINDING, "path": "/delayed", "data": slow}})];
    for n in 0..5 {
        items.push(json!({"subject_id": format!("fast-{n}"), "kind": "service",
                          "payload": {"service": BINDING, "path": "/fast", "data": {}}}));
    }
    let body = json!({"key": "service-delays", "items": items});
    let (_, batch): (bool, Batch) = api.create_batch(&body).await?;
    api.fire_cron(TICK_CRON).await?;
    let after = api.all_items(&batch.id, None).await?;
    let fast: Vec<&Item> = after.iter().filter(|i| i.subject_id != "delayed").collect();
    ensure!(
        fast.len() == 5
            && fast
                .iter()
                .all(|i| (i.status.as_str(), i.attempt) == ("completed", 1)),
        "the other subjects after one tick: {:?}",
        fast.iter()
            .map(|i| (&i.subject_id, &i.status, i.attempt))
            .collect::<Vec<_>>()
    );
    let delayed = find(&after, "delayed")?;
    expect(
        delayed,
        "pending",
        1,
        Some("attempt 1 failed: channel slow: asked"),
    )?;
    // 40 s asked, capped by RETRY_MAX_MS (20 s): not the 5 to 10 s backoff.
    let delay = ms(delayed.run_after.as_deref()).zip(ms(delayed.started_at.as_deref()));
    ensure!(
        delay.is_some_and(|(due, started)| (19_000..25_000).contains(&(due - started))),
        "delayed: run_after {:?}, started_at {:?}",
        delayed.run_after,
        delayed.started_at
    );
    let r = api.admin_raw(Method::GET, "/limits", None).await?;
    let limits = r.json().context("GET /limits is not JSON")?;
    let key = format!("service:{BINDING}");
    let named = |list: &str| {
        limits[list]
            .as_array()
            .is_some_and(|l| l.iter().any(|p| p["key"] == json!(key)))
    };
    ensure!(
        !named("paused") && !named("learned"),
        "{key} is held: GET /limits {limits}"
    );
    Ok(())
}
