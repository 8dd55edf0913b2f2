//! The e2e suite's checks of signing, both ways: the dispatch signatures the
//! Worker checks on `/internal/run` (age bounded by the lease, the previous
//! secret during a rotation, rejections logged within a limit) and a subject's
//! own signing secret on its webhooks (stored, redacted, signing the delivery).

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::target::Target;
use crate::e2e::edges::{drain_items, expect_status};
use crate::runtime::api::{clip, Api, RawResponse};
use crate::sink::faults::Faults;
use crate::sink::signature;
use anyhow::{bail, ensure, Context, Result};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;

/// A no-op item as the dispatcher sends it.
fn noop_item() -> String {
    // What a dispatch signs (core::dispatch::Dispatched): the item and the id of
    // the invocation dispatching it.
    json!({"invocation": "e2e-dispatch",
           "item": {"item_id": 1, "lease_token": "e2e-token", "batch_id": "e2e-dispatch",
                    "subject_id": "e2e-dispatch", "attempt": 1, "max_attempts": 1,
                    "kind": "noop", "payload": "{}"}})
    .to_string()
}

/// A dispatch as the Worker sends it: the signature on the body's first line, the
/// item's JSON after it, nothing in the headers (trace events record headers).
async fn dispatch(api: &Api, item: &str, signature: &str) -> Result<RawResponse> {
    api.raw(
        Method::POST,
        "/internal/run",
        None,
        Some(format!("{signature}\n{item}")),
    )
    .await
}
/// Lines of the runtime's log naming `event`.
fn log_lines(target: &Target, event: &str) -> Result<usize> {
    let runtime = target.runtime.as_ref().context("no local runtime")?;
    let path = runtime.config().wrangler_log();
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let needle = format!("\"event\":\"{event}\"");
    Ok(text.lines().filter(|l| l.contains(&needle)).count())
}
/// The dispatch-signature checks' fixture: a no-op item, the instant it is
/// signed at, and the secrets it is signed with.
struct Signatures<'a> {
    target: &'a Target,
    item: String,
    now: i64,
    lease: i64,
    current: Vec<u8>,
    previous: Vec<u8>,
    webhook: Vec<u8>,
}

/// How many unsigned dispatches the burst sends.
const BURST: usize = 40;

/// Dispatches signed as the Worker signs them: accepted with the current and the
/// previous secret, refused once older than the lease; rejected ones logged within
/// the limit.
pub async fn dispatch_signatures(target: &Target, checks: &mut Checks) -> Result<()> {
    let secret = |name: &str| {
        target
            .secrets
            .get(name)
            .or_else(|| target.settings.get(name))
            .map(|s| s.as_bytes().to_vec())
            .with_context(|| format!("{name} unknown"))
    };
    let mut f = Signatures {
        target,
        item: noop_item(),
        now: chrono::Utc::now().timestamp(),
        lease: target.setting("LEASE_SECONDS")? as i64,
        current: secret("DISPATCH_SECRET")?,
        previous: secret("DISPATCH_SECRET_PREVIOUS")?,
        webhook: secret("WEBHOOK_SECRET")?,
    };
    let lease = f.lease;
    let limit = cron_fanout::core::log_limit::REJECTED_DISPATCH_LINES;
    let list = vec![
        check!(
            "a dispatch signed with DISPATCH_SECRET runs (204, Fanout-Outcome: done)",
            current_secret_runs
        ),
        check!(
            "a dispatch signed with DISPATCH_SECRET_PREVIOUS runs too (rotation window)",
            previous_secret_runs
        ),
        check!(
            format!("a dispatch signed {} s ago, more than LEASE_SECONDS ({lease}) but less than 300 s: 401", lease + 5),
            signature_older_than_the_lease_refused
        ),
        check!(
            "a dispatch signed with WEBHOOK_SECRET: 401",
            webhook_secret_refused
        ),
        check!(
            "a dispatch whose v1 is 63 hex digits: 401",
            short_signature_refused
        ),
        check!(
            "a dispatch signed with DISPATCH_SECRET but carried in the Fanout-Item and Fanout-Dispatch-Signature headers: 401",
            dispatch_in_headers_refused
        ),
        check!(
            format!("{BURST} unsigned dispatches in a burst write at most {limit} dispatch_rejected log lines"),
            rejections_logged_within_the_limit
        ),
    ];
    checks.run(&mut f, list).await;
    Ok(())
}

/// The item signed with `secret` at `at`, dispatched.
async fn signed(f: &Signatures<'_>, secret: &[u8], at: i64) -> Result<RawResponse> {
    let signature = signature::sign(secret, at, f.item.as_bytes());
    dispatch(&f.target.api, &f.item, &signature).await
}

/// A dispatch that ran: 204, Fanout-Outcome: done.
fn done(r: &RawResponse) -> Result<()> {
    expect_status(r, StatusCode::NO_CONTENT)?;
    match r.header("Fanout-Outcome") {
        Some("done") => Ok(()),
        other => bail!("Fanout-Outcome {other:?}"),
    }
}

async fn current_secret_runs(f: &mut Signatures<'_>) -> Result<()> {
    done(&signed(f, &f.current, f.now).await?)
}

async fn previous_secret_runs(f: &mut Signatures<'_>) -> Result<()> {
    done(&signed(f, &f.previous, f.now).await?)
}

async fn signature_older_than_the_lease_refused(f: &mut Signatures<'_>) -> Result<()> {
    let old = f.now - f.lease - 5;
    expect_status(&signed(f, &f.current, old).await?, StatusCode::UNAUTHORIZED)
}

