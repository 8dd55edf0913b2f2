//! The sink folder: the webhook receiver the Worker delivers to (this module: its
//! HTTP server; what it records and its client in `client`), the faults a hook URL asks for (`faults`), the
//! signatures it verifies (`signature`), the fakes of the APIs the examples call
//! (`fakes`) and a slow URL (`slow`). It imports nothing else of the harness.
//!
//! The webhook target: an in-memory HTTP server on 127.0.0.1 that verifies the
//! Worker's signatures, injects faults (see `faults`) and records every delivery.
//!
//! Routes:
//! - `POST /hook/<subject_id>?<faults>`: a delivery (a webhook's, or one channel's
//!   of a multi-channel item: its body names the `channel`). Answers 401 on a bad
//!   signature, 400 on a missing Idempotency-Key, a body that is not the delivery
//!   JSON or an unknown fault, and otherwise what the faults decide (200 by
//!   default; with `body_mib`, that status and a body of that many MiB streamed
//!   as it is made, counted in `Stats::answer_body_bytes` as it goes out).
//! - `POST /callback/<name>?<faults>`: a batch's completion callback, checked and
//!   answered the same way, its body the batch summary; kept apart from the
//!   deliveries (`Stats::callbacks`), with its own count per Idempotency-Key.
//! - `ANY /redirected/<subject_id>`: where the `redirect` fault's `Location` points.
//!   Counted (`Stats::redirect_hits`); the Worker must never get here.
//! - `POST /secrets`: `{"<subject_id>": "<signing secret>"}`, the subjects whose
//!   deliveries are verified with their own secret instead of the sink's.
//! - `POST /fixed`: `["<subject_id>", ...]`, receivers fixed from now on: their
//!   deliveries answer 200 after any latency, whatever faults their URL asks for
//!   (a dead-letter replay after the receiver was repaired).
//! - `GET /stats[?deliveries=1]`: totals, counts per Idempotency-Key and, on request,
//!   every delivery record (`Stats`).
//! - `POST /connection-cap`: `{"per_invocation": 6}` turns on the emulation of the
//!   platform's connection cap, `{"per_invocation": null}` turns it off (the
//!   default). See below.
//! - `POST /reset`: forget everything (deliveries, redirect hits and the cap's
//!   counts; not secrets, fixed receivers or the cap itself).
//! - `/github/…`, `/discord/…`, `/telegram/…`, `/fakes/…`: fakes of the APIs
//!   `examples/streak-reminder` calls (`fakes`).
//!
//! The connection cap (opt-in): Workers reached through service bindings share
//! the top-level request's 6 simultaneous open connections, and a 7th waits until
//! one closes. The sink emulates it per `Fanout-Invocation` header value (the
//! invocation that dispatched the item): at most `per_invocation` deliveries and
//! callbacks of one invocation are handled at once, the rest wait their turn
//! before they are recorded. Requests without the header are never capped (there
//! is no invocation to count them against). `Stats` shows the cap's counts.
//!
//! Each scenario runs one in-process (`start`) and reads it over HTTP like an
//! external sink (`SinkClient`), so `--sink-url` mode uses the same code path.

pub mod client;
pub mod fakes;
pub mod faults;
pub mod receivers;
pub mod signature;
pub mod slow;

use crate::sink::faults::Faults;
use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
pub use client::{CallbackRecord, ConnectionCap, Delivery, SinkClient, Stats, Summary};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// The header naming the invocation that dispatched an item (the Worker's
/// correlation id): what the connection cap counts by.
pub const INVOCATION_HEADER: &str = cron_fanout::jobs::INVOCATION_HEADER;

/// The platform's simultaneous open connections per top-level request.
pub const PLATFORM_CONNECTIONS: u32 = 6;

#[derive(Deserialize)]
struct Body {
    item_id: i64,
    batch_id: String,
    subject_id: String,
    attempt: u32,
    /// Only in a multi-channel item's deliveries.
    #[serde(default)]
    channel: Option<String>,
    /// Required by the contract (may be null); recorded as a digest.
    data: serde_json::Value,
}

