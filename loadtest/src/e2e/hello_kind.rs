//! The e2e part of `examples/hello-kind`, a Worker crate of its own on the
//! library that registers the job kind `hello` beside the built-in ones: one
//! `wrangler dev` of its wrangler config, a handful of items. Its kind's payload
//! is validated on `PUT /subjects`; its items run in fresh invocations with the
//! Worker's Env (the greeting is its `[vars]`' `HELLO_GREETING`, read with
//! `ctx.var`), retry then complete, or fail with the kind's reason; a `once`
//! item is remembered in the Worker's KV (`ctx.kv`) across batches; the default
//! routes still answer.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::target::{Target, TargetArgs};
use crate::runtime::api::{Batch, Item, SubjectIn, TICK_CRON};
use crate::{driver::steps, e2e::suite};
use anyhow::{ensure, Context, Result};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The example's crate, relative to the repo.
const EXAMPLE: &str = "examples/hello-kind";
/// `HELLO_GREETING` in its wrangler config.
const GREETING: &str = "Hello from hello-kind";

fn subject(id: &str, kind: &str, payload: Value) -> SubjectIn {
    SubjectIn {
        id: id.into(),
        kind: kind.into(),
        payload,
        active: true,
        group: None,
        timezone: None,
    }
}

pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let config = suite::example_config(args, EXAMPLE)?;
    let target = suite::open_worker(args, "e2e-hello-kind", [], vec![config])
        .await
        .context("starting the hello-kind Worker")?;
    let mut f = HelloKind {
        target,
        timeout,
        ran: None,
    };
    checks
        .run(
            &mut f,
            vec![
                check!("hello-kind: a payload its own kind refuses is 400 invalid_payload, and nothing is written", own_kinds_bad_payload_is_refused),
                check!(needed "hello-kind: an item of its own kind runs in a fresh invocation with the Worker's Env and completes", own_kinds_item_completes),
                check!("hello-kind: its kind's retry comes back (its own backoff) and completes on attempt 2", own_kinds_retry_completes_on_attempt_2),
                check!("hello-kind: a permanent failure keeps the kind's reason, read from the Env's HELLO_GREETING", permanent_failure_keeps_the_kinds_reason),
                check!("hello-kind: the built-in kinds and the default routes still answer (webhook delivered, /health, the dashboard)", built_in_kinds_and_default_routes_still_answer),
                check!("hello-kind: its kind reads and writes the Worker's KV (ctx.kv): a later batch's item for a subject greeted once fails, naming the batch that greeted it", kv_remembers_a_once_greeting_across_batches),
            ],
        )
        .await;
    Ok(())
}

/// The part's Worker, and its batch once finished with its items.
struct HelloKind {
    target: Target,
    timeout: Duration,
    ran: Option<(Batch, Vec<Item>)>,
}

impl HelloKind {
    /// The finished batch's item of subject `id`.
    fn item(&self, id: &str) -> Result<&Item> {
        let (_, items) = self.ran.as_ref().context("the batch did not finish")?;
        items
            .iter()
            .find(|i| i.subject_id == id)
            .with_context(|| format!("no item {id}"))
    }

    /// The item of subject `id` completed on attempt `attempt`.
    fn completed_on(&self, id: &str, attempt: u32) -> Result<()> {
        let item = self.item(id)?;
        ensure!(
            item.status == "completed" && item.attempt == attempt,
            "{}",
            shape(item)
        );
        Ok(())
    }
}

fn shape(i: &Item) -> String {
    format!("{} attempt {} {:?}", i.status, i.attempt, i.last_error)
}

/// A payload its kind refuses: 400 invalid_payload, nothing written.
async fn own_kinds_bad_payload_is_refused(f: &mut HelloKind) -> Result<()> {
    let bad = json!({"subjects": [
        {"id": "h-ok", "kind": "hello", "payload": {"name": "ok"}},
        {"id": "h-bad", "kind": "hello", "payload": {"name": "", "retries": 9}},
    ]});
    steps::subjects_refused_whole(&f.target.api, &bad, "name must be").await
}

