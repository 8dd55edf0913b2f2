//! The e2e suite's checks of the HTTP and webhook edges, the ones only the runtime shows:
//! bodies cut off while they stream, dispatch signatures (age bounded by the lease,
//! rotation, rejections logged within a limit), redirects never followed,
//! per-subject signing secrets, webhook targets refused when written and again at
//! run time, and misconfiguration detail for the admin only. The last two restart
//! the Worker with other settings, so they run last.

use crate::api::{clip, Api, RawResponse};
use crate::checks::Checks;
use crate::drive;
use crate::faults::Faults;
use crate::signature;
use crate::steps::items_by_subject;
use crate::target::Target;
use anyhow::{ensure, Context, Result};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What an endless body is made of, and when the client gives up sending it.
const STREAM_CHUNK: usize = 64 * 1024;
const STREAM_CAP: u64 = 64 * 1024 * 1024;
/// A client that pauses sends this much of a body that must be read to be refused,
/// then waits [`STALL`] for an answer.
const BEFORE_STALL: u64 = 1024 * 1024;
const STALL: Duration = Duration::from_secs(5);
/// A client that never pauses must be cut off (answered, or its connection closed)
/// before it has sent this much: 256 KiB read, plus what the sockets and
/// wrangler's proxy buffer.
const EARLY: u64 = 16 * 1024 * 1024;

/// How an endless chunked request ended.
struct Streamed {
    /// The answer's status, if one arrived (a closed or reset connection has none).
    status: Option<u16>,
    /// The start of the answer (head and body), or why the connection ended.
    text: String,
    /// Body bytes sent when the answer's head arrived or the connection ended.
    sent: u64,
}