/// Digest of a delivery's `data`: SHA-256 of its canonical JSON (serde_json sorts
/// object keys), so the same value always has the same digest.
pub fn data_digest(data: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(data.to_string().as_bytes()))
}

/// Whether a receiver taking `per_s` requests a second takes one more now (and
/// counts it): the `accept_per_s` fault.
fn takes_one_more(shared: &Shared, per_s: u32) -> bool {
    let now = std::time::Instant::now();
    let mut inner = shared.lock();
    let taken = inner.accepted.entry(per_s).or_default();
    while taken
        .front()
        .is_some_and(|t| now.duration_since(*t) >= std::time::Duration::from_secs(1))
    {
        taken.pop_front();
    }
    if taken.len() < per_s as usize {
        taken.push_back(now);
        return true;
    }
    false
}

#[derive(Default)]
struct Inner {
    next_seq: u64,
    deliveries: Vec<Delivery>,
    per_key: HashMap<String, u32>,
    redirect_hits: u64,
    /// Per-subject signing secrets (`POST /secrets`).
    subject_secrets: HashMap<String, Vec<u8>>,
    /// Subjects whose receiver was fixed (`POST /fixed`).
    fixed: HashSet<String>,
    callbacks: Vec<CallbackRecord>,
    callback_per_key: HashMap<String, u32>,
    /// The connection cap per invocation (`POST /connection-cap`).
    cap: Option<u32>,
    /// Each invocation's slots while the cap is on.
    slots: HashMap<String, Arc<Semaphore>>,
    /// Requests of each invocation being handled now.
    in_flight: HashMap<String, u32>,
    cap_waits: u64,
    peak_in_flight: u32,
    answer_body_bytes: u64,
    /// Per `group` fault: requests being handled now, and the most at once.
    groups: HashMap<String, (u32, u32)>,
    /// Per `accept_per_s` fault: the instants of the requests it took in the
    /// last second.
    accepted: HashMap<u32, std::collections::VecDeque<std::time::Instant>>,
}

struct Shared {
    secret: Vec<u8>,
    inner: Mutex<Inner>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind, still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection of the invocation `headers` name: with the cap on, one of its
    /// slots, waited for if all are taken. Held until the request is answered or
    /// the Worker hangs up (dropped with the handler's future either way).
    async fn connection(self: &Arc<Self>, headers: &HeaderMap) -> Connection {
        let Some(invocation) = headers
            .get(INVOCATION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
        else {
            return Connection {
                shared: None,
                invocation: String::new(),
                _slot: None,
            };
        };
        let slots = {
            let mut inner = self.lock();
            inner.cap.map(|cap| {
                inner
                    .slots
                    .entry(invocation.clone())
                    .or_insert_with(|| Arc::new(Semaphore::new(cap as usize)))
                    .clone()
            })
        };
        let slot = match slots {
            None => None,
            Some(slots) => Some(match slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    self.lock().cap_waits += 1;
                    slots.acquire_owned().await.expect("slots are never closed")
                }
            }),
        };
        {
            let mut inner = self.lock();
            let n = inner.in_flight.entry(invocation.clone()).or_insert(0);
            *n += 1;
            let n = *n;
            inner.peak_in_flight = inner.peak_in_flight.max(n);
        }
        Connection {
            shared: Some(self.clone()),
            invocation,
            _slot: slot,
        }
    }
}

/// One request being handled, counted against its invocation while it lives.
struct Connection {
    /// `None`: no `Fanout-Invocation` header, nothing counted.
    shared: Option<Arc<Shared>>,
    invocation: String,
    _slot: Option<OwnedSemaphorePermit>,
}

impl Connection {
    fn invocation(&self) -> Option<String> {
        self.shared.as_ref().map(|_| self.invocation.clone())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            let mut inner = shared.lock();
            if let Some(n) = inner.in_flight.get_mut(&self.invocation) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    inner.in_flight.remove(&self.invocation);
                }
            }
        }
    }
}