async fn webhook_secret_refused(f: &mut Signatures<'_>) -> Result<()> {
    expect_status(
        &signed(f, &f.webhook, f.now).await?,
        StatusCode::UNAUTHORIZED,
    )
}

async fn short_signature_refused(f: &mut Signatures<'_>) -> Result<()> {
    let good = signature::sign(&f.current, f.now, f.item.as_bytes());
    let r = dispatch(&f.target.api, &f.item, &good[..good.len() - 1]).await?;
    expect_status(&r, StatusCode::UNAUTHORIZED)
}

/// The item (lease token, payload, signing secret) and the signature in request
/// headers, which trace events record: no longer a way in, even signed right.
async fn dispatch_in_headers_refused(f: &mut Signatures<'_>) -> Result<()> {
    let good = signature::sign(&f.current, f.now, f.item.as_bytes());
    let r = f
        .target
        .api
        .raw_with_headers(
            Method::POST,
            "/internal/run",
            &[
                ("Fanout-Item", &f.item),
                ("Fanout-Dispatch-Signature", &good),
            ],
        )
        .await?;
    expect_status(&r, StatusCode::UNAUTHORIZED)
}

/// Anyone can send unsigned dispatches: a burst must not write a line each.
async fn rejections_logged_within_the_limit(f: &mut Signatures<'_>) -> Result<()> {
    let target = f.target;
    let before = log_lines(target, "dispatch_rejected")?;
    for _ in 0..BURST {
        let r = target
            .api
            .raw(Method::POST, "/internal/run", None, Some("{}".into()))
            .await?;
        ensure!(
            r.status == StatusCode::UNAUTHORIZED,
            "unsigned dispatch: {}",
            r.status
        );
    }
    // Lines reach the log file through wrangler's output: wait until it settles.
    let mut written = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = log_lines(target, "dispatch_rejected")? - before;
        if now == written && now > 0 {
            break;
        }
        written = now;
    }
    let limit = cron_fanout::core::log_limit::REJECTED_DISPATCH_LINES as usize;
    ensure!((1..=limit).contains(&written), "{written} lines");
    Ok(())
}
/// The subject with a signing secret of its own.
const OWN_SECRET: &str = "own-secret";

/// The signing-secret checks' fixture: the subject's secret and payload.
struct OwnSecret<'a> {
    target: &'a Target,
    timeout: Duration,
    secret: String,
    payload: Value,
}

/// A subject's own signing secret signs its deliveries, and is never listed.
pub async fn signing_secrets(
    target: &Target,
    timeout: Duration,
    checks: &mut Checks,
) -> Result<()> {
    let secret = crate::runtime::devvars::random_secret();
    let payload = json!({"url": target.sink.hook_url(OWN_SECRET, &Faults::default()),
                         "data": {"own": true}, "signing_secret": secret});
    let mut f = OwnSecret {
        target,
        timeout,
        secret,
        payload,
    };
    let list = vec![
        check!(
            "PUT /subjects takes a signing_secret; GET /subjects lists it as \"[redacted]\"",
            signing_secret_stored_and_redacted
        ),
        check!(
            "a subject with its own signing_secret: its delivery verifies under that secret (not WEBHOOK_SECRET) and completes",
            own_secret_signs_the_delivery
        ),
    ];
    checks.run(&mut f, list).await;
    // Later parts batch every subject; this one is not in their plans.
    let deleted = target
        .api
        .admin_raw(Method::DELETE, &format!("/subjects/{OWN_SECRET}"), None)
        .await?;
    ensure!(
        deleted.status == StatusCode::OK,
        "DELETE /subjects/{OWN_SECRET}: {}",
        deleted.status
    );
    Ok(())
}

async fn signing_secret_stored_and_redacted(f: &mut OwnSecret<'_>) -> Result<()> {
    let api = &f.target.api;
    let subject =
        json!({"subjects": [{"id": OWN_SECRET, "kind": "webhook", "payload": f.payload}]});
    let put = api
        .admin_raw(Method::PUT, "/subjects", Some(subject.to_string()))
        .await?;
    let listed = api
        .admin_raw(Method::GET, "/subjects?limit=1000", None)
        .await?;
    expect_status(&put, StatusCode::OK)?;
    ensure!(
        !listed.body.contains(&f.secret),
        "GET /subjects shows the secret"
    );
    ensure!(
        listed.body.contains("[redacted]"),
        "no redaction in {}",
        clip(&listed.body)
    );
    Ok(())
}

async fn own_secret_signs_the_delivery(f: &mut OwnSecret<'_>) -> Result<()> {
    f.target
        .sink
        .set_subject_secrets(&HashMap::from([(OWN_SECRET.to_string(), f.secret.clone())]))
        .await?;
    let items = drain_items(
        &f.target.api,
        "e2e-own-secret",
        vec![json!({"subject_id": OWN_SECRET, "kind": "webhook", "payload": f.payload})],
        f.timeout,
    )
    .await?;
    let signatures: Vec<String> = f
        .target
        .sink
        .deliveries()
        .await?
        .into_iter()
        .filter(|d| d.subject_id == OWN_SECRET)
        .map(|d| d.signature)
        .collect();
    match (
        items.get(OWN_SECRET).map(|i| i.status.as_str()),
        signatures.as_slice(),
    ) {
        (Some("completed"), [one]) if one == "valid" => Ok(()),
        (status, sigs) => bail!("item {status:?}, delivery signatures {sigs:?}"),
    }
}
