//! The e2e suite's checks of the HTTP and webhook edges, the ones only the runtime shows:
//! bodies cut off while they stream, redirects never followed, a receiver's
//! endless answer read with a bound (in fanout and inline mode), and the helpers
//! the edge checks share. Signatures and signing secrets are `signing`; webhook
//! targets refused when written and again at run time, and misconfiguration
//! detail for the admin only, are `misconfig`. Those that restart the Worker
//! with other settings run last.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive;
use crate::driver::steps::items_by_subject;
use crate::driver::target::Target;
use crate::runtime::api::{clip, Api, RawResponse};
use crate::sink::faults::Faults;
use crate::sink::signature;
use anyhow::{bail, ensure, Context, Result};
use reqwest::StatusCode;
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

/// One route an endless body is sent to: the request's head, the body's start,
/// and the refusal it must get before the client sends more.
#[derive(Clone)]
struct Route {
    what: &'static str,
    head: String,
    prefix: String,
    want: u16,
    code: &'static str,
    stall_after: u64,
}

/// The streamed-body checks' fixture: the Worker's URL (each check carries its
/// route).
struct Streams {
    base: String,
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
    let routes = [
        Route {
            what: "PUT /subjects",
            head: head(
                "PUT /subjects",
                &format!("Authorization: Bearer {token}\r\n"),
            ),
            prefix: String::new(),
            want: 413,
            code: "payload_too_large",
            stall_after: BEFORE_STALL,
        },
        // The signature is the body's first line: a body whose first chunk holds no
        // line short enough to be one is refused on that chunk alone.
        Route {
            what: "POST /internal/run without a signature line",
            head: head("POST /internal/run", ""),
            prefix: String::new(),
            want: 401,
            code: "unauthorized",
            stall_after: STREAM_CHUNK as u64,
        },
        Route {
            what: "POST /internal/run with a well-formed signature line",
            head: head("POST /internal/run", ""),
            prefix: format!("{wrong}\n"),
            want: 413,
            code: "payload_too_large",
            stall_after: BEFORE_STALL,
        },
    ];
    // Each route: a pausing client, then one that never pauses.
    let list = routes
        .into_iter()
        .flat_map(|r| {
            [
                check!(paused_name(&r), refused_while_it_streams, r.clone()),
                check!(fast_name(&r), cut_off_early, r),
            ]
        })
        .collect();
    let mut f = Streams { base };
    checks.run(&mut f, list).await;
    Ok(())
}

fn paused_name(r: &Route) -> String {
    format!(
        "{}, endless chunked body (no Content-Length), client pausing after {}: {} {} before it sends more",
        r.what,
        mib(r.stall_after),
        r.want,
        r.code
    )
}

fn fast_name(r: &Route) -> String {
    format!(
        "{}, endless body sent without pause: cut off (answered or closed) before {}",
        r.what,
        mib(EARLY)
    )
}

/// How many times a pausing client sends its body when the connection ends with
/// no answer at all.
const RESET_ATTEMPTS: usize = 3;

/// A client that pauses after `stall_after` bytes gets the refusal by then. A
/// connection that ends before any answer arrived is tried again (up to
/// [`RESET_ATTEMPTS`]): a server that closes with unread bytes resets the
/// connection, and the client's kernel may drop an answer not yet read (rare: seen
/// once in CI as a reset); any answer but the refusal fails at once.
async fn refused_while_it_streams(f: &mut Streams, r: Route) -> Result<()> {
    let mut attempt = 1;
    let s = loop {
        let s = stream_endless(&f.base, &r.head, &r.prefix, Some(r.stall_after)).await?;
        if s.status.is_some() || attempt == RESET_ATTEMPTS {
            break s;
        }
        println!(
            "  (no answer, {}, after {}; sending again)",
            clip(&s.text),
            mib(s.sent)
        );
        attempt += 1;
    };
    ensure!(
        s.status == Some(r.want) && s.text.contains(r.code),
        "answer {:?} after {} of the body (attempt {attempt}): {}",
        s.status,
        mib(s.sent),
        clip(&s.text)
    );
    ensure!(
        s.sent <= r.stall_after,
        "answered only after {} of the body",
        mib(s.sent)
    );
    Ok(())
}

/// A client that never pauses is cut off before [`EARLY`].
async fn cut_off_early(f: &mut Streams, r: Route) -> Result<()> {
    let s = stream_endless(&f.base, &r.head, &r.prefix, None).await?;
    ensure!(
        s.sent <= EARLY,
        "still reading after {} ({:?}: {})",
        mib(s.sent),
        s.status,
        clip(&s.text)
    );
    Ok(())
}

pub fn expect_status(r: &RawResponse, want: StatusCode) -> Result<()> {
    ensure!(
        r.status == want,
        "got {} {}, want {want}",
        r.status,
        clip(&r.body)
    );
    Ok(())
}

