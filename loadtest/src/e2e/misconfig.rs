//! The e2e suite's checks of a Worker restarted with settings it must refuse or
//! hide: private targets forbidden (refused when written, not sent when queued),
//! equal secrets, drainers without a queue, a short admin token; each named to
//! the admin and to nobody else.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive;
use crate::driver::steps::items_by_subject;
use crate::driver::target::Target;
use crate::e2e::edges::{expect_status, restart_with};
use crate::runtime::api::{clip, Api, Batch, RawResponse};
use crate::sink::faults::Faults;
use anyhow::{bail, ensure, Context, Result};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

/// Webhook targets that must be refused once ALLOW_PRIVATE_TARGETS is off.
fn forbidden_urls(sink: &str) -> Vec<String> {
    let port = sink.rsplit(':').next().unwrap_or("80");
    vec![
        format!("{sink}/hook/x"),
        format!("http://localhost:{port}/hook/x"),
        format!("http://[::1]:{port}/hook/x"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook/x"),
        format!("http://2130706433:{port}/hook/x"),
        format!("http://127.1:{port}/hook/x"),
        "http://169.254.169.254/latest/meta-data/".into(),
        "http://10.0.0.1/hook".into(),
        "http://printer.local/hook".into(),
        "http://metadata.google.internal/".into(),
    ]
}
/// The restarted Worker's checks' fixture: the runtime they restart, the batch
/// queued while private targets were allowed, and the secrets they swap.
struct Restarted<'a> {
    target: &'a mut Target,
    api: Api,
    timeout: Duration,
    queued: Batch,
    delivered_before: u64,
    webhook: String,
    dispatch: String,
}

/// Private targets are refused by default, when written and again at run time; then
/// misconfigurations tell only the admin what is wrong. Restarts the Worker.
pub async fn restarted(target: &mut Target, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let api = target.api.clone();
    // Queued while private targets are allowed; the checks then set it back to
    // its default.
    let items: Vec<Value> = (0..3)
        .map(|n| {
            let id = format!("ssrf-{n}");
            json!({"subject_id": id, "kind": "webhook",
                   "payload": {"url": target.sink.hook_url(&id, &Faults::default())}})
        })
        .collect();
    let (_, queued) = api
        .create_batch(&json!({"key": "e2e-ssrf-queued", "items": items}))
        .await?;
    let secret = |name: &str| {
        target
            .secrets
            .get(name)
            .cloned()
            .with_context(|| format!("no {name}"))
    };
    let mut f = Restarted {
        delivered_before: target.sink.stats(false).await?.total,
        webhook: secret("WEBHOOK_SECRET")?,
        dispatch: secret("DISPATCH_SECRET")?,
        target,
        api,
        timeout,
        queued,
    };
    let list = vec![
        check!(
            "Worker restarts with ALLOW_PRIVATE_TARGETS unset (default false)",
            restarts_without_private_targets
        ),
        check!(
            "by default PUT /subjects refuses loopback, private, link-local and local-name targets (400 invalid_payload), in IPv4, IPv6, mapped and decimal forms",
            private_targets_refused_when_written
        ),
        check!(
            "items queued while private targets were allowed fail on attempt 1 once they are not (\"not sent\"), and nothing is delivered",
            queued_private_targets_not_sent
        ),
        // Invalid secrets: the Worker refuses to run, and tells only the admin why.
        check!(
            "Worker restarts with DISPATCH_SECRET = WEBHOOK_SECRET",
            restarts_with_equal_secrets
        ),
        check!(
            "DISPATCH_SECRET equal to WEBHOOK_SECRET is refused: the admin gets 500 misconfigured naming it",
            equal_secrets_named_to_the_admin
        ),
        check!(
            "misconfigured: GET /health still answers, no admin token gets 401, POST /internal/run a generic 500; neither names the setting",
            misconfiguration_hidden_from_others
        ),
        check!(
            "Worker restarts with DRAINERS=2 and no DRAIN_QUEUE binding",
            restarts_with_drainers_and_no_queue
        ),
        check!(
            "DRAINERS=2 without a DRAIN_QUEUE binding: the admin gets 500 misconfigured naming DRAINERS and DRAIN_QUEUE",
            drainers_without_a_queue_named_to_the_admin
        ),
        check!(
            "Worker restarts with DRAINERS=auto and no DRAIN_QUEUE binding",
            restarts_with_auto_drainers_and_no_queue
        ),
        check!(
            "DRAINERS=auto without a DRAIN_QUEUE binding: the admin gets 500 misconfigured naming DRAINERS and DRAIN_QUEUE",
            auto_drainers_without_a_queue_named_to_the_admin
        ),
        check!(
            "Worker restarts with a 5-character ADMIN_TOKEN",
            restarts_with_a_short_admin_token
        ),
        check!(
            "an unusable ADMIN_TOKEN: even its holder gets a generic 500 internal, not the setting's name",
            unusable_admin_token_named_to_nobody
        ),
    ];
    checks.run(&mut f, list).await;
    Ok(())
}

async fn restarts_without_private_targets(f: &mut Restarted<'_>) -> Result<()> {
    restart_with(f.target, &[("ALLOW_PRIVATE_TARGETS", None)]).await
}

async fn private_targets_refused_when_written(f: &mut Restarted<'_>) -> Result<()> {
    let mut accepted = Vec::new();
    for url in forbidden_urls(f.target.sink.base()) {
        let body =
            json!({"subjects": [{"id": "ssrf", "kind": "webhook", "payload": {"url": url}}]});
        let r = f
            .api
            .admin_raw(Method::PUT, "/subjects", Some(body.to_string()))
            .await?;
        if let Err(why) = r.refused(StatusCode::BAD_REQUEST, "invalid_payload") {
            accepted.push(format!("{url}: {why}"));
        }
    }
    ensure!(accepted.is_empty(), "{}", accepted.join("; "));
    Ok(())
}

