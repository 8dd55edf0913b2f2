//! Typed client of the Worker's HTTP API (the contract in the project brief), plus
//! the local-only cron trigger of `wrangler dev`.
//!
//! Responses are parsed strictly into the contract's shapes: a field with the
//! wrong type is reported as an error naming the route and quoting the body,
//! never papered over.

use anyhow::{anyhow, bail, Context, Result};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashSet;
use std::ops::Range;
use std::time::Duration;

pub use crate::runtime::answers::{
    Batch, CallRun, Callback, ChildResult, ChildrenProbe, Id, Item, ItemsPage, Probe, Refusal,
    Schedule, ServiceProbe, Subject, SubjectIn, SubjectsPage,
};
/// The trigger in wrangler.toml: every cron runs the same tick.
pub const TICK_CRON: &str = "* * * * *";
/// The old daily trigger's expression: now just another tick (the daily batch is
/// the `daily` schedule), fired by the re-fire checks to show it.
pub const DAILY_CRON: &str = "0 12 * * *";

/// Largest page (and `PUT /subjects` chunk) the API accepts.
pub const MAX_PAGE: usize = 1000;
/// Largest request body the API accepts (`PUT /subjects` is chunked under it).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The answer of a replay.
#[derive(Debug, Deserialize)]
struct Requeued {
    requeued: u64,
}

/// One `GET /invocations` row: the Worker's own type, so the two cannot drift.
pub use cron_fanout::core::model::Invocation;

/// A response kept raw, for the bad-input checks that look at status and shape.
#[derive(Debug)]
pub struct RawResponse {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl RawResponse {
    /// A response header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }

    /// `Some((code, message))` when the body is `{"error":{"code","message"}}`.
    pub fn error_shape(&self) -> Option<(String, String)> {
        let v = self.json()?;
        let e = v.get("error")?;
        Some((
            e.get("code")?.as_str()?.to_string(),
            e.get("message")?.as_str()?.to_string(),
        ))
    }

    /// Whether this is `status` with the JSON error `code`; else what came instead.
    pub fn refused(&self, status: StatusCode, code: &str) -> Result<(), String> {
        match self.error_shape() {
            Some((c, _)) if self.status == status && c == code => Ok(()),
            _ => Err(format!(
                "{} {}, want {status} {code}",
                self.status,
                clip(&self.body)
            )),
        }
    }
}

#[derive(Clone)]
pub struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
    /// Separate client for calls that legitimately run long: a scheduled run
    /// (invocation deadline plus a job timeout), a batch initialised over a
    /// million subjects, a probe of 100,000 calls.
    long_http: reqwest::Client,
}