/// One request of `group` faults being handled, counted in each of its groups
/// while it lives (until its answer is made: before the Worker can see it).
struct GroupSlot {
    shared: Arc<Shared>,
    groups: Vec<String>,
}

impl GroupSlot {
    fn enter(shared: &Arc<Shared>, groups: &str) -> GroupSlot {
        let groups: Vec<String> = groups.split(',').map(str::to_string).collect();
        let mut inner = shared.lock();
        for group in &groups {
            let (now, peak) = inner.groups.entry(group.clone()).or_insert((0, 0));
            *now += 1;
            *peak = (*peak).max(*now);
        }
        GroupSlot {
            shared: shared.clone(),
            groups,
        }
    }
}

impl Drop for GroupSlot {
    fn drop(&mut self) {
        let mut inner = self.shared.lock();
        for group in &self.groups {
            if let Some((now, _)) = inner.groups.get_mut(group) {
                *now = now.saturating_sub(1);
            }
        }
    }
}

/// A running sink; the server stops when this is dropped.
pub struct SinkHandle {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
    /// The same sink on other loopback addresses (`also_at`).
    more: Vec<JoinHandle<()>>,
}

impl SinkHandle {
    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for SinkHandle {
    fn drop(&mut self) {
        self.task.abort();
        for task in &self.more {
            task.abort();
        }
    }
}

/// Loopback addresses besides 127.0.0.1 the sink also answers on, at the same
/// port: hosts of their own for the fake receivers (`host:` keys are per
/// hostname, and real receivers are each a host of their own), so what one
/// receiver taught its key never holds another's batch back.
pub const MORE_HOSTS: std::ops::RangeInclusive<u8> = 2..=16;

/// Binds 127.0.0.1:`port` (0 = any free port) and serves in the background;
/// also on 127.0.0.N ([`MORE_HOSTS`]) at the same port where it can bind
/// (Linux routes all of 127/8 to loopback).
pub async fn start(port: u16, webhook_secret: &str) -> Result<SinkHandle> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("binding the sink to 127.0.0.1:{port}"))?;
    let addr = listener.local_addr()?;
    let app = router(webhook_secret);
    let mut more = Vec::new();
    for n in MORE_HOSTS {
        let Ok(extra) =
            TcpListener::bind((std::net::Ipv4Addr::new(127, 0, 0, n), addr.port())).await
        else {
            continue;
        };
        let app = app.clone();
        more.push(tokio::spawn(async move {
            if let Err(e) = axum::serve(extra, app).await {
                eprintln!("sink: server error: {e}");
            }
        }));
    }
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("sink: server error: {e}");
        }
    });
    Ok(SinkHandle { addr, task, more })
}

fn router(webhook_secret: &str) -> Router {
    let shared = Arc::new(Shared {
        secret: webhook_secret.as_bytes().to_vec(),
        inner: Mutex::new(Inner::default()),
    });
    Router::new()
        .route("/hook/{subject_id}", post(hook))
        .route("/callback/{name}", post(callback))
        .route("/redirected/{subject_id}", any(redirected))
        .route("/secrets", post(secrets))
        .route("/fixed", post(fixed))
        .route("/stats", get(stats))
        .route("/connection-cap", post(connection_cap))
        .route("/reset", post(reset))
        .with_state(shared)
        // GitHub, Discord and Telegram for examples/streak-reminder.
        .merge(crate::sink::fakes::router())
        // Real receivers' "slow down", each with its own limiter.
        .merge(crate::sink::receivers::router())
}

/// What the sink reads of a signed request (a delivery or a callback) before
/// recording it: the signature's verdict, the Idempotency-Key, the body as `T`,
/// and whether it is admitted, with the faults of its query.
struct Signed<T> {
    sig: signature::Verdict,
    key: Option<String>,
    body: Option<T>,
    admitted: Result<Faults, (StatusCode, String)>,
}

