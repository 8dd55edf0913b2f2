//! The e2e part of `examples/hello-kind`, a Worker crate of its own on the
//! library that registers the job kind `hello` beside the built-in ones: one
//! `wrangler dev` of its wrangler config, a handful of items. Its kind's payload
//! is validated on `PUT /subjects`; its items run in fresh invocations with the
//! Worker's Env (the greeting is its `[vars]`' `HELLO_GREETING`), retry then
//! complete, or fail with the kind's reason; the default routes still answer.

use crate::api::{Batch, Item, SubjectIn, TICK_CRON};
use crate::check;
use crate::checks::Checks;
use crate::suite;
use crate::target::{Target, TargetArgs};
use anyhow::{bail, ensure, Context, Result};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The example's wrangler config, relative to the repo.
pub const WRANGLER_CONFIG: &str = "examples/hello-kind/wrangler.toml";
/// Its build, made by `bash scripts/build.sh [--dev] examples/hello-kind build`.
const BUILD: &str = "examples/hello-kind/build/index.js";
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
    ensure!(
        args.repo.join(BUILD).exists(),
        "{BUILD} is missing: run `bash scripts/build.sh --dev examples/hello-kind build` first"
    );
    let config = args.repo.canonicalize()?.join(WRANGLER_CONFIG);
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
}

fn shape(i: &Item) -> String {
    format!("{} attempt {} {:?}", i.status, i.attempt, i.last_error)
}

/// A payload its kind refuses: 400 invalid_payload, nothing written.
async fn own_kinds_bad_payload_is_refused(f: &mut HelloKind) -> Result<()> {
    let api = &f.target.api;
    let bad = json!({"subjects": [
        {"id": "h-ok", "kind": "hello", "payload": {"name": "ok"}},
        {"id": "h-bad", "kind": "hello", "payload": {"name": "", "retries": 9}},
    ]});
    let resp = api
        .admin_raw(Method::PUT, "/subjects", Some(bad.to_string()))
        .await?;
    let written = api.all_subjects().await?.len();
    match resp.error_shape() {
        Some((code, message))
            if resp.status == StatusCode::BAD_REQUEST
                && code == "invalid_payload"
                && message.contains("name must be")
                && written == 0 =>
        {
            Ok(())
        }
        other => bail!("{} {other:?}, {written} subjects written", resp.status),
    }
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
        subject(
            "h-webhook",
            "webhook",
            json!({"url": format!("{sink}/hook/h-webhook")}),
        ),
    ];
    api.put_subjects(&subjects).await?;
    let (_, batch) = api
        .create_batch(&json!({"key": "hello-1", "source": "subjects"}))
        .await?;
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
    f.ran = Some((batch, items));
    let done = f.item("h-done")?;
    ensure!(
        done.status == "completed" && done.attempt == 1,
        "{}",
        shape(done)
    );
    Ok(())
}

async fn own_kinds_retry_completes_on_attempt_2(f: &mut HelloKind) -> Result<()> {
    let retried = f.item("h-retry")?;
    ensure!(
        retried.status == "completed" && retried.attempt == 2,
        "{}",
        shape(retried)
    );
    Ok(())
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
            && batch.completed == 3
            && batch.failed == 1,
        "webhook {}, /health {}, / {}, batch {}",
        shape(hook),
        health.status,
        page.status,
        batch.progress()
    );
    Ok(())
}