impl Api {
    pub fn new(base: &str, admin_token: &str) -> Result<Api> {
        Ok(Api {
            base: base.trim_end_matches('/').to_string(),
            token: admin_token.to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            long_http: reqwest::Client::builder()
                .timeout(Duration::from_secs(180))
                .build()?,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The admin token (the browser tests type it into the sign-in form).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Sends any request and returns status and body as they are. `token: None`
    /// sends no Authorization header.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> Result<RawResponse> {
        self.send(&self.http, method, path, token, &[], body).await
    }

    /// A bodiless call with extra request headers and no token.
    pub async fn raw_with_headers(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<RawResponse> {
        self.send(&self.http, method, path, None, headers, None)
            .await
    }

    async fn send(
        &self,
        client: &reqwest::Client,
        method: Method,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> Result<RawResponse> {
        let url = format!("{}{path}", self.base);
        let mut req = client.request(method.clone(), &url);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(body) = body {
            req = req.header("Content-Type", "application/json").body(body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp
            .text()
            .await
            .with_context(|| format!("reading {method} {url}"))?;
        // Checked against /openapi.json at the end of the e2e run.
        let content_type = headers.get("Content-Type").and_then(|v| v.to_str().ok());
        super::openapi::record(method.as_str(), path, status.as_u16(), content_type, &body);
        Ok(RawResponse {
            status,
            headers,
            body,
        })
    }

    /// `raw` with this client's admin token.
    pub async fn admin_raw(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<RawResponse> {
        self.raw(method, path, Some(&self.token), body).await
    }

    /// An admin request whose answer must be 2xx and parse as `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<(StatusCode, T)> {
        self.call_with(&self.http, method, path, body).await
    }

    async fn call_with<T: DeserializeOwned>(
        &self,
        client: &reqwest::Client,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<(StatusCode, T)> {
        let body = body.map(serde_json::to_string).transpose()?;
        let resp = self
            .send(client, method.clone(), path, Some(&self.token), &[], body)
            .await?;
        if !resp.status.is_success() {
            bail!("{method} {path}: {} {}", resp.status, clip(&resp.body));
        }
        let parsed = serde_json::from_str(&resp.body)
            .with_context(|| format!("{method} {path}: unexpected body {}", clip(&resp.body)))?;
        Ok((resp.status, parsed))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        Ok(self.call(Method::GET, path, None::<&()>).await?.1)
    }

    pub async fn health(&self) -> Result<()> {
        let resp = self.raw(Method::GET, "/health", None, None).await?;
        match resp.json() {
            Some(v) if resp.status == StatusCode::OK && v["ok"] == Value::Bool(true) => Ok(()),
            _ => bail!("GET /health: {} {}", resp.status, clip(&resp.body)),
        }
    }

    /// Upserts in chunks of at most `MAX_PAGE` subjects and `MAX_BODY_BYTES`;
    /// returns the sum of `upserted`.
    pub async fn put_subjects<S: Serialize>(&self, subjects: &[S]) -> Result<u64> {
        #[derive(Deserialize)]
        struct Resp {
            upserted: u64,
        }
        let encoded = subjects
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<String>, _>>()?;
        let sizes: Vec<usize> = encoded.iter().map(String::len).collect();
        let mut total = 0;
        for range in chunk_ranges(&sizes, MAX_PAGE, MAX_BODY_BYTES)? {
            let body = format!(
                "{SUBJECTS_OPEN}{}{SUBJECTS_CLOSE}",
                encoded[range].join(",")
            );
            let resp = self.admin_raw(Method::PUT, "/subjects", Some(body)).await?;
            if !resp.status.is_success() {
                bail!("PUT /subjects: {} {}", resp.status, clip(&resp.body));
            }
            let r: Resp = serde_json::from_str(&resp.body)
                .with_context(|| format!("PUT /subjects: unexpected body {}", clip(&resp.body)))?;
            total += r.upserted;
        }
        Ok(total)
    }

    pub async fn subjects_page(&self, after: Option<&str>, limit: usize) -> Result<SubjectsPage> {
        let mut path = format!("/subjects?limit={limit}");
        if let Some(after) = after {
            path.push_str(&format!("&after={}", encode(after)));
        }
        self.get(&path).await
    }

    /// Every subject, following `next_after`.
    pub async fn all_subjects(&self) -> Result<Vec<Subject>> {
        self.all_pages(&format!("/subjects?limit={MAX_PAGE}"), "subjects")
            .await
    }

    /// Every row of a listing paged by `after`: `path` (with its other query
    /// parameters) is fetched with `&after=<next_after>` until a page has none.
    /// The list `list` of `GET path`'s answer (one page).
    async fn list<T: DeserializeOwned>(&self, path: &str, list: &str) -> Result<Vec<T>> {
        let mut answer: Value = self.get(path).await?;
        take_field(&mut answer, path, list)
    }

    async fn all_pages<T: DeserializeOwned>(&self, path: &str, list: &str) -> Result<Vec<T>> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut page_path = path.to_string();
            if let Some(after) = &after {
                page_path.push_str(&format!("&after={}", encode(after)));
            }
            let mut page: Value = self.get(&page_path).await?;
            let rows: Vec<T> = take_field(&mut page, &page_path, list)?;
            let next: Option<String> = take_field(&mut page, &page_path, "next_after")?;
            all.extend(rows);
            match next {
                Some(next) if Some(&next) != after.as_ref() => after = Some(next),
                _ => return Ok(all),
            }
        }
    }

    /// `POST /batches`; `true` with the batch when it was created (201), `false`
    /// when the key already existed (200).
    /// Uses the long-timeout client: initialising over every subject is O(N).
    pub async fn create_batch(&self, body: &Value) -> Result<(bool, Batch)> {
        let (status, batch) = self
            .call_with(&self.long_http, Method::POST, "/batches", Some(body))
            .await?;
        match status {
            StatusCode::CREATED => Ok((true, batch)),
            StatusCode::OK => Ok((false, batch)),
            other => Err(anyhow!("POST /batches: expected 201 or 200, got {other}")),
        }
    }

    /// `PUT /schedules/{id}`: `true` with the schedule when it was created (201),
    /// `false` when it replaced one (200).
    pub async fn put_schedule(&self, id: &str, body: &Value) -> Result<(bool, Schedule)> {
        let path = format!("/schedules/{}", encode(id));
        let (status, schedule) = self.call(Method::PUT, &path, Some(body)).await?;
        match status {
            StatusCode::CREATED => Ok((true, schedule)),
            StatusCode::OK => Ok((false, schedule)),
            other => Err(anyhow!("PUT {path}: expected 201 or 200, got {other}")),
        }
    }

    pub async fn schedule(&self, id: &str) -> Result<Schedule> {
        self.get(&format!("/schedules/{}", encode(id))).await
    }

    /// Every schedule, following `next_after`.
    pub async fn all_schedules(&self) -> Result<Vec<Schedule>> {
        self.all_pages(&format!("/schedules?limit={MAX_PAGE}"), "schedules")
            .await
    }

    pub async fn delete_schedule(&self, id: &str) -> Result<()> {
        let path = format!("/schedules/{}", encode(id));
        self.call::<Value>(Method::DELETE, &path, None::<&()>)
            .await?;
        Ok(())
    }

    pub async fn delete_subject(&self, id: &str) -> Result<()> {
        let path = format!("/subjects/{}", encode(id));
        self.call::<Value>(Method::DELETE, &path, None::<&()>)
            .await?;
        Ok(())
    }

    pub async fn batches(&self, limit: usize) -> Result<Vec<Batch>> {
        self.list(&format!("/batches?limit={limit}"), "batches")
            .await
    }

    pub async fn batch(&self, id: &Id) -> Result<Batch> {
        self.get(&format!("/batches/{}", encode(&id.0))).await
    }

    /// `POST /batches/{id}/<action>` (`pause`, `resume`, `cancel`): the batch after it.
    pub async fn control(&self, id: &Id, action: &str) -> Result<Batch> {
        let path = format!("/batches/{}/{action}", encode(&id.0));
        Ok(self.call(Method::POST, &path, None::<&()>).await?.1)
    }

    /// `POST /batches/{id}/retry` with `body`: how many failed items were requeued.
    pub async fn retry_batch(&self, id: &Id, body: &Value) -> Result<u64> {
        let path = format!("/batches/{}/retry", encode(&id.0));
        let (_, answer): (_, Requeued) = self.call(Method::POST, &path, Some(body)).await?;
        Ok(answer.requeued)
    }

    /// `POST /items/{id}/retry`: 1 when the failed item was requeued, 0 when it was
    /// pending or in flight already.
    pub async fn retry_item(&self, item_id: i64) -> Result<u64> {
        let path = format!("/items/{item_id}/retry");
        let (_, answer): (_, Requeued) = self.call(Method::POST, &path, None::<&()>).await?;
        Ok(answer.requeued)
    }

    /// Every item of a batch (optionally of one status), following `next_after`.
    pub async fn all_items(&self, id: &Id, status: Option<&str>) -> Result<Vec<Item>> {
        let mut path = format!("/batches/{}/items?limit={MAX_PAGE}", encode(&id.0));
        if let Some(status) = status {
            path.push_str(&format!("&status={status}"));
        }
        self.all_pages(&path, "items").await
    }

    pub async fn invocations(&self, limit: usize) -> Result<Vec<Invocation>> {
        self.list(&format!("/invocations?limit={limit}"), "invocations")
            .await
    }

    /// `POST /probe`: `calls` SELF round trips from one invocation.
    pub async fn probe(&self, calls: u64, concurrency: u64) -> Result<Probe> {
        let body = serde_json::json!({"calls": calls, "concurrency": concurrency});
        Ok(self
            .call_with(&self.long_http, Method::POST, "/probe", Some(&body))
            .await?
            .1)
    }

    /// `POST /probe` in `service` mode: `calls` runs of a `service` item calling
    /// `binding`, `concurrency` in flight, `via` `drain` or `self`.
    pub async fn probe_service(
        &self,
        binding: &str,
        calls: u64,
        concurrency: u64,
        via: &str,
    ) -> Result<ServiceProbe> {
        let body = serde_json::json!({
            "mode": "service", "service": binding, "calls": calls,
            "concurrency": concurrency, "via": via,
        });
        Ok(self
            .call_with(&self.long_http, Method::POST, "/probe", Some(&body))
            .await?
            .1)
    }

    /// `POST /probe` in `connections` or `cpu` mode (`body` carries the mode).
    pub async fn probe_children(&self, body: &Value) -> Result<ChildrenProbe> {
        Ok(self
            .call_with(&self.long_http, Method::POST, "/probe", Some(body))
            .await?
            .1)
    }

    /// Ids of the latest 1000 invocations: what a run was preceded by, so that
    /// its own invocations can be told apart afterwards.
    pub async fn invocation_ids(&self) -> Result<HashSet<i64>> {
        Ok(self
            .invocations(1000)
            .await?
            .into_iter()
            .map(|i| i.id)
            .collect())
    }

    /// The invocations (of the latest 1,000) whose ids are not in `known`
    /// ([`Api::invocation_ids`] taken before a run): the run's own, newest first.
    pub async fn invocations_since(&self, known: &HashSet<i64>) -> Result<Vec<Invocation>> {
        let mut all = self.invocations(1000).await?;
        all.retain(|i| !known.contains(&i.id));
        Ok(all)
    }

    /// Runs the `scheduled` handler for `cron` through `wrangler dev`'s trigger
    /// route (`/cdn-cgi/local/scheduled`; wrangler still maps the older
    /// `/cdn-cgi/handler/scheduled` onto it). It answers only after the handler
    /// *and its `waitUntil` work* finished: 200 `ok`, or 500 `exception` when the
    /// handler threw. A deployed Worker has no such route.
    pub async fn fire_cron(&self, cron: &str) -> Result<()> {
        let url = format!("{}/cdn-cgi/local/scheduled", self.base);
        let resp = self
            .long_http
            .get(&url)
            .query(&[("cron", cron)])
            .send()
            .await
            .with_context(|| format!("firing cron `{cron}`"))?;
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        if status != StatusCode::OK {
            bail!(
                "cron `{cron}`: scheduled handler answered {status} {}",
                clip(&body)
            );
        }
        Ok(())
    }
}

/// `{"subjects":[` ... `]}` around the comma-joined subjects of one chunk.
const SUBJECTS_OPEN: &str = r#"{"subjects":["#;
const SUBJECTS_CLOSE: &str = "]}";

/// Splits encoded subjects (their byte sizes in order) into consecutive ranges of
/// at most `max_count` whose request body stays within `max_bytes`. Errors when
/// one subject alone does not fit.
pub fn chunk_ranges(
    sizes: &[usize],
    max_count: usize,
    max_bytes: usize,
) -> Result<Vec<Range<usize>>> {
    let envelope = SUBJECTS_OPEN.len() + SUBJECTS_CLOSE.len();
    let mut ranges = Vec::new();
    let mut start = 0;
    let mut bytes = envelope;
    for (i, &size) in sizes.iter().enumerate() {
        if envelope + size > max_bytes {
            bail!("subject #{i} alone is {size} bytes, over the {max_bytes}-byte body limit");
        }
        let count = i - start;
        // `+ 1`: every subject after the first of a chunk costs a comma.
        if count > 0 && (count == max_count || bytes + 1 + size > max_bytes) {
            ranges.push(start..i);
            start = i;
            bytes = envelope;
        }
        bytes += size + usize::from(i > start);
    }
    if start < sizes.len() {
        ranges.push(start..sizes.len());
    }
    Ok(ranges)
}

/// Percent-encodes a path or query component (ids may contain anything).
/// Field `name` of `GET path`'s answer, taken out of it.
fn take_field<T: DeserializeOwned>(answer: &mut Value, path: &str, name: &str) -> Result<T> {
    serde_json::from_value(answer[name].take()).with_context(|| format!("GET {path}: \"{name}\""))
}

pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// At most 300 characters of a body, for error messages.
pub fn clip(body: &str) -> String {
    let mut s: String = body.chars().take(300).collect();
    if s.len() < body.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_accept_text_and_integers() {
        let ids: Vec<Id> = serde_json::from_str(r#"["b-1", 42]"#).unwrap();
        assert_eq!(ids, [Id("b-1".into()), Id("42".into())]);
    }

    #[test]
    fn batch_parses_contract_shape() {
        let b: Batch = serde_json::from_str(
            r#"{"id":"x","key":"daily:2026-01-01","status":"running","total":3,"pending":1,
               "processing":1,"completed":1,"failed":0,"cancelled":0,"percent":33.3,
               "created_at":"2026-01-01T12:00:00.000Z","finished_at":null,
               "schedule_id":"daily"}"#,
        )
        .unwrap();
        assert!(!b.is_finished());
        assert_eq!(
            b.progress(),
            "pending 1 processing 1 completed 1 failed 0 (33.3%)"
        );
    }

    #[test]
    fn error_shape_is_recognised() {
        let ok = RawResponse {
            status: StatusCode::BAD_REQUEST,
            headers: Default::default(),
            body: r#"{"error":{"code":"bad_json","message":"no"}}"#.into(),
        };
        assert_eq!(ok.error_shape(), Some(("bad_json".into(), "no".into())));
        let bad = RawResponse {
            status: StatusCode::BAD_REQUEST,
            headers: Default::default(),
            body: r#"{"error":"bad_json"}"#.into(),
        };
        assert_eq!(bad.error_shape(), None);
        // `refused`: the status and the code, both.
        assert_eq!(ok.refused(StatusCode::BAD_REQUEST, "bad_json"), Ok(()));
        assert!(ok.refused(StatusCode::CONFLICT, "bad_json").is_err());
        assert!(ok.refused(StatusCode::BAD_REQUEST, "other").is_err());
        assert!(bad.refused(StatusCode::BAD_REQUEST, "bad_json").is_err());
    }

    #[test]
    fn chunks_respect_count_and_bytes() {
        let envelope = SUBJECTS_OPEN.len() + SUBJECTS_CLOSE.len();
        assert_eq!(
            chunk_ranges(&[], 3, 100).unwrap(),
            Vec::<Range<usize>>::new()
        );
        assert_eq!(chunk_ranges(&[1; 7], 3, 1000).unwrap(), [0..3, 3..6, 6..7]);
        // Two 10-byte subjects plus a comma fit exactly; a third does not.
        let max = envelope + 21;
        assert_eq!(
            chunk_ranges(&[10; 5], 100, max).unwrap(),
            [0..2, 2..4, 4..5]
        );
        assert!(chunk_ranges(&[10, 50], 100, max).is_err());
        assert!(chunk_ranges(&[50], 100, max).is_err());
        // The real body is what the ranges promise.
        let sizes = [30, 40, 50, 60];
        for r in chunk_ranges(&sizes, 10, envelope + 100).unwrap() {
            let len = envelope + sizes[r.clone()].iter().sum::<usize>() + r.len() - 1;
            assert!(len <= envelope + 100, "{r:?} is {len} bytes");
        }
    }

    #[test]
    fn encodes_components() {
        assert_eq!(encode("daily:2026-01-01 x/y"), "daily%3A2026-01-01%20x%2Fy");
        assert_eq!(clip(&"a".repeat(400)).chars().count(), 301);
    }
}