/// Sends `head` (a chunked request, no Content-Length) and a body of spaces that
/// goes on until [`STREAM_CAP`], reading the answer all along. With
/// `stall_after: Some(n)`, the client stops after `n` body bytes for [`STALL`]: an
/// answer given while the body streams arrives then (under `wrangler dev`, one given
/// while the client keeps sending races the proxy's own error, and a server that
/// closes with unread bytes resets the connection, which can discard its answer).
async fn stream_endless(
    base: &str,
    head: &str,
    prefix: &str,
    stall_after: Option<u64>,
) -> Result<Streamed> {
    let addr = base
        .strip_prefix("http://")
        .context("the Worker's URL is not http://")?;
    let (mut rd, mut wr) = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?
        .into_split();
    let sent = Arc::new(AtomicU64::new(0));
    let writer = {
        let sent = sent.clone();
        let head = head.to_string();
        let prefix = prefix.to_string();
        tokio::spawn(async move {
            wr.write_all(head.as_bytes()).await?;
            if !prefix.is_empty() {
                let chunk = format!("{:x}\r\n{prefix}\r\n", prefix.len());
                wr.write_all(chunk.as_bytes()).await?;
            }
            let mut framed = format!("{STREAM_CHUNK:x}\r\n").into_bytes();
            framed.extend(std::iter::repeat_n(b' ', STREAM_CHUNK));
            framed.extend_from_slice(b"\r\n");
            while sent.load(Ordering::SeqCst) < STREAM_CAP {
                if stall_after == Some(sent.load(Ordering::SeqCst)) {
                    tokio::time::sleep(STALL).await;
                }
                wr.write_all(&framed).await?;
                sent.fetch_add(STREAM_CHUNK as u64, Ordering::SeqCst);
            }
            wr.write_all(b"0\r\n\r\n").await?;
            anyhow::Ok(())
        })
    };
    let read = async {
        let mut answer = Vec::new();
        let mut buf = [0u8; 8192];
        let mut at_head = None;
        loop {
            let n = match rd.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => {
                    let at = at_head.unwrap_or_else(|| sent.load(Ordering::SeqCst));
                    return (answer, at, Some(e.to_string()));
                }
            };
            answer.extend_from_slice(&buf[..n]);
            if at_head.is_none() && answer.windows(4).any(|w| w == b"\r\n\r\n") {
                at_head = Some(sent.load(Ordering::SeqCst));
            }
            // The error body ends with `}}`; a closed connection ends it too.
            if n == 0 || (at_head.is_some() && answer.ends_with(b"}}")) {
                let at = at_head.unwrap_or_else(|| sent.load(Ordering::SeqCst));
                return (answer, at, None);
            }
        }
    };
    let outcome = tokio::time::timeout(Duration::from_secs(120), read).await;
    writer.abort();
    let (answer, sent, error) = outcome.context("no answer within 120 s")?;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok());
    let text = match error {
        Some(e) if status.is_none() => format!("connection ended: {e}"),
        _ => text,
    };
    Ok(Streamed { status, text, sent })
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Bodies over 256 KiB are refused while they stream, on every route that reads
/// one, without a Content-Length; an unsigned dispatch is refused on its first chunk.
pub async fn streamed_bodies(target: &Target, checks: &mut Checks) -> Result<()> {
    let base = target.api.base().to_string();
    let host = base.trim_start_matches("http://");
    let token = target
        .secrets
        .get("ADMIN_TOKEN")
        .context("no admin token")?;
    let head = |request_line: &str, extra: &str| {
        format!(
            "{request_line} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n{extra}Connection: close\r\n\r\n"
        )
    };
    let wrong = signature::sign(
        b"not-the-dispatch-secret",
        chrono::Utc::now().timestamp(),
        b"{}",
    );
    let signature_line = format!("{wrong}\n");
    let cases = [
        (
            "PUT /subjects",
            head(
                "PUT /subjects",
                &format!("Authorization: Bearer {token}\r\n"),
            ),
            "",
            413,
            "payload_too_large",
            BEFORE_STALL,
        ),
        // The signature is the body's first line: a body whose first chunk holds no
        // line short enough to be one is refused on that chunk alone.
        (
            "POST /internal/run without a signature line",
            head("POST /internal/run", ""),
            "",
            401,
            "unauthorized",
            STREAM_CHUNK as u64,
        ),
        (
            "POST /internal/run with a well-formed signature line",
            head("POST /internal/run", ""),
            signature_line.as_str(),
            413,
            "payload_too_large",
            BEFORE_STALL,
        ),
    ];
    for (what, head, prefix, want, code, stall_after) in cases {
        let paused = stream_endless(&base, &head, prefix, Some(stall_after)).await;
        checks.record(
            &format!("{what}, endless chunked body (no Content-Length), client pausing after {}: {want} {code} before it sends more", mib(stall_after)),
            paused.map_err(|e| format!("{e:#}")).and_then(|r| {
                if r.status != Some(want) || !r.text.contains(code) {
                    return Err(format!("answer {:?}: {}", r.status, clip(&r.text)));
                }
                if r.sent > stall_after {
                    return Err(format!("answered only after {} of the body", mib(r.sent)));
                }
                Ok(())
            }),
        );
        let fast = stream_endless(&base, &head, prefix, None).await;
        checks.record(
            &format!(
                "{what}, endless body sent without pause: cut off (answered or closed) before {}",
                mib(EARLY)
            ),
            fast.map_err(|e| format!("{e:#}")).and_then(|r| {
                if r.sent > EARLY {
                    return Err(format!(
                        "still reading after {} ({:?}: {})",
                        mib(r.sent),
                        r.status,
                        clip(&r.text)
                    ));
                }
                Ok(())
            }),
        );
    }
    Ok(())
}

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

fn expect_status(r: &RawResponse, want: StatusCode) -> Result<(), String> {
    if r.status == want {
        Ok(())
    } else {
        Err(format!("got {} {}, want {want}", r.status, clip(&r.body)))
    }
}

