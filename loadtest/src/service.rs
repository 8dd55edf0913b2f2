//! The `service` kind end to end: cron-fanout and the example TypeScript handler
//! (`examples/service-handler`) in one multi-worker `wrangler dev`, cron-fanout
//! bound to it as `HANDLER`. Bad payloads are refused with nothing written; one
//! small batch asks the handler (through each item's `data`) for every answer:
//! done, a retry then done, a permanent failure with its text, a timeout, and a
//! `Retry-After` that sets the next attempt's time.

use crate::api::{Api, Batch, Item, TICK_CRON};
use crate::checks::Checks;
use crate::drive::until_ended;
use crate::scenario::min_lease_seconds;
use crate::target::{Secrets, Target, TargetArgs};
use anyhow::{ensure, Context, Result};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The binding cron-fanout has; `GONE` is listed in SERVICE_BINDINGS but not bound.
const BINDING: &str = "HANDLER";

/// Short timeouts; a backoff (5 s and more on attempt 1) far from the 2 s the
/// handler's `Retry-After` asks for, so the two cannot be mistaken.
const SETTINGS: &[(&str, &str)] = &[
    ("MAX_ATTEMPTS", "3"),
    ("JOB_TIMEOUT_MS", "2000"),
    ("RETRY_BASE_MS", "10000"),
    ("RETRY_MAX_MS", "20000"),
    ("CLAIM_CHUNK", "10"),
    ("DISPATCH_CONCURRENCY", "10"),
    ("SUBREQUEST_BUDGET", "200"),
    ("INVOCATION_DEADLINE_MS", "15000"),
    ("SERVICE_BINDINGS", "HANDLER,GONE"),
];

/// The repo's `wrangler.toml` with the `HANDLER` binding to the example added,
/// written under `.loadtest/` (its paths made absolute): a deployment's config
/// must not name a Worker that may not exist.
fn worker_config(repo: &Path) -> Result<PathBuf> {
    let own =
        std::fs::read_to_string(repo.join("wrangler.toml")).context("reading wrangler.toml")?;
    let mut config = own.clone();
    for (key, path) in [("main", "build/index.js"), ("migrations_dir", "migrations")] {
        let relative = format!("{key} = \"{path}\"");
        ensure!(
            config.contains(&relative),
            "wrangler.toml has no line {relative}"
        );
        let absolute = format!("{key} = \"{}\"", repo.join(path).display());
        config = config.replace(&relative, &absolute);
    }
    config.push_str(&format!(
        "\n# Added by the service e2e part: the example handler, run beside it.\n[[services]]\nbinding = \"{BINDING}\"\nservice = \"service-handler\"\n"
    ));
    let dir = repo.join(".loadtest");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("e2e-service-wrangler.toml");
    std::fs::write(&path, config)?;
    Ok(path)
}

pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let repo = args.repo.canonicalize()?;
    let lease = min_lease_seconds(2_000, 10, 10) + 1;
    let lease = lease.to_string();
    let mut settings: Vec<(&str, &str)> = SETTINGS.to_vec();
    settings.push(("LEASE_SECONDS", &lease));
    let configs = vec![
        worker_config(&repo)?,
        repo.join("examples/service-handler/wrangler.toml"),
    ];
    let mut target = Target::open_with_configs(
        args,
        "e2e-service",
        &settings,
        Secrets::Random,
        true,
        configs,
    )
    .await
    .context("starting cron-fanout and the service handler")?;
    let api = &target.api;
    refused_with_nothing_written(api, checks).await?;
    every_answer(api, timeout, checks).await?;
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(())
}

async fn refused_with_nothing_written(api: &Api, checks: &mut Checks) -> Result<()> {
    for (what, payload) in [
        (
            "a binding SERVICE_BINDINGS does not list",
            json!({"service": "OTHER"}),
        ),
        ("a binding listed but not bound", json!({"service": "GONE"})),
        (
            "a bad path",
            json!({"service": BINDING, "path": "no-slash"}),
        ),
    ] {
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
        checks.record(
            &format!("service: {what} is refused with 400 invalid_payload, nothing written"),
            match (put.status, post.status, subjects, batches) {
                (StatusCode::BAD_REQUEST, StatusCode::BAD_REQUEST, 0, 0)
                    if put.body.contains("invalid_payload")
                        && post.body.contains("invalid_payload") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}: {} / {}", put.body, post.body)),
            },
        );
    }
    Ok(())
}

