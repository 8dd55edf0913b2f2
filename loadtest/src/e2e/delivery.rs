//! Delivery end to end: completion callbacks and multi-channel
//! items against a real Worker and sink, the e2e checks ([`e2e`]); the pure
//! verdicts they share with the `multi` scenario of `loadtest run` are in
//! `run::delivery`.
//!
//! A callback is told apart by its `Idempotency-Key` (`batch:<id>:<finished_at>`,
//! one per end of a batch, the same for the retries of one end); a channel's
//! deliveries by theirs (`<item id>:<channel>`).

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive::{until_called_back, until_ended};
use crate::driver::target::{Target, TargetArgs};
use crate::run::delivery::{
    callbacks, delivered_once, end_key, killed_then_delivered, multi_item, multi_item_ok,
    named_by_invocations,
};
use crate::runtime::api::{Api, Batch, Invocation, Item, TICK_CRON};
use crate::sink::faults::Faults;
use crate::sink::{Delivery, SinkClient};
use crate::{driver::verdict, e2e::suite};
use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- flows

/// An ad-hoc batch `key` of these items, calling back `on_finish` (a URL).
async fn create(
    api: &Api,
    key: &str,
    items: Vec<Value>,
    on_finish: Option<String>,
) -> Result<Batch> {
    let n = items.len() as u64;
    let mut body = json!({"key": key, "items": items});
    if let Some(url) = on_finish {
        body["on_finish"] = json!({ "url": url });
    }
    let (created, batch) = api.create_batch(&body).await?;
    ensure!(created, "batch {key} existed already");
    ensure!(batch.total == n, "batch {key} has {} items", batch.total);
    Ok(batch)
}

/// Batch `key` of `good` webhook items and one (`<faulty>-00000`) whose receiver
/// has `faults`, calling back to the plain receiver `callback`; ticked until it
/// ended (its callback not yet sent).
async fn ended_with_one_faulty(
    f: &Delivering,
    key: &str,
    good: usize,
    faulty: &str,
    faults: &Faults,
    callback: &str,
) -> Result<Batch> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let mut items = webhook_items(sink, key, good, &Faults::default());
    items.extend(webhook_items(sink, faulty, 1, faults));
    let on_finish = sink.callback_url(callback, &Faults::default());
    let batch = create(api, key, items, Some(on_finish)).await?;
    until_ended(api, &batch.id, f.timeout).await?;
    Ok(batch)
}

/// `n` webhook items to the sink, subjects `<key>-00000`…, each with `faults`.
fn webhook_items(sink: &SinkClient, key: &str, n: usize, faults: &Faults) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let subject = format!("{key}-{i:05}");
            json!({"subject_id": subject, "kind": "webhook",
                   "payload": {"url": sink.hook_url(&subject, faults), "data": {"n": i}}})
        })
        .collect()
}

// ---------------------------------------------------------------- e2e