/// Its own kind beside a built-in one, through the default routes: one batch,
/// ticked until it finishes.
async fn own_kinds_item_completes(f: &mut HelloKind) -> Result<()> {
    let api = &f.target.api;
    let sink = f.target.sink.base().to_string();
    let subjects = [
        subject("h-done", "hello", json!({"name": "ada"})),
        subject("h-retry", "hello", json!({"name": "bob", "retries": 1})),
        subject("h-fail", "hello", json!({"name": "eve", "fail": true})),
        subject("h-once", "hello", json!({"name": "cy", "once": true})),
        subject(
            "h-webhook",
            "webhook",
            json!({"url": format!("{sink}/hook/h-webhook")}),
        ),
    ];
    api.put_subjects(&subjects).await?;
    let ran = run_batch(f, &json!({"key": "hello-1", "source": "subjects"})).await?;
    f.ran = Some(ran);
    f.completed_on("h-done", 1)
}

/// Create the batch `body` and tick until it finishes: it and its items.
async fn run_batch(f: &HelloKind, body: &Value) -> Result<(Batch, Vec<Item>)> {
    let api = &f.target.api;
    let (_, batch) = api.create_batch(body).await?;
    let deadline = Instant::now() + f.timeout;
    let batch = loop {
        api.fire_cron(TICK_CRON).await?;
        let b = api.batch(&batch.id).await?;
        if b.is_finished() {
            break b;
        }
        ensure!(
            Instant::now() < deadline,
            "batch not finished: {}",
            b.progress()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let items = api.all_items(&batch.id, None).await?;
    Ok((batch, items))
}

async fn own_kinds_retry_completes_on_attempt_2(f: &mut HelloKind) -> Result<()> {
    f.completed_on("h-retry", 2)
}

async fn permanent_failure_keeps_the_kinds_reason(f: &mut HelloKind) -> Result<()> {
    let failed = f.item("h-fail")?;
    let want = format!("permanent failure: {GREETING}, eve: told to fail");
    ensure!(
        failed.status == "failed"
            && failed.attempt == 1
            && failed.last_error.as_deref() == Some(want.as_str()),
        "{}",
        shape(failed)
    );
    Ok(())
}

async fn built_in_kinds_and_default_routes_still_answer(f: &mut HelloKind) -> Result<()> {
    let hook = f.item("h-webhook")?;
    let (batch, _) = f.ran.as_ref().context("the batch did not finish")?;
    let api = &f.target.api;
    let health = api.raw(Method::GET, "/health", None, None).await?;
    let page = api.raw(Method::GET, "/", None, None).await?;
    ensure!(
        hook.status == "completed"
            && health.status == StatusCode::OK
            && page.status == StatusCode::OK
            && batch.completed == 4
            && batch.failed == 1,
        "webhook {}, /health {}, / {}, batch {}",
        shape(hook),
        health.status,
        page.status,
        batch.progress()
    );
    Ok(())
}

/// `h-once` completed in the first batch (its KV entry written); an item for
/// it in a second batch reads that entry and fails naming the first batch.
async fn kv_remembers_a_once_greeting_across_batches(f: &mut HelloKind) -> Result<()> {
    f.completed_on("h-once", 1)?;
    let (first, _) = f.ran.as_ref().context("the batch did not finish")?;
    let first = first.id.clone();
    let body = json!({"key": "hello-2", "items": [
        {"subject_id": "h-once", "kind": "hello", "payload": {"name": "cy", "once": true}},
    ]});
    let (_, items) = run_batch(f, &body).await?;
    let again = items.first().context("the second batch has no item")?;
    let want = format!("permanent failure: {GREETING}, cy: greeted before (batch {first})");
    ensure!(
        again.status == "failed" && again.last_error.as_deref() == Some(want.as_str()),
        "{}",
        shape(again)
    );
    Ok(())
}