impl<T: serde::de::DeserializeOwned> Signed<T> {
    fn read(
        secret: &[u8],
        headers: &HeaderMap,
        body: &[u8],
        query: Option<&str>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Signed<T> {
        let sig_header = headers.get(signature::HEADER).and_then(|v| v.to_str().ok());
        let sig = signature::verify(secret, sig_header, body, now.timestamp());
        let key = headers
            .get("Idempotency-Key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let parsed: Result<T, _> = serde_json::from_slice(body);
        let admitted = admit(sig, key.is_some(), &parsed, query.unwrap_or(""));
        Signed {
            sig,
            key,
            body: parsed.ok(),
            admitted,
        }
    }

    /// The status and reason recorded for a refused request.
    fn refusal(&self) -> (Option<u16>, Option<String>) {
        match &self.admitted {
            Ok(_) => (None, None),
            Err((status, why)) => (Some(status.as_u16()), Some(why.clone())),
        }
    }
}

/// The number of this request among those with its Idempotency-Key (1 for the
/// first, or without a key), counted in `per_key`.
fn count_of_key(per_key: &mut HashMap<String, u32>, key: Option<&String>) -> u32 {
    match key {
        Some(k) => {
            let n = per_key.entry(k.clone()).or_insert(0);
            *n += 1;
            *n
        }
        None => 1,
    }
}

/// Whether a delivery is acceptable, and if so the faults to apply to it.
fn admit<T>(
    sig: signature::Verdict,
    has_key: bool,
    body: &Result<T, serde_json::Error>,
    query: &str,
) -> Result<Faults, (StatusCode, String)> {
    if sig != signature::Verdict::Valid {
        return Err((
            StatusCode::UNAUTHORIZED,
            format!("signature {}", sig.as_str()),
        ));
    }
    if !has_key {
        return Err((
            StatusCode::BAD_REQUEST,
            "missing Idempotency-Key".to_string(),
        ));
    }
    if let Err(e) = body {
        return Err((StatusCode::BAD_REQUEST, format!("body: {e}")));
    }
    Faults::parse(query).map_err(|e| (StatusCode::BAD_REQUEST, e))
}

async fn hook(
    State(shared): State<Arc<Shared>>,
    Path(subject_id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // Waits here for a slot when the connection cap is on: as if the platform had
    // not opened the connection yet.
    let connection = shared.connection(&headers).await;
    let now = chrono::Utc::now();
    let location = format!("/redirected/{subject_id}");
    let secret = shared
        .lock()
        .subject_secrets
        .get(&subject_id)
        .cloned()
        .unwrap_or_else(|| shared.secret.clone());
    let signed = Signed::<Body>::read(&secret, &headers, &body, query.as_deref(), now);
    let (status, error) = signed.refusal();
    let Signed {
        sig,
        key,
        body,
        admitted,
    } = signed;
    let (seq, index, delivery_no, fixed) = {
        let mut inner = shared.lock();
        let fixed = inner.fixed.contains(&subject_id);
        let delivery_no = count_of_key(&mut inner.per_key, key.as_ref());
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner.deliveries.push(Delivery {
            seq,
            subject_id,
            idempotency_key: key.clone(),
            delivery_no,
            item_id: body.as_ref().map(|b| b.item_id),
            batch_id: body.as_ref().map(|b| b.batch_id.clone()),
            body_subject_id: body.as_ref().map(|b| b.subject_id.clone()),
            attempt: body.as_ref().map(|b| b.attempt),
            channel: body.as_ref().and_then(|b| b.channel.clone()),
            data_sha256: body.as_ref().map(|b| data_digest(&b.data)),
            signature: sig.as_str().to_string(),
            status,
            received_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            error,
            invocation: connection.invocation(),
        });
        (seq, inner.deliveries.len() - 1, delivery_no, fixed)
    };
    let faults = match admitted {
        // A fixed receiver keeps its latency and answers.
        Ok(faults) if fixed => Faults {
            latency_ms: faults.latency_ms,
            group: faults.group,
            ..Faults::default()
        },
        Ok(faults) => faults,
        Err((status, why)) => return (status, why).into_response(),
    };
    let _group = faults
        .group
        .as_deref()
        .map(|g| GroupSlot::enter(&shared, g));
    let mut decision = faults.decide(key.as_deref().unwrap_or_default(), delivery_no);
    if faults.accept_per_s > 0 && !takes_one_more(&shared, faults.accept_per_s) {
        decision.status = 429;
    }
    if !decision.delay.is_zero() {
        // If the Worker times out and hangs up, hyper drops this future here and
        // the record keeps `status: None`, which is how a hang shows in /stats.
        tokio::time::sleep(decision.delay).await;
    }
    {
        let mut inner = shared.lock();
        // A /reset during the sleep removed the record; don't touch its successor.
        if let Some(d) = inner.deliveries.get_mut(index).filter(|d| d.seq == seq) {
            d.status = Some(decision.status);
        }
    }
    let status = StatusCode::from_u16(decision.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = if decision.body_bytes > 0 {
        (status, streamed_body(shared.clone(), decision.body_bytes)).into_response()
    } else {
        (status, Json(serde_json::json!({ "received": seq }))).into_response()
    };
    if decision.redirect {
        if let Ok(value) = location.parse() {
            response.headers_mut().insert("Location", value);
        }
    }
    if let Some(secs) = faults.retry_after.filter(|_| !status.is_success()) {
        response
            .headers_mut()
            .insert("Retry-After", axum::http::HeaderValue::from(secs));
    }
    response
}

/// Bytes per chunk of a streamed body.
const STREAM_CHUNK: usize = 64 * 1024;
/// What a streamed body says first; the rest is [`FILLER`].
const STREAM_START: &[u8] = b"not found, and here is why at length: ";
static FILLER: [u8; STREAM_CHUNK] = [b'x'; STREAM_CHUNK];

/// A body of `total` bytes (chunked: no Content-Length), made chunk by chunk as
/// the connection takes them and never held; each chunk is counted in
/// `answer_body_bytes` as it is handed over. Dropped, with the count stopping,
/// when the Worker hangs up.
fn streamed_body(shared: Arc<Shared>, total: u64) -> axum::body::Body {
    let chunks = futures::stream::unfold(0u64, move |sent| {
        let shared = shared.clone();
        async move {
            let left = total.checked_sub(sent).filter(|&n| n > 0)?;
            let chunk = if sent == 0 { STREAM_START } else { &FILLER[..] };
            let chunk = &chunk[..chunk.len().min(left as usize)];
            shared.lock().answer_body_bytes += chunk.len() as u64;
            let next = sent + chunk.len() as u64;
            Some((
                Ok::<_, std::convert::Infallible>(Bytes::from_static(chunk)),
                next,
            ))
        }
    });
    axum::body::Body::from_stream(chunks)
}

/// A completion callback: verified, recorded and answered like a delivery (the
/// faults of its URL, decided per Idempotency-Key and delivery number).
async fn callback(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let connection = shared.connection(&headers).await;
    let now = chrono::Utc::now();
    let signed = Signed::<Summary>::read(&shared.secret, &headers, &body, query.as_deref(), now);
    let (status, error) = signed.refusal();
    let Signed {
        sig,
        key,
        body: summary,
        admitted,
    } = signed;
    let (index, delivery_no) = {
        let mut inner = shared.lock();
        let delivery_no = count_of_key(&mut inner.callback_per_key, key.as_ref());
        let seq = inner.callbacks.len() as u64;
        inner.callbacks.push(CallbackRecord {
            seq,
            name,
            idempotency_key: key.clone(),
            delivery_no,
            signature: sig.as_str().to_string(),
            summary,
            status,
            received_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            error,
            invocation: connection.invocation(),
        });
        (inner.callbacks.len() - 1, delivery_no)
    };
    let faults = match admitted {
        Ok(faults) => faults,
        Err((status, why)) => return (status, why).into_response(),
    };
    let decision = faults.decide(key.as_deref().unwrap_or_default(), delivery_no);
    if !decision.delay.is_zero() {
        tokio::time::sleep(decision.delay).await;
    }
    if let Some(c) = shared.lock().callbacks.get_mut(index) {
        c.status = Some(decision.status);
    }
    let status = StatusCode::from_u16(decision.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(serde_json::json!({ "received": index }))).into_response()
}

/// The redirect target: whatever gets here followed a redirect it should not have.
async fn redirected(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.lock().redirect_hits += 1;
    StatusCode::OK
}

/// Registers per-subject signing secrets.
async fn secrets(
    State(shared): State<Arc<Shared>>,
    Json(secrets): Json<HashMap<String, String>>,
) -> StatusCode {
    let mut inner = shared.lock();
    for (subject, secret) in secrets {
        inner.subject_secrets.insert(subject, secret.into_bytes());
    }
    StatusCode::NO_CONTENT
}

/// Marks receivers as fixed: their later deliveries ignore the faults.
async fn fixed(State(shared): State<Arc<Shared>>, Json(subjects): Json<Vec<String>>) -> StatusCode {
    shared.lock().fixed.extend(subjects);
    StatusCode::NO_CONTENT
}

/// Turns the connection cap on (with its slots per invocation) or off. Requests
/// already holding or waiting for a slot keep the old cap; new ones get the new.
async fn connection_cap(
    State(shared): State<Arc<Shared>>,
    Json(cap): Json<ConnectionCap>,
) -> Response {
    if cap.per_invocation == Some(0) {
        return (StatusCode::BAD_REQUEST, "per_invocation must be at least 1").into_response();
    }
    let mut inner = shared.lock();
    inner.cap = cap.per_invocation;
    inner.slots.clear();
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
struct StatsQuery {
    #[serde(default)]
    deliveries: Option<String>,
}

async fn stats(State(shared): State<Arc<Shared>>, Query(q): Query<StatsQuery>) -> Json<Stats> {
    let want_list = matches!(q.deliveries.as_deref(), Some("1" | "true"));
    let inner = shared.lock();
    let mut stats = Stats {
        total: inner.deliveries.len() as u64,
        per_key: inner.per_key.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        duplicates: inner
            .per_key
            .values()
            .map(|&n| u64::from(n.saturating_sub(1)))
            .sum(),
        deliveries: want_list.then(|| inner.deliveries.clone()),
        callbacks: inner.callbacks.clone(),
        redirect_hits: inner.redirect_hits,
        connection_cap: inner.cap,
        cap_waits: inner.cap_waits,
        peak_in_flight: inner.peak_in_flight,
        answer_body_bytes: inner.answer_body_bytes,
        peak_in_flight_by_group: inner
            .groups
            .iter()
            .map(|(g, (_, peak))| (g.clone(), *peak))
            .collect(),
        ..Stats::default()
    };
    for d in &inner.deliveries {
        if d.signature == signature::Verdict::Valid.as_str() {
            stats.valid_signatures += 1;
        } else {
            stats.invalid_signatures += 1;
        }
        match d.status {
            Some(code) => *stats.by_status.entry(code.to_string()).or_insert(0) += 1,
            None => stats.unanswered += 1,
        }
    }
    Json(stats)
}

async fn reset(State(shared): State<Arc<Shared>>) -> StatusCode {
    let mut inner = shared.lock();
    inner.deliveries.clear();
    inner.per_key.clear();
    inner.callbacks.clear();
    inner.callback_per_key.clear();
    inner.redirect_hits = 0;
    inner.cap_waits = 0;
    inner.answer_body_bytes = 0;
    // Requests in flight keep their count; the peak starts again from them.
    inner.peak_in_flight = inner.in_flight.values().copied().max().unwrap_or(0);
    for (now, peak) in inner.groups.values_mut() {
        *peak = *now;
    }
    StatusCode::NO_CONTENT
}