/// Lines of the runtime's log naming `event`.
fn log_lines(target: &Target, event: &str) -> Result<usize> {
    let runtime = target.runtime.as_ref().context("no local runtime")?;
    let path = runtime.config().wrangler_log();
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let needle = format!("\"event\":\"{event}\"");
    Ok(text.lines().filter(|l| l.contains(&needle)).count())
}

/// Dispatches signed as the Worker signs them: accepted with the current and the
/// previous secret, refused once older than the lease; rejected ones logged within
/// the limit.
pub async fn dispatch_signatures(target: &Target, checks: &mut Checks) -> Result<()> {
    let api = &target.api;
    let item = noop_item();
    let now = chrono::Utc::now().timestamp();
    let secret = |name: &str| {
        target
            .secrets
            .get(name)
            .or_else(|| target.settings.get(name))
            .map(|s| s.as_bytes().to_vec())
            .with_context(|| format!("{name} unknown"))
    };
    let current = secret("DISPATCH_SECRET")?;
    let previous = secret("DISPATCH_SECRET_PREVIOUS")?;
    let lease = target.setting("LEASE_SECONDS")? as i64;
    let done = |r: RawResponse| -> Result<(), String> {
        expect_status(&r, StatusCode::NO_CONTENT)?;
        match r.header("Fanout-Outcome") {
            Some("done") => Ok(()),
            other => Err(format!("Fanout-Outcome {other:?}")),
        }
    };
    let r = dispatch(api, &item, &signature::sign(&current, now, item.as_bytes())).await?;
    checks.record(
        "a dispatch signed with DISPATCH_SECRET runs (204, Fanout-Outcome: done)",
        done(r),
    );
    let r = dispatch(
        api,
        &item,
        &signature::sign(&previous, now, item.as_bytes()),
    )
    .await?;
    checks.record(
        "a dispatch signed with DISPATCH_SECRET_PREVIOUS runs too (rotation window)",
        done(r),
    );
    let old = now - lease - 5;
    let r = dispatch(api, &item, &signature::sign(&current, old, item.as_bytes())).await?;
    checks.record(
        &format!("a dispatch signed {} s ago, more than LEASE_SECONDS ({lease}) but less than 300 s: 401", lease + 5),
        expect_status(&r, StatusCode::UNAUTHORIZED),
    );
    let webhook = secret("WEBHOOK_SECRET")?;
    let r = dispatch(api, &item, &signature::sign(&webhook, now, item.as_bytes())).await?;
    checks.record(
        "a dispatch signed with WEBHOOK_SECRET: 401",
        expect_status(&r, StatusCode::UNAUTHORIZED),
    );
    let good = signature::sign(&current, now, item.as_bytes());
    let r = dispatch(api, &item, &good[..good.len() - 1]).await?;
    checks.record(
        "a dispatch whose v1 is 63 hex digits: 401",
        expect_status(&r, StatusCode::UNAUTHORIZED),
    );
    // The item (lease token, payload, signing secret) and the signature in request
    // headers, which trace events record: no longer a way in, even signed right.
    let r = api
        .raw_with_headers(
            Method::POST,
            "/internal/run",
            &[("Fanout-Item", &item), ("Fanout-Dispatch-Signature", &good)],
        )
        .await?;
    checks.record(
        "a dispatch signed with DISPATCH_SECRET but carried in the Fanout-Item and Fanout-Dispatch-Signature headers: 401",
        expect_status(&r, StatusCode::UNAUTHORIZED),
    );

    // Anyone can send these: a burst must not write a line each.
    let before = log_lines(target, "dispatch_rejected")?;
    let burst = 40;
    for _ in 0..burst {
        let r = api
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
    checks.record(
        &format!("{burst} unsigned dispatches in a burst write at most {limit} dispatch_rejected log lines"),
        if (1..=limit).contains(&written) {
            Ok(())
        } else {
            Err(format!("{written} lines"))
        },
    );
    Ok(())
}

/// One ad-hoc batch of webhook items, drained; its items by subject.
async fn drain_items(
    api: &Api,
    key: &str,
    items: Vec<Value>,
    timeout: Duration,
) -> Result<HashMap<String, crate::api::Item>> {
    let (created, batch) = api
        .create_batch(&json!({"key": key, "items": items}))
        .await?;
    ensure!(created, "batch {key} existed");
    drive::in_pairs(api, &batch.id, timeout, key).await?;
    items_by_subject(api, &batch.id).await
}

/// A webhook answering 3xx is a permanent failure and its Location gets nothing.
pub async fn redirects(target: &Target, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let codes = [301u16, 302, 303, 307, 308];
    let items: Vec<Value> = codes
        .iter()
        .map(|code| {
            let faults = Faults {
                redirect: Some(*code),
                ..Faults::default()
            };
            let id = format!("redirect-{code}");
            json!({"subject_id": id, "kind": "webhook",
                   "payload": {"url": target.sink.hook_url(&id, &faults), "data": {"code": code}}})
        })
        .collect();
    let hits_before = target.sink.stats(false).await?.redirect_hits;
    let items = drain_items(&target.api, "e2e-redirects", items, timeout).await?;
    let hits = target.sink.stats(false).await?.redirect_hits - hits_before;
    let wrong: Vec<String> = codes
        .iter()
        .filter_map(|code| {
            let item = items.get(&format!("redirect-{code}"))?;
            let reason = item.last_error.as_deref().unwrap_or("");
            let ok = item.status == "failed"
                && item.attempt == 1
                && reason.contains(&code.to_string())
                && reason.contains("redirects are not followed");
            (!ok).then(|| {
                format!(
                    "{code}: {} attempt {} {reason:?}",
                    item.status, item.attempt
                )
            })
        })
        .collect();
    checks.record(
        "webhooks answering 301/302/303/307/308: failed on attempt 1 (redirects are not followed)",
        if wrong.is_empty() && items.len() == codes.len() {
            Ok(())
        } else {
            Err(wrong.join("; "))
        },
    );
    checks.record(
        "the redirect target (Location) received nothing: no request, no signature",
        if hits == 0 {
            Ok(())
        } else {
            Err(format!("{hits} requests reached it"))
        },
    );
    Ok(())
}

/// A subject's own signing secret signs its deliveries, and is never listed.
pub async fn signing_secrets(
    target: &Target,
    timeout: Duration,
    checks: &mut Checks,
) -> Result<()> {
    let api = &target.api;
    let id = "own-secret";
    let secret = crate::devvars::random_secret();
    let payload = json!({"url": target.sink.hook_url(id, &Faults::default()),
                         "data": {"own": true}, "signing_secret": secret});
    let put = api
        .admin_raw(
            Method::PUT,
            "/subjects",
            Some(
                json!({"subjects": [{"id": id, "kind": "webhook", "payload": payload}]})
                    .to_string(),
            ),
        )
        .await?;
    let listed = api
        .admin_raw(Method::GET, "/subjects?limit=1000", None)
        .await?;
    checks.record(
        "PUT /subjects takes a signing_secret; GET /subjects lists it as \"[redacted]\"",
        expect_status(&put, StatusCode::OK).and_then(|()| {
            if listed.body.contains(&secret) {
                Err("GET /subjects shows the secret".into())
            } else if !listed.body.contains("[redacted]") {
                Err(format!("no redaction in {}", clip(&listed.body)))
            } else {
                Ok(())
            }
        }),
    );
    target
        .sink
        .set_subject_secrets(&HashMap::from([(id.to_string(), secret.clone())]))
        .await?;
    let drained = drain_items(
        api,
        "e2e-own-secret",
        vec![json!({"subject_id": id, "kind": "webhook", "payload": payload})],
        timeout,
    )
    .await;
    let name = "a subject with its own signing_secret: its delivery verifies under that secret (not WEBHOOK_SECRET) and completes";
    let items = match drained {
        Ok(items) => items,
        Err(e) => {
            checks.record(name, Err(format!("{e:#}")));
            return Ok(());
        }
    };
    let stats = target.sink.stats(true).await?;
    let signatures: Vec<String> = stats
        .deliveries
        .unwrap_or_default()
        .into_iter()
        .filter(|d| d.subject_id == id)
        .map(|d| d.signature)
        .collect();
    checks.record(
        name,
        match (
            items.get(id).map(|i| i.status.as_str()),
            signatures.as_slice(),
        ) {
            (Some("completed"), [one]) if one == "valid" => Ok(()),
            (status, sigs) => Err(format!("item {status:?}, delivery signatures {sigs:?}")),
        },
    );
    // Later parts batch every subject; this one is not in their plans.
    let deleted = api
        .admin_raw(Method::DELETE, &format!("/subjects/{id}"), None)
        .await?;
    ensure!(
        deleted.status == StatusCode::OK,
        "DELETE /subjects/{id}: {}",
        deleted.status
    );
    Ok(())
}

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

/// Restarts the Worker with `vars` changed (`None` removes one).
async fn restart_with(target: &mut Target, vars: &[(&str, Option<&str>)]) -> Result<()> {
    let runtime = target.runtime.as_mut().context("no local runtime")?;
    for (key, value) in vars {
        runtime.set_var(key, *value);
    }
    runtime.restart().await
}

/// Private targets are refused by default, when written and again at run time; then
/// misconfigurations tell only the admin what is wrong. Restarts the Worker.
pub async fn restarted(target: &mut Target, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let api = target.api.clone();
    // Queued while private targets are allowed...
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
    let delivered_before = target.sink.stats(false).await?.total;

    // ...then the setting goes back to its default.
    checks.step(
        "Worker restarts with ALLOW_PRIVATE_TARGETS unset (default false)",
        restart_with(target, &[("ALLOW_PRIVATE_TARGETS", None)]).await,
    );
    let mut accepted = Vec::new();
    for url in forbidden_urls(target.sink.base()) {
        let body =
            json!({"subjects": [{"id": "ssrf", "kind": "webhook", "payload": {"url": url}}]});
        let r = api
            .admin_raw(Method::PUT, "/subjects", Some(body.to_string()))
            .await?;
        let code = r.error_shape().map(|(c, _)| c);
        if r.status != StatusCode::BAD_REQUEST || code.as_deref() != Some("invalid_payload") {
            accepted.push(format!("{url}: {} {}", r.status, clip(&r.body)));
        }
    }
    checks.record(
        "by default PUT /subjects refuses loopback, private, link-local and local-name targets (400 invalid_payload), in IPv4, IPv6, mapped and decimal forms",
        if accepted.is_empty() {
            Ok(())
        } else {
            Err(accepted.join("; "))
        },
    );
    let drained = drive::in_pairs(&api, &queued.id, timeout, "ssrf").await;
    let items = items_by_subject(&api, &queued.id).await?;
    let delivered = target.sink.stats(false).await?.total - delivered_before;
    checks.record(
        "items queued while private targets were allowed fail on attempt 1 once they are not (\"not sent\"), and nothing is delivered",
        drained.map_err(|e| format!("{e:#}")).and_then(|_| {
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
            match (wrong.is_empty(), delivered) {
                (true, 0) if items.len() == 3 => Ok(()),
                _ => Err(format!("{wrong:?}, {delivered} deliveries")),
            }
        }),
    );

    misconfigured(target, checks).await
}

/// Invalid secrets: the Worker refuses to run, and tells only the admin why.
async fn misconfigured(target: &mut Target, checks: &mut Checks) -> Result<()> {
    let api = target.api.clone();
    let webhook = target
        .secrets
        .get("WEBHOOK_SECRET")
        .cloned()
        .context("no WEBHOOK_SECRET")?;
    let dispatch = target
        .secrets
        .get("DISPATCH_SECRET")
        .cloned()
        .context("no DISPATCH_SECRET")?;
    checks.step(
        "Worker restarts with DISPATCH_SECRET = WEBHOOK_SECRET",
        restart_with(target, &[("DISPATCH_SECRET", Some(&webhook))]).await,
    );
    let health = api.health().await;
    let admin = api.admin_raw(Method::GET, "/subjects", None).await?;
    let anonymous = api.raw(Method::GET, "/subjects", None, None).await?;
    let child = api
        .raw(Method::POST, "/internal/run", None, Some("{}".into()))
        .await?;
    let says = |r: &RawResponse, code: &str, names: bool| -> Result<(), String> {
        let got = r.error_shape().map(|(c, _)| c);
        if got.as_deref() != Some(code) {
            return Err(format!("{} {}, want code {code}", r.status, clip(&r.body)));
        }
        if r.body.contains("DISPATCH_SECRET") != names {
            return Err(format!("names the setting: {names}? {}", clip(&r.body)));
        }
        Ok(())
    };
    checks.record(
        "DISPATCH_SECRET equal to WEBHOOK_SECRET is refused: the admin gets 500 misconfigured naming it",
        expect_status(&admin, StatusCode::INTERNAL_SERVER_ERROR)
            .and_then(|()| says(&admin, "misconfigured", true)),
    );
    checks.record(
        "misconfigured: GET /health still answers, no admin token gets 401, POST /internal/run a generic 500; neither names the setting",
        health
            .map_err(|e| format!("{e:#}"))
            .and_then(|()| expect_status(&anonymous, StatusCode::UNAUTHORIZED))
            .and_then(|()| says(&anonymous, "unauthorized", false))
            .and_then(|()| expect_status(&child, StatusCode::INTERNAL_SERVER_ERROR))
            .and_then(|()| says(&child, "internal", false)),
    );

    // Drainers without the queue they are started through (wrangler.toml binds
    // none): refused, naming both.
    checks.step(
        "Worker restarts with DRAINERS=2 and no DRAIN_QUEUE binding",
        restart_with(
            target,
            &[
                ("DISPATCH_SECRET", Some(&dispatch)),
                ("DRAINERS", Some("2")),
            ],
        )
        .await,
    );
    let admin = api.admin_raw(Method::GET, "/subjects", None).await?;
    checks.record(
        "DRAINERS=2 without a DRAIN_QUEUE binding: the admin gets 500 misconfigured naming DRAINERS and DRAIN_QUEUE",
        expect_status(&admin, StatusCode::INTERNAL_SERVER_ERROR).and_then(|()| {
            match admin.error_shape() {
                Some((code, message))
                    if code == "misconfigured"
                        && message.contains("DRAINERS (2)")
                        && message.contains("DRAIN_QUEUE") =>
                {
                    Ok(())
                }
                _ => Err(clip(&admin.body)),
            }
        }),
    );

    // With an unusable ADMIN_TOKEN nobody can be told the detail.
    checks.step(
        "Worker restarts with a 5-character ADMIN_TOKEN",
        restart_with(
            target,
            &[
                ("DISPATCH_SECRET", Some(&dispatch)),
                ("DRAINERS", None),
                ("ADMIN_TOKEN", Some("short")),
            ],
        )
        .await,
    );
    let r = api
        .raw(Method::GET, "/subjects", Some("short"), None)
        .await?;
    checks.record(
        "an unusable ADMIN_TOKEN: even its holder gets a generic 500 internal, not the setting's name",
        expect_status(&r, StatusCode::INTERNAL_SERVER_ERROR).and_then(|()| {
            match r.error_shape() {
                Some((code, _)) if code == "internal" && !r.body.contains("ADMIN_TOKEN") => Ok(()),
                _ => Err(clip(&r.body)),
            }
        }),
    );
    Ok(())
}