/// The subjects of the batch and what each asks the handler for.
fn items() -> Value {
    let item = |id: &str, data: Value| json!({"subject_id": id, "kind": "service", "payload": {"service": BINDING, "path": format!("/{id}"), "data": data}});
    json!({"items": [
        item("done", json!({})),
        item("retry-then-done", json!({"answer": 503, "times": 1, "text": "warming up"})),
        item("permanent", json!({"answer": 422, "text": "unknown login"})),
        item("timeout", json!({"sleep_ms": 4000, "times": 1})),
        item("retry-after", json!({"answer": 429, "times": 1, "retry_after": 2})),
    ]})
}

fn find<'a>(items: &'a [Item], subject: &str) -> Result<&'a Item, String> {
    items
        .iter()
        .find(|i| i.subject_id == subject)
        .ok_or_else(|| format!("no item {subject}"))
}

fn ms(rfc3339: Option<&str>) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(rfc3339?)
        .ok()
        .map(|t| t.timestamp_millis())
}

fn expect(item: &Item, status: &str, attempt: u32, error: Option<&str>) -> Result<(), String> {
    let got = (
        item.status.as_str(),
        item.attempt,
        item.last_error.as_deref(),
    );
    if got == (status, attempt, error) {
        Ok(())
    } else {
        Err(format!("{}: {got:?}", item.subject_id))
    }
}

async fn every_answer(api: &Api, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let (_, batch): (bool, Batch) = api.create_batch(&items()).await?;
    api.fire_cron(TICK_CRON).await?;
    let first = api.all_items(&batch.id, None).await?;
    checks.record(
        "service, first tick: 2xx done; 503 retried; 422 failed for good with the handler's text; a late answer timed out",
        (|| {
            expect(find(&first, "done")?, "completed", 1, None)?;
            expect(
                find(&first, "retry-then-done")?,
                "pending",
                1,
                Some("attempt 1 failed: HTTP 503"),
            )?;
            expect(
                find(&first, "permanent")?,
                "failed",
                1,
                Some("permanent failure: HTTP 422: unknown login"),
            )?;
            expect(
                find(&first, "timeout")?,
                "pending",
                1,
                Some("attempt 1 failed: timed out after 2000 ms"),
            )
        })(),
    );
    checks.record(
        "service: Retry-After: 2 on a 429 sets the next attempt 2 s after it (not the 5 s+ backoff)",
        (|| {
            let item = find(&first, "retry-after")?;
            expect(item, "pending", 1, Some("attempt 1 failed: HTTP 429"))?;
            let (Some(started), Some(due)) = (ms(item.started_at.as_deref()), ms(item.run_after.as_deref())) else {
                return Err(format!("times missing: {item:?}"));
            };
            let delay = due - started;
            if (2_000..4_000).contains(&delay) {
                Ok(())
            } else {
                Err(format!("run_after - started_at = {delay} ms"))
            }
        })(),
    );
    if let Some(tick) = api.invocations(1).await?.first() {
        let s = &tick.summary;
        println!(
            "# service, first tick: {} items claimed, {} subrequests of the budget, {} D1 statements",
            s.tally.claimed, s.subrequests, s.d1_statements
        );
    }
    let ended = until_ended(api, &batch.id, timeout).await?;
    let last = api.all_items(&batch.id, None).await?;
    checks.record(
        "service: the retried items are done on attempt 2, the batch ends 4 completed, 1 failed",
        (|| {
            for subject in ["retry-then-done", "timeout", "retry-after"] {
                let item = find(&last, subject)?;
                if (item.status.as_str(), item.attempt) != ("completed", 2) {
                    return Err(format!(
                        "{subject}: {} attempt {}",
                        item.status, item.attempt
                    ));
                }
            }
            match (ended.completed, ended.failed) {
                (4, 1) => Ok(()),
                other => Err(format!("batch {other:?}")),
            }
        })(),
    );
    Ok(())
}