/// One ad-hoc batch of webhook items, drained; its items by subject.
pub async fn drain_items(
    api: &Api,
    key: &str,
    items: Vec<Value>,
    timeout: Duration,
) -> Result<HashMap<String, crate::runtime::api::Item>> {
    let (created, batch) = api
        .create_batch(&json!({"key": key, "items": items}))
        .await?;
    ensure!(created, "batch {key} existed");
    drive::in_pairs(api, &batch.id, timeout, key).await?;
    items_by_subject(api, &batch.id).await
}

/// The redirect checks' fixture: the Worker and the sink, and the requests the
/// redirect target had before.
struct Redirects<'a> {
    target: &'a Target,
    timeout: Duration,
    hits_before: u64,
}

/// A webhook answering 3xx is a permanent failure and its Location gets nothing.
pub async fn redirects(target: &Target, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let mut f = Redirects {
        target,
        timeout,
        hits_before: target.sink.stats(false).await?.redirect_hits,
    };
    let list = vec![
        check!(
            "webhooks answering 301/302/303/307/308: failed on attempt 1 (redirects are not followed)",
            redirects_fail_at_once
        ),
        check!(
            "the redirect target (Location) received nothing: no request, no signature",
            redirect_target_gets_nothing
        ),
    ];
    checks.run(&mut f, list).await;
    Ok(())
}

const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

async fn redirects_fail_at_once(f: &mut Redirects<'_>) -> Result<()> {
    let items: Vec<Value> = REDIRECTS
        .iter()
        .map(|code| {
            let faults = Faults {
                redirect: Some(*code),
                ..Faults::default()
            };
            let id = format!("redirect-{code}");
            json!({"subject_id": id, "kind": "webhook",
                   "payload": {"url": f.target.sink.hook_url(&id, &faults), "data": {"code": code}}})
        })
        .collect();
    let items = drain_items(&f.target.api, "e2e-redirects", items, f.timeout).await?;
    let wrong: Vec<String> = REDIRECTS
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
    ensure!(
        wrong.is_empty() && items.len() == REDIRECTS.len(),
        "{}",
        wrong.join("; ")
    );
    Ok(())
}

async fn redirect_target_gets_nothing(f: &mut Redirects<'_>) -> Result<()> {
    let hits = f.target.sink.stats(false).await?.redirect_hits - f.hits_before;
    ensure!(hits == 0, "{hits} requests reached it");
    Ok(())
}

/// The megabytes the endless receiver answers with.
const ENDLESS_MIB: u32 = 50;
/// Healthy receivers in the endless receiver's batch.
const ENDLESS_NEIGHBOURS: usize = 10;
/// Pause between two `GET /health` calls while that batch runs, and how long one
/// may take.
const HEALTH_EVERY: Duration = Duration::from_millis(100);
const HEALTH_WITHIN: Duration = Duration::from_secs(5);
/// Most of the 50 MiB the Worker may take before it hangs up: the few KiB it
/// reads, plus what the sockets and the runtime buffer (as [`EARLY`]).
const ANSWER_TAKEN_AT_MOST: u64 = 16 * 1024 * 1024;

/// The endless-answer checks' fixture, for one dispatch mode: what the batch
/// left, the `GET /health` calls made while it ran, the bytes the sink sent.
struct Endless<'a> {
    target: &'a Target,
    timeout: Duration,
    mode: &'static str,
    items: HashMap<String, crate::runtime::api::Item>,
    /// Each call's time, or why it failed.
    health: Vec<Result<Duration, String>>,
    body_bytes: u64,
}

/// A receiver answering 404 with a 50 MiB streamed body, in a batch of healthy
/// ones: its item fails with the status and a short text, the others complete,
/// `GET /health` answers all along, and the body is not read to its end. Run in
/// fanout mode, then inline (the run in the drain's own isolate, as `service`
/// items always are), then fanout again. Restarts the Worker.
pub async fn endless_answers(
    target: &mut Target,
    timeout: Duration,
    checks: &mut Checks,
) -> Result<()> {
    for mode in ["fanout", "inline"] {
        if mode == "inline" {
            let restarted = restart_with(target, &[("DISPATCH_MODE", Some("inline"))]).await;
            if checks
                .step("Worker restarts with DISPATCH_MODE=inline", restarted)
                .is_none()
            {
                return Ok(());
            }
        }
        let mut f = Endless {
            target: &*target,
            timeout,
            mode,
            items: HashMap::new(),
            health: Vec::new(),
            body_bytes: 0,
        };
        let list = vec![
            check!(
                needed format!("{mode}: a batch with a webhook answering 404 and {ENDLESS_MIB} MiB (chunked) and {ENDLESS_NEIGHBOURS} healthy ones finishes while GET /health is called every {HEALTH_EVERY:?}"),
                endless_batch_finishes
            ),
            check!(
                format!("{mode}: the 404 item failed on attempt 1 with HTTP 404 and at most 200 bytes of the answer's text"),
                endless_item_fails_with_a_short_text
            ),
            check!(
                format!("{mode}: the batch's other items completed"),
                endless_neighbours_complete
            ),
            check!(
                format!("{mode}: GET /health answered every call within {HEALTH_WITHIN:?} while the batch ran"),
                health_answered_throughout
            ),
            check!(
                format!("{mode}: the Worker hung up early: the receiver sent at most {} MiB of its {ENDLESS_MIB}", ANSWER_TAKEN_AT_MOST >> 20),
                endless_body_not_read_to_its_end
            ),
        ];
        checks.run(&mut f, list).await;
    }
    checks.step(
        "Worker restarts with DISPATCH_MODE unset (fanout)",
        restart_with(target, &[("DISPATCH_MODE", None)]).await,
    );
    Ok(())
}