/// The e2e checks of delivery on a Worker of their own (the suite's settings):
/// callbacks (a receiver failing twice first, a cancelled batch, an end after a
/// replay, the runtime killed mid-delivery) and multi-channel items.
pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let target = suite::open_worker(args, "e2e-delivery", [], Vec::new())
        .await
        .context("starting the delivery Worker")?;
    let mut f = Delivering {
        target,
        timeout,
        flaky: None,
        multi: None,
        corr: None,
    };
    // A list per batch: one whose flow stops leaves the others to run.
    let callback = vec![
        check!(needed "POST /batches with on_finish answers it, and the callback pending", on_finish_answered_with_callback_pending),
        check!(needed "completion callback: the receiver fails twice, the third delivery is received once, signed, with the batch's summary (Idempotency-Key batch:<id>:<finished_at>)", callback_received_once_after_two_failures),
        check!(
            "after its delivery, a tick sends the callback no more",
            delivered_callback_not_sent_again
        ),
    ];
    let cancelled = vec![check!(
        "a batch that ends cancelled calls back once with status cancelled and its counts",
        cancelled_batch_calls_back_once
    )];
    let replay = vec![check!(
        "replay: the batch ends again and calls back again, a later finished_at, the new counts, and its own Idempotency-Key (batch:<id>:<finished_at>), not the first end's",
        replayed_batch_calls_back_again
    )];
    let multi = vec![
        check!(needed "multi item: the second channel hangs past JOB_TIMEOUT_MS twice then answers; the first is delivered exactly once; completed on attempt 3, both receipts delivered", multi_item_with_a_channel_hanging_twice_completes),
        check!("multi item: the second channel fails twice then succeeds; the first is delivered exactly once; completed on attempt 3, both receipts delivered", multi_item_with_a_channel_failing_twice_completes),
        check!("multi item: a channel refused for good (400) fails the item at once, its receipt failed with the error, the delivered one kept", multi_item_with_a_channel_refused_fails_at_once),
        check!("a failed multi item says which channel failed and why: the status and the start of the answer's text", failed_multi_item_names_channel_and_answer),
    ];
    let mut correlation = vec![
        check!(needed "correlation: every webhook carries Fanout-Invocation, the id GET /invocations shows for the tick that dispatched it", webhooks_name_their_tick),
        check!("correlation: the completion callback carries Fanout-Invocation naming the tick that dispatched it", callback_names_its_tick),
        check!("correlation: every new summary in GET /invocations has an invocation id of its own", summaries_have_their_own_ids),
    ];
    let local = f.target.runtime.is_some();
    if local {
        correlation.push(check!("correlation: the child's item_outcome line and the tick's invocation summary line carry the id its webhook carried", log_lines_carry_the_webhooks_id));
    }
    for list in [callback, cancelled, replay, multi, correlation] {
        checks.run(&mut f, list).await;
    }
    if local {
        let kill = vec![check!("runtime killed while the callback was being delivered: after the restart it is delivered again (same summary, signed), the receiver answers this end exactly once, and it ends delivered", callback_survives_a_kill)];
        checks.run(&mut f, kill).await;
    } else {
        println!("# correlation log check skipped: --url mode has no log");
        println!("# callback crash check skipped: --url mode cannot kill the Worker");
    }
    f.target.stop().await
}

/// The delivery part's Worker, and what its checks carry on for the next ones.
struct Delivering {
    target: Target,
    timeout: Duration,
    /// The batch whose callback receiver fails twice first.
    flaky: Option<Batch>,
    multi: Option<Multi>,
    corr: Option<Correlated>,
}

/// The multi-channel batch once it ended: each item's channels and their
/// faults, its items and every delivery the sink had.
struct Multi {
    batch: Batch,
    plans: Vec<(&'static str, Vec<(String, Faults)>)>,
    max_attempts: u32,
    items: Vec<Item>,
    all: Vec<Delivery>,
}

/// The correlation batch once it called back: the invocations since it was
/// created, and its webhooks.
struct Correlated {
    batch: Batch,
    ours: Vec<Invocation>,
    webhooks: Vec<Delivery>,
}

async fn on_finish_answered_with_callback_pending(f: &mut Delivering) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let flaky = Faults {
        fail_first: 2,
        ..Faults::default()
    };
    let items = webhook_items(sink, "cb-flaky", 5, &Faults::default());
    let batch = create(
        api,
        "cb-flaky",
        items,
        Some(sink.callback_url("flaky", &flaky)),
    )
    .await?;
    let batch = f.flaky.insert(batch);
    match (&batch.on_finish, &batch.callback) {
        (Some(o), Some(cb))
            if o["url"]
                .as_str()
                .is_some_and(|u| u.contains("/callback/flaky"))
                && cb.status == "pending"
                && cb.attempts == 0 =>
        {
            Ok(())
        }
        other => bail!("{other:?}"),
    }
}

