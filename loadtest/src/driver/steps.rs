//! Scenario steps that the e2e suite, `loadtest run` and the demo share: a
//! one-off schedule that the next tick fires, an ad-hoc batch over the subjects, waiting for the batch it creates,
//! crashing the runtime mid-batch, firing crons again after a batch finished, a
//! batch of webhook items to the sink, a batch's items by subject, a
//! `PUT /subjects` refused whole, and a limit put and read.

use crate::driver::drive;
use crate::driver::target::Target;
use crate::runtime::api::{clip, encode, Api, Batch, Id, Item, DAILY_CRON, TICK_CRON};
use crate::sink::faults::Faults;
use crate::sink::SinkClient;
use anyhow::{bail, ensure, Context, Result};
use cron_fanout::core::time::rfc3339;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Saves the one-off schedule `id` due now (`{"at": <now>}`, real time) and
/// returns its body and the key of the batch the next tick fires from it
/// (`<id>:<instant>`). The batch is then created inside a tick, as every
/// scheduled batch is, with its init counted in that invocation.
pub async fn one_off_now(api: &Api, id: &str) -> Result<(Value, String)> {
    one_off_now_with(api, id, json!({})).await
}

/// [`one_off_now`] with more fields in the schedule's body (`on_finish`).
pub async fn one_off_now_with(api: &Api, id: &str, more: Value) -> Result<(Value, String)> {
    let at = rfc3339(chrono::Utc::now().timestamp_millis());
    let mut body = json!({ "at": at });
    if let (Some(body), Value::Object(more)) = (body.as_object_mut(), more) {
        body.extend(more);
    }
    let (_, schedule) = api.put_schedule(id, &body).await?;
    ensure!(
        schedule.next_fire_at.as_deref() == Some(at.as_str()),
        "PUT /schedules/{id}: next_fire_at {:?}, want {at}",
        schedule.next_fire_at
    );
    Ok((body, format!("{id}:{at}")))
}

/// An ad-hoc batch `key` over every active subject, which must hold the `n`
/// seeded.
pub async fn subjects_batch(api: &Api, key: &str, n: usize) -> Result<Batch> {
    let (_, batch) = api
        .create_batch(&json!({"key": key, "source": "subjects"}))
        .await?;
    ensure!(
        batch.total == n as u64,
        "batch {key} has {} items, not {n}",
        batch.total
    );
    Ok(batch)
}

/// The one batch with key `key`, if any (an error if several: keys are unique).
pub async fn batch_by_key(api: &Api, key: &str) -> Result<Option<Batch>> {
    let found: Vec<Batch> = api
        .batches(100)
        .await?
        .into_iter()
        .filter(|b| b.key.as_deref() == Some(key))
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [b] => Ok(Some(b.clone())),
        many => bail!("{} batches with key {key:?}", many.len()),
    }
}