/// The endless receiver's subject.
const ENDLESS: &str = "endless";

async fn endless_batch_finishes(f: &mut Endless<'_>) -> Result<()> {
    let sink = &f.target.sink;
    let endless = Faults {
        status: Some(404),
        body_mib: ENDLESS_MIB,
        ..Faults::default()
    };
    let mut items = vec![json!({"subject_id": ENDLESS, "kind": "webhook",
        "payload": {"url": sink.hook_url(ENDLESS, &endless), "data": {}}})];
    items.extend((0..ENDLESS_NEIGHBOURS).map(|n| {
        let id = format!("neighbour-{n}");
        json!({"subject_id": id, "kind": "webhook",
               "payload": {"url": sink.hook_url(&id, &Faults::default()), "data": {}}})
    }));
    let before = sink.stats(false).await?.answer_body_bytes;
    let done = std::cell::Cell::new(false);
    let key = format!("e2e-endless-{}", f.mode);
    let drained = async {
        let items = drain_items(&f.target.api, &key, items, f.timeout).await;
        done.set(true);
        items
    };
    let polled = async {
        let mut calls = Vec::new();
        while !done.get() {
            let started = std::time::Instant::now();
            let call = tokio::time::timeout(HEALTH_WITHIN, f.target.api.health()).await;
            calls.push(match call {
                Ok(Ok(())) => Ok(started.elapsed()),
                Ok(Err(e)) => Err(format!("{e:#}")),
                Err(_) => Err(format!("no answer within {HEALTH_WITHIN:?}")),
            });
            tokio::time::sleep(HEALTH_EVERY).await;
        }
        calls
    };
    let (items, health) = tokio::join!(drained, polled);
    f.health = health;
    f.items = items?;
    f.body_bytes = sink.stats(false).await?.answer_body_bytes - before;
    Ok(())
}

async fn endless_item_fails_with_a_short_text(f: &mut Endless<'_>) -> Result<()> {
    let item = f
        .items
        .get(ENDLESS)
        .context("no item for the endless receiver")?;
    let reason = item.last_error.as_deref().unwrap_or("");
    // `permanent failure: HTTP 404: <the answer's text>`
    let text = reason.split_once("HTTP 404: ").map(|(_, text)| text);
    ensure!(
        item.status == "failed" && item.attempt == 1,
        "{} on attempt {}: {}",
        item.status,
        item.attempt,
        clip(reason)
    );
    match text {
        Some(text) if !text.is_empty() && text.len() <= 200 => Ok(()),
        Some(text) => bail!("{} bytes of text: {}", text.len(), clip(reason)),
        None => bail!("no HTTP 404 in {}", clip(reason)),
    }
}

async fn endless_neighbours_complete(f: &mut Endless<'_>) -> Result<()> {
    let not_done: Vec<String> = f
        .items
        .values()
        .filter(|i| i.subject_id != ENDLESS && i.status != "completed")
        .map(|i| format!("{} {}", i.subject_id, i.status))
        .collect();
    let neighbours = f.items.len().saturating_sub(1);
    ensure!(
        not_done.is_empty() && neighbours == ENDLESS_NEIGHBOURS,
        "{neighbours} neighbours; not completed: {}",
        not_done.join(", ")
    );
    Ok(())
}

async fn health_answered_throughout(f: &mut Endless<'_>) -> Result<()> {
    let failed: Vec<&String> = f.health.iter().filter_map(|c| c.as_ref().err()).collect();
    let slowest = f.health.iter().filter_map(|c| c.as_ref().ok()).max();
    println!(
        "# {}: {} GET /health calls, slowest {slowest:?}",
        f.mode,
        f.health.len()
    );
    ensure!(!f.health.is_empty(), "no call was made");
    ensure!(
        failed.is_empty(),
        "{} of {} failed, first: {}",
        failed.len(),
        f.health.len(),
        failed[0]
    );
    Ok(())
}

async fn endless_body_not_read_to_its_end(f: &mut Endless<'_>) -> Result<()> {
    println!(
        "# {}: the receiver sent {} KiB of its {ENDLESS_MIB} MiB",
        f.mode,
        f.body_bytes >> 10
    );
    ensure!(
        f.body_bytes <= ANSWER_TAKEN_AT_MOST,
        "it sent {} KiB",
        f.body_bytes >> 10
    );
    Ok(())
}

/// Restarts the Worker with `vars` changed (`None` removes one).
pub async fn restart_with(target: &mut Target, vars: &[(&str, Option<&str>)]) -> Result<()> {
    let runtime = target.runtime.as_mut().context("no local runtime")?;
    for (key, value) in vars {
        runtime.set_var(key, *value);
    }
    runtime.restart().await
}
