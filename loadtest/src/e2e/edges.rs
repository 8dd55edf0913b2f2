//! The e2e suite's checks of the HTTP and webhook edges, the ones only the runtime shows:
//! bodies cut off while they stream, dispatch signatures (age bounded by the lease,
//! rotation, rejections logged within a limit), redirects never followed,
//! per-subject signing secrets, a receiver's endless answer read with a bound (in
//! fanout and inline mode), webhook targets refused when written and again at
//! run time, and misconfiguration detail for the admin only. The last three
//! restart the Worker with other settings, so they run last.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive;
use crate::driver::steps::items_by_subject;
use crate::driver::target::Target;
use crate::runtime::api::{clip, Api, Batch, RawResponse};
use crate::sink::faults::Faults;
use crate::sink::signature;
use anyhow::{bail, ensure, Context, Result};
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

fn expect_status(r: &RawResponse, want: StatusCode) -> Result<()> {
    ensure!(
        r.status == want,
        "got {} {}, want {want}",
        r.status,
        clip(&r.body)
    );
    Ok(())
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

/// One ad-hoc batch of webhook items, drained; its items by subject.
async fn drain_items(
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
    let stats = f.target.sink.stats(true).await?;
    let signatures: Vec<String> = stats
        .deliveries
        .unwrap_or_default()
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
    restart_with(
        f.target,
        &[
            ("DISPATCH_SECRET", Some(&f.dispatch)),
            ("DRAINERS", Some("2")),
        ],
    )
    .await
}

async fn drainers_without_a_queue_named_to_the_admin(f: &mut Restarted<'_>) -> Result<()> {
    no_queue_named_to_the_admin(f, "DRAINERS (2)").await
}

/// `auto` needs the queue as a number above 1 does.
async fn restarts_with_auto_drainers_and_no_queue(f: &mut Restarted<'_>) -> Result<()> {
    restart_with(
        f.target,
        &[
            ("DISPATCH_SECRET", Some(&f.dispatch)),
            ("DRAINERS", Some("auto")),
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