async fn queued_private_targets_not_sent(f: &mut Restarted<'_>) -> Result<()> {
    let drained = drive::in_pairs(&f.api, &f.queued.id, f.timeout, "ssrf").await;
    let items = items_by_subject(&f.api, &f.queued.id).await?;
    let delivered = f.target.sink.stats(false).await?.total - f.delivered_before;
    drained?;
    let wrong: Vec<String> = items
        .values()
        .filter(|i| {
            let reason = i.last_error.as_deref().unwrap_or("");
            !(i.status == "failed"
                && i.attempt == 1
                && reason.contains("not sent")
                && reason.contains("ALLOW_PRIVATE_TARGETS"))
        })
        .map(|i| format!("{} {} {:?}", i.subject_id, i.status, i.last_error))
        .collect();
    ensure!(
        wrong.is_empty() && delivered == 0 && items.len() == 3,
        "{wrong:?}, {delivered} deliveries"
    );
    Ok(())
}

async fn restarts_with_equal_secrets(f: &mut Restarted<'_>) -> Result<()> {
    restart_with(f.target, &[("DISPATCH_SECRET", Some(&f.webhook))]).await
}

/// `r` carries error code `code`, and names DISPATCH_SECRET or not.
fn says(r: &RawResponse, code: &str, names: bool) -> Result<()> {
    let got = r.error_shape().map(|(c, _)| c);
    ensure!(
        got.as_deref() == Some(code),
        "{} {}, want code {code}",
        r.status,
        clip(&r.body)
    );
    ensure!(
        r.body.contains("DISPATCH_SECRET") == names,
        "names the setting: {names}? {}",
        clip(&r.body)
    );
    Ok(())
}

async fn equal_secrets_named_to_the_admin(f: &mut Restarted<'_>) -> Result<()> {
    let admin = f.api.admin_raw(Method::GET, "/subjects", None).await?;
    expect_status(&admin, StatusCode::INTERNAL_SERVER_ERROR)?;
    says(&admin, "misconfigured", true)
}

async fn misconfiguration_hidden_from_others(f: &mut Restarted<'_>) -> Result<()> {
    f.api.health().await?;
    let anonymous = f.api.raw(Method::GET, "/subjects", None, None).await?;
    expect_status(&anonymous, StatusCode::UNAUTHORIZED)?;
    says(&anonymous, "unauthorized", false)?;
    let child = f
        .api
        .raw(Method::POST, "/internal/run", None, Some("{}".into()))
        .await?;
    expect_status(&child, StatusCode::INTERNAL_SERVER_ERROR)?;
    says(&child, "internal", false)
}

/// Drainers without the queue they are started through (wrangler.toml binds
/// none): refused, naming both.
async fn restarts_with_drainers_and_no_queue(f: &mut Restarted<'_>) -> Result<()> {
    restart_with_no_queue(f, "2").await
}

async fn drainers_without_a_queue_named_to_the_admin(f: &mut Restarted<'_>) -> Result<()> {
    no_queue_named_to_the_admin(f, "DRAINERS (2)").await
}

/// `auto` needs the queue as a number above 1 does.
async fn restarts_with_auto_drainers_and_no_queue(f: &mut Restarted<'_>) -> Result<()> {
    restart_with_no_queue(f, "auto").await
}

/// Restarts with `DRAINERS` set to `drainers` and no queue bound.
async fn restart_with_no_queue(f: &mut Restarted<'_>, drainers: &str) -> Result<()> {
    restart_with(
        f.target,
        &[
            ("DISPATCH_SECRET", Some(&f.dispatch)),
            ("DRAINERS", Some(drainers)),
        ],
    )
    .await
}

async fn auto_drainers_without_a_queue_named_to_the_admin(f: &mut Restarted<'_>) -> Result<()> {
    no_queue_named_to_the_admin(f, "DRAINERS (auto)").await
}

async fn no_queue_named_to_the_admin(f: &mut Restarted<'_>, setting: &str) -> Result<()> {
    let admin = f.api.admin_raw(Method::GET, "/subjects", None).await?;
    expect_status(&admin, StatusCode::INTERNAL_SERVER_ERROR)?;
    match admin.error_shape() {
        Some((code, message))
            if code == "misconfigured"
                && message.contains(setting)
                && message.contains("DRAIN_QUEUE") =>
        {
            Ok(())
        }
        _ => bail!("{}", clip(&admin.body)),
    }
}

/// With an unusable ADMIN_TOKEN nobody can be told the detail.
async fn restarts_with_a_short_admin_token(f: &mut Restarted<'_>) -> Result<()> {
    restart_with(
        f.target,
        &[
            ("DISPATCH_SECRET", Some(&f.dispatch)),
            ("DRAINERS", None),
            ("ADMIN_TOKEN", Some("short")),
        ],
    )
    .await
}

async fn unusable_admin_token_named_to_nobody(f: &mut Restarted<'_>) -> Result<()> {
    let r = f
        .api
        .raw(Method::GET, "/subjects", Some("short"), None)
        .await?;
    expect_status(&r, StatusCode::INTERNAL_SERVER_ERROR)?;
    match r.error_shape() {
        Some((code, _)) if code == "internal" && !r.body.contains("ADMIN_TOKEN") => Ok(()),
        _ => bail!("{}", clip(&r.body)),
    }
}