async fn callback_received_once_after_two_failures(f: &mut Delivering) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let id = &f.flaky.as_ref().context("no batch calling back")?.id;
    let ended = until_ended(api, id, f.timeout).await?;
    let done = until_called_back(api, id, f.timeout).await?;
    let records = callbacks(sink, id).await?;
    delivered_once(&done, &records, Some(3))
        .and_then(|ends| {
            let statuses: Vec<Option<u16>> = records.iter().map(|c| c.status).collect();
            if ends.len() == 1
                && statuses == [Some(503), Some(503), Some(200)]
                && done.finished_at == ended.finished_at
            {
                Ok(())
            } else {
                Err(format!("{} ends, answered {statuses:?}", ends.len()))
            }
        })
        .map_err(anyhow::Error::msg)
}

async fn delivered_callback_not_sent_again(f: &mut Delivering) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let before = sink.stats(false).await?.callbacks.len();
    api.fire_cron(TICK_CRON).await?;
    ensure!(
        sink.stats(false).await?.callbacks.len() == before,
        "another callback arrived"
    );
    Ok(())
}

async fn cancelled_batch_calls_back_once(f: &mut Delivering) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let items = webhook_items(sink, "cb-cancel", 3, &Faults::default());
    let batch = create(
        api,
        "cb-cancel",
        items,
        Some(sink.callback_url("cancel", &Faults::default())),
    )
    .await?;
    let answer = api.control(&batch.id, "cancel").await?;
    ensure!(answer.cancelled == 3, "cancel: {}", answer.progress());
    until_ended(api, &batch.id, f.timeout).await?;
    let done = until_called_back(api, &batch.id, f.timeout).await?;
    let records = callbacks(sink, &batch.id).await?;
    delivered_once(&done, &records, Some(1))
        .and_then(|ends| match ends.as_slice() {
            [s] if s.status == "cancelled" && s.cancelled == 3 => Ok(()),
            other => Err(format!("{other:?}")),
        })
        .map_err(anyhow::Error::msg)
}

async fn replayed_batch_calls_back_again(f: &mut Delivering) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let broken = Faults {
        status: Some(500),
        ..Faults::default()
    };
    let batch =
        ended_with_one_faulty(f, "cb-replay", 2, "cb-replay-broken", &broken, "replay").await?;
    let first = until_called_back(api, &batch.id, f.timeout).await?;
    ensure!(first.failed == 1, "first end: {}", first.progress());
    sink.fix(&["cb-replay-broken-00000".to_string()]).await?;
    let requeued = api
        .retry_batch(&batch.id, &json!({"status": "failed"}))
        .await?;
    ensure!(requeued == 1, "replay requeued {requeued}");
    until_ended(api, &batch.id, f.timeout).await?;
    let second = until_called_back(api, &batch.id, f.timeout).await?;
    let records = callbacks(sink, &batch.id).await?;
    delivered_once(&second, &records, Some(1))
        .and_then(|ends| match ends.as_slice() {
            [a, b]
                if a.failed == 1
                    && b.failed == 0
                    && b.completed == 3
                    && a.finished_at < b.finished_at
                    && end_key(a) != end_key(b)
                    && Some(a.finished_at.as_str()) == first.finished_at.as_deref() =>
            {
                Ok(())
            }
            other => Err(format!("{} ends: {other:?}", other.len())),
        })
        .map_err(anyhow::Error::msg)
}

/// Creates the multi-channel batch, waits for its end, then checks its item
/// whose second channel hangs twice.
async fn multi_item_with_a_channel_hanging_twice_completes(f: &mut Delivering) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let max_attempts = u32::try_from(f.target.setting("MAX_ATTEMPTS")?)?;
    let healthy = Faults::default();
    let twice = Faults {
        fail_first: 2,
        ..Faults::default()
    };
    let gone = Faults {
        status: Some(400),
        ..Faults::default()
    };
    // Outlasts JOB_TIMEOUT_MS on the first two deliveries, then answers at once.
    let job_timeout_ms = f.target.setting("JOB_TIMEOUT_MS")?;
    let hangs_twice = Faults {
        hang_ms: job_timeout_ms + 2_000,
        hang_first: 2,
        ..Faults::default()
    };
    let plans: Vec<(&str, Vec<(String, Faults)>)> = vec![
        (
            "multi-hang",
            vec![
                ("email".into(), healthy.clone()),
                ("push".into(), hangs_twice),
            ],
        ),
        (
            "multi-retry",
            vec![("email".into(), healthy.clone()), ("push".into(), twice)],
        ),
        (
            "multi-gone",
            vec![("email".into(), healthy.clone()), ("push".into(), gone)],
        ),
    ];
    let items: Vec<Value> = plans
        .iter()
        .map(|(s, ch)| multi_item(sink, s, ch))
        .collect();
    let batch = create(api, "multi", items, None).await?;
    until_ended(api, &batch.id, f.timeout).await?;
    let items = api.all_items(&batch.id, None).await?;
    let all = sink.deliveries().await?;
    f.multi = Some(Multi {
        batch,
        plans,
        max_attempts,
        items,
        all,
    });
    multi_item_checked(f, "multi-hang")
}