/// Waits until the batch with `key` exists, while the scheduled runs in `running`
/// (the tick that fires it) go on; a run that ended without creating it failed.
pub async fn await_batch(
    api: &Api,
    key: &str,
    running: &mut JoinSet<Result<()>>,
    timeout: Duration,
) -> Result<Batch> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(b) = batch_by_key(api, key).await? {
            return Ok(b);
        }
        if let Some(done) = running.try_join_next() {
            done??;
            if running.is_empty() {
                return batch_by_key(api, key)
                    .await?
                    .with_context(|| format!("the tick created no batch {key:?}"));
            }
            continue;
        }
        ensure!(
            Instant::now() < deadline,
            "no batch {key:?} after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fires ticks (one at a time) until some but not all items of batch `id` are
/// completed and some are in flight, then SIGKILLs the runtime. Returns the batch
/// as last seen before the kill. The caller restarts the runtime.
pub async fn kill_mid_batch(target: &mut Target, id: &Id, timeout: Duration) -> Result<Batch> {
    let api = target.api.clone();
    // In flight when seen, not only unfinished: between two ticks nothing is, and a
    // kill there (seen on a loaded machine) would test no recovery of leases.
    let (at_kill, tick) = drive::ticks_until(&api, id, timeout, |b| {
        b.completed > 0 && b.processing > 0 && b.completed + b.failed < b.total
    })
    .await?;
    let runtime = target.runtime.as_mut().context("no local runtime")?;
    runtime.kill_hard();
    // The in-flight trigger request dies with the runtime; its error is expected.
    let _ = tick.await;
    Ok(at_kill)
}

/// Fires crons again after `daily` (a finished scheduled batch) — a tick and the
/// old daily expression, now just another tick: the key must still name that one
/// batch, unchanged, and the sink must have seen no new delivery.
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

/// The one-off schedule each run creates its batch with: fired by a tick, like
/// the `daily` schedule, so the batch's init is part of that tick's invocation.
pub const RUN_SCHEDULE: &str = "loadtest";

/// Creates ad-hoc batch `key` of `n` webhook items to the sink, each with
/// `faults` (subjects `<key>-00000`...).
pub async fn webhook_batch(
    api: &Api,
    sink: &SinkClient,
    key: &str,
    n: usize,
    faults: &Faults,
) -> Result<Batch> {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let subject = format!("{key}-{i:05}");
            json!({"subject_id": subject, "kind": "webhook",
                   "payload": {"url": sink.hook_url(&subject, faults), "data": {"n": i}}})
        })
        .collect();
    let (created, batch) = api
        .create_batch(&json!({"key": key, "items": items}))
        .await?;
    ensure!(created, "batch {key} existed already");
    ensure!(
        batch.total == n as u64,
        "batch {key} has {} items",
        batch.total
    );
    Ok(batch)
}

/// A batch's items by subject id.
pub async fn items_by_subject(api: &Api, id: &Id) -> Result<HashMap<String, Item>> {
    Ok(api
        .all_items(id, None)
        .await?
        .into_iter()
        .map(|i| (i.subject_id.clone(), i))
        .collect())
}

/// `PUT /subjects` with `body`, which a subject's kind refuses: 400
/// `invalid_payload` with a message containing `reason`, and no subject written
/// (the valid ones beside it included).
pub async fn subjects_refused_whole(api: &Api, body: &Value, reason: &str) -> Result<()> {
    let resp = api
        .admin_raw(Method::PUT, "/subjects", Some(body.to_string()))
        .await?;
    let written = api.all_subjects().await?.len();
    match resp.error_shape() {
        Some((code, message))
            if resp.status == StatusCode::BAD_REQUEST
                && code == "invalid_payload"
                && message.contains(reason)
                && written == 0 =>
        {
            Ok(())
        }
        other => bail!("{} {other:?}, {written} subjects written", resp.status),
    }
}

/// `PUT /limits/{key}` with `limit`, which must answer 200.
pub async fn put_limit(api: &Api, key: &str, limit: Value) -> Result<()> {
    answer(
        api,
        Method::PUT,
        &limit_path(key),
        Some(limit),
        StatusCode::OK,
    )
    .await?;
    Ok(())
}

/// `GET /limits/{key}`, which must answer 200: the limit and its live state.
pub async fn get_limit(api: &Api, key: &str) -> Result<Value> {
    answer(api, Method::GET, &limit_path(key), None, StatusCode::OK).await
}

pub fn limit_path(key: &str) -> String {
    format!("/limits/{}", encode(key))
}

/// `method` on `path` (as the admin) answers `status`; its JSON body.
pub async fn answer(
    api: &Api,
    method: Method,
    path: &str,
    body: Option<Value>,
    status: StatusCode,
) -> Result<Value> {
    let r = api
        .admin_raw(method.clone(), path, body.map(|b| b.to_string()))
        .await?;
    ensure!(
        r.status == status,
        "{method} {path}: {} {}, want {status}",
        r.status,
        clip(&r.body)
    );
    r.json()
        .with_context(|| format!("{method} {path}: not JSON: {}", clip(&r.body)))
}