async fn multi_item_with_a_channel_failing_twice_completes(f: &mut Delivering) -> Result<()> {
    multi_item_checked(f, "multi-retry")
}

async fn multi_item_with_a_channel_refused_fails_at_once(f: &mut Delivering) -> Result<()> {
    multi_item_checked(f, "multi-gone")
}

/// The multi batch's item of `subject` against its channels' faults.
fn multi_item_checked(f: &Delivering, subject: &str) -> Result<()> {
    let m = f.multi.as_ref().context("no multi batch")?;
    let channels = m
        .plans
        .iter()
        .find_map(|(s, ch)| (*s == subject).then_some(ch))
        .with_context(|| format!("no plan {subject}"))?;
    let item = m
        .items
        .iter()
        .find(|i| i.subject_id == subject)
        .with_context(|| format!("no item {subject}"))?;
    // By Idempotency-Key: `<item id>:<channel>`, one group per channel.
    let by_key = verdict::deliveries_by_item(&m.all, &m.batch.id.0);
    multi_item_ok(item, channels, m.max_attempts, &by_key).map_err(anyhow::Error::msg)
}

async fn failed_multi_item_names_channel_and_answer(f: &mut Delivering) -> Result<()> {
    let m = f.multi.as_ref().context("no multi batch")?;
    match m.items.iter().find(|i| i.subject_id == "multi-gone") {
        // The sink answers every delivery `{"received": <n>}`.
        Some(i)
            if i.last_error.as_deref().is_some_and(|e| {
                e.contains("channel push") && e.contains(r#"HTTP 400: {"received":"#)
            }) && i.receipts.as_ref().is_some_and(|r| {
                r["push"]["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with(r#"HTTP 400: {"received":"#))
            }) =>
        {
            Ok(())
        }
        other => bail!("{other:?}"),
    }
}

/// One id from tick to receiver: every webhook and the completion callback of a
/// batch carry `Fanout-Invocation` naming the invocation `GET /invocations` shows
/// dispatching from it, and the log lines of that invocation and of the child
/// that ran a failed attempt carry the same id.
async fn webhooks_name_their_tick(f: &mut Delivering) -> Result<()> {
    let (api, sink) = (&f.target.api, &f.target.sink);
    let known = api.invocation_ids().await?;
    let once = Faults {
        fail_first: 1,
        ..Faults::default()
    };
    let batch = ended_with_one_faulty(f, "corr", 3, "corr-flaky", &once, "corr").await?;
    until_called_back(api, &batch.id, f.timeout).await?;
    let ours = api.invocations_since(&known).await?;
    let all = sink.deliveries().await?;
    let webhooks: Vec<Delivery> = all
        .into_iter()
        .filter(|d| d.batch_id.as_deref() == Some(batch.id.0.as_str()))
        .collect();
    let named: Vec<(String, Option<String>)> = webhooks
        .iter()
        .map(|d| {
            (
                format!("{} attempt {:?}", d.subject_id, d.attempt),
                d.invocation.clone(),
            )
        })
        .collect();
    let c = f.corr.insert(Correlated {
        batch,
        ours,
        webhooks,
    });
    ensure!(named.len() == 5, "{} deliveries, want 5", named.len());
    named_by_invocations(&named, &c.ours, &c.batch.id.0).map_err(anyhow::Error::msg)
}

async fn callback_names_its_tick(f: &mut Delivering) -> Result<()> {
    let c = f.corr.as_ref().context("no correlation batch")?;
    let called: Vec<(String, Option<String>)> = callbacks(&f.target.sink, &c.batch.id)
        .await?
        .into_iter()
        .map(|c| (format!("callback {}", c.seq), c.invocation))
        .collect();
    named_by_invocations(&called, &c.ours, &c.batch.id.0).map_err(anyhow::Error::msg)
}

async fn summaries_have_their_own_ids(f: &mut Delivering) -> Result<()> {
    let ours = &f.corr.as_ref().context("no correlation batch")?.ours;
    let ids: Vec<&str> = ours
        .iter()
        .filter_map(|i| i.summary.invocation.as_deref())
        .collect();
    ensure!(
        ids.len() == ours.len() && ids.iter().collect::<HashSet<_>>().len() == ids.len(),
        "{} summaries, ids {ids:?}",
        ours.len()
    );
    Ok(())
}

/// The failed first attempt: the child logged its outcome, the tick its summary.
async fn log_lines_carry_the_webhooks_id(f: &mut Delivering) -> Result<()> {
    let c = f.corr.as_ref().context("no correlation batch")?;
    let runtime = f.target.runtime.as_ref().context("no local runtime")?;
    let first = c
        .webhooks
        .iter()
        .find(|d| d.subject_id == "corr-flaky-00000" && d.attempt == Some(1))
        .and_then(|d| d.invocation.clone())
        .context("no first delivery of corr-flaky-00000 naming an invocation")?;
    let path = runtime.config().wrangler_log();
    let id = format!("\"invocation\":\"{first}\"");
    let mut found = (false, false);
    for _ in 0..20 {
        let text = std::fs::read_to_string(&path)?;
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(&id)).collect();
        found = (
            lines.iter().any(|l| {
                l.contains("\"event\":\"item_outcome\"") && l.contains("corr-flaky-00000")
            }),
            lines.iter().any(|l| l.contains("\"event\":\"invocation\"")),
        );
        if found == (true, true) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    match found {
        (true, true) => Ok(()),
        (child, tick) => bail!("{first}: child line {child}, summary line {tick}"),
    }
}

/// The callback in flight when the runtime is SIGKILLed: the receiver got it and
/// the answer was lost with the Worker. After a restart the reaper takes the
/// expired lease and the callback is delivered again, with the same summary.
async fn callback_survives_a_kill(f: &mut Delivering) -> Result<()> {
    let api = f.target.api.clone();
    let sink = f.target.sink.clone();
    // Slower than a tick's poll, faster than JOB_TIMEOUT_MS: the kill lands while
    // the receiver holds the callback.
    let slow = Faults {
        latency_ms: 700,
        ..Faults::default()
    };
    let items = webhook_items(&sink, "cb-crash", 2, &Faults::default());
    let batch = create(
        &api,
        "cb-crash",
        items,
        Some(sink.callback_url("crash", &slow)),
    )
    .await?;
    until_ended(&api, &batch.id, f.timeout).await?;
    let tick = {
        let api = api.clone();
        tokio::spawn(async move { api.fire_cron(TICK_CRON).await })
    };
    let deadline = Instant::now() + f.timeout;
    while callbacks(&sink, &batch.id).await?.is_empty() {
        ensure!(Instant::now() < deadline, "no callback arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let runtime = f.target.runtime.as_mut().context("no local runtime")?;
    runtime.kill_hard();
    let _ = tick.await;
    runtime
        .restart()
        .await
        .context("restarting after the kill")?;
    let at_restart = api.batch(&batch.id).await?;
    let done = until_called_back(&api, &batch.id, f.timeout).await?;
    let records = callbacks(&sink, &batch.id).await?;
    killed_then_delivered(&at_restart, &done, &records).map_err(anyhow::Error::msg)
}
