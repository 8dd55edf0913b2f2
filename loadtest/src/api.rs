//! Typed client of the Worker's HTTP API (the contract in the project brief), plus
//! the local-only cron trigger of `wrangler dev`.
//!
//! Responses are parsed strictly into the contract's shapes: a field with the
//! wrong type is reported as an error naming the route and quoting the body,
//! never papered over.

use anyhow::{anyhow, bail, Context, Result};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::time::Duration;

/// The cron expressions in wrangler.toml.
pub const DAILY_CRON: &str = "0 12 * * *";
pub const TICK_CRON: &str = "* * * * *";

/// Largest page (and `PUT /subjects` chunk) the API accepts.
pub const MAX_PAGE: usize = 1000;

/// Ids of batches and invocations. The contract does not fix their JSON type,
/// so both strings and integers are accepted and kept as text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Id(pub String);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Int(i64),
        }
        Ok(Id(match Raw::deserialize(d)? {
            Raw::Text(s) => s,
            Raw::Int(n) => n.to_string(),
        }))
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SubjectIn {
    pub id: String,
    pub kind: String,
    pub payload: Value,
    pub active: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Subject {
    pub id: String,
    pub kind: String,
    pub payload: Value,
    pub active: bool,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Deserialize)]
pub struct SubjectsPage {
    pub subjects: Vec<Subject>,
    pub next_after: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Batch {
    pub id: Id,
    pub key: Option<String>,
    pub status: String,
    pub total: u64,
    pub pending: u64,
    pub processing: u64,
    pub completed: u64,
    pub failed: u64,
    pub percent: f64,
    pub created_at: String,
    pub finished_at: Option<String>,
}

impl Batch {
    pub fn is_finished(&self) -> bool {
        self.status == "finished"
    }

    /// One-line progress, e.g. `pending 10 processing 25 completed 400 failed 3 (80.6%)`.
    pub fn progress(&self) -> String {
        format!(
            "pending {} processing {} completed {} failed {} ({:.1}%)",
            self.pending, self.processing, self.completed, self.failed, self.percent
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Item {
    pub id: i64,
    pub subject_id: String,
    pub kind: String,
    pub status: String,
    pub attempt: u32,
    pub max_attempts: u32,
    pub last_error: Option<String>,
    pub run_after: Option<String>,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ItemsPage {
    pub items: Vec<Item>,
    pub next_after: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Invocation {
    pub id: Id,
    pub trigger: String,
    pub started_at: String,
    pub elapsed_ms: f64,
    pub batch_ids: Vec<Id>,
    pub claimed: u64,
    pub completed: u64,
    pub retried: u64,
    pub failed: u64,
    pub lost_leases: u64,
    pub reaped: u64,
    pub subrequests: u64,
    pub subrequest_budget: u64,
    pub d1_statements: u64,
    pub d1_rows_written: u64,
}

/// A response kept raw, for the bad-input checks that look at status and shape.
#[derive(Debug)]
pub struct RawResponse {
    pub status: StatusCode,
    pub body: String,
}

impl RawResponse {
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
}

#[derive(Clone)]
pub struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
    /// Separate client: a scheduled run legitimately takes as long as the
    /// invocation deadline plus a job timeout.
    cron_http: reqwest::Client,
}

impl Api {
    pub fn new(base: &str, admin_token: &str) -> Result<Api> {
        Ok(Api {
            base: base.trim_end_matches('/').to_string(),
            token: admin_token.to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            cron_http: reqwest::Client::builder()
                .timeout(Duration::from_secs(180))
                .build()?,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
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
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method.clone(), &url);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.header("Content-Type", "application/json").body(body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = resp.status();
        let body = resp
            .text()
            .await
            .with_context(|| format!("reading {method} {url}"))?;
        Ok(RawResponse { status, body })
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
        let body = body.map(serde_json::to_string).transpose()?;
        let resp = self
            .raw(method.clone(), path, Some(&self.token), body)
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

    /// Upserts in chunks of at most `MAX_PAGE`; returns the sum of `upserted`.
    pub async fn put_subjects(&self, subjects: &[SubjectIn]) -> Result<u64> {
        #[derive(Serialize)]
        struct Req<'a> {
            subjects: &'a [SubjectIn],
        }
        #[derive(Deserialize)]
        struct Resp {
            upserted: u64,
        }
        let mut total = 0;
        for chunk in subjects.chunks(MAX_PAGE) {
            let (_, r): (_, Resp) = self
                .call(Method::PUT, "/subjects", Some(&Req { subjects: chunk }))
                .await?;
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
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.subjects_page(after.as_deref(), MAX_PAGE).await?;
            all.extend(page.subjects);
            match page.next_after {
                Some(next) if Some(&next) != after.as_ref() => after = Some(next),
                _ => return Ok(all),
            }
        }
    }

    /// `POST /batches`; `true` with the batch when it was created (201), `false`
    /// when the key already existed (200).
    pub async fn create_batch(&self, body: &Value) -> Result<(bool, Batch)> {
        let (status, batch) = self.call(Method::POST, "/batches", Some(body)).await?;
        match status {
            StatusCode::CREATED => Ok((true, batch)),
            StatusCode::OK => Ok((false, batch)),
            other => Err(anyhow!("POST /batches: expected 201 or 200, got {other}")),
        }
    }

    pub async fn batches(&self, limit: usize) -> Result<Vec<Batch>> {
        #[derive(Deserialize)]
        struct Resp {
            batches: Vec<Batch>,
        }
        Ok(self
            .get::<Resp>(&format!("/batches?limit={limit}"))
            .await?
            .batches)
    }

    pub async fn batch(&self, id: &Id) -> Result<Batch> {
        self.get(&format!("/batches/{}", encode(&id.0))).await
    }

    /// Every item of a batch (optionally of one status), following `next_after`.
    pub async fn all_items(&self, id: &Id, status: Option<&str>) -> Result<Vec<Item>> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut path = format!("/batches/{}/items?limit={MAX_PAGE}", encode(&id.0));
            if let Some(status) = status {
                path.push_str(&format!("&status={status}"));
            }
            if let Some(after) = &after {
                path.push_str(&format!("&after={}", encode(after)));
            }
            let page: ItemsPage = self.get(&path).await?;
            all.extend(page.items);
            match page.next_after {
                Some(next) if Some(&next) != after.as_ref() => after = Some(next),
                _ => return Ok(all),
            }
        }
    }

    pub async fn invocations(&self, limit: usize) -> Result<Vec<Invocation>> {
        #[derive(Deserialize)]
        struct Resp {
            invocations: Vec<Invocation>,
        }
        Ok(self
            .get::<Resp>(&format!("/invocations?limit={limit}"))
            .await?
            .invocations)
    }

    /// Runs the `scheduled` handler for `cron` through `wrangler dev`'s trigger
    /// route (`/cdn-cgi/local/scheduled`; wrangler still maps the older
    /// `/cdn-cgi/handler/scheduled` onto it). It answers only after the handler
    /// *and its `waitUntil` work* finished: 200 `ok`, or 500 `exception` when the
    /// handler threw. A deployed Worker has no such route.
    pub async fn fire_cron(&self, cron: &str) -> Result<()> {
        let url = format!("{}/cdn-cgi/local/scheduled", self.base);
        let resp = self
            .cron_http
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

/// Percent-encodes a path or query component (ids may contain anything).
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
               "processing":1,"completed":1,"failed":0,"percent":33.3,
               "created_at":"2026-01-01T12:00:00.000Z","finished_at":null}"#,
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
            body: r#"{"error":{"code":"bad_json","message":"no"}}"#.into(),
        };
        assert_eq!(ok.error_shape(), Some(("bad_json".into(), "no".into())));
        let bad = RawResponse {
            status: StatusCode::BAD_REQUEST,
            body: r#"{"error":"bad_json"}"#.into(),
        };
        assert_eq!(bad.error_shape(), None);
    }

    #[test]
    fn encodes_components() {
        assert_eq!(encode("daily:2026-01-01 x/y"), "daily%3A2026-01-01%20x%2Fy");
        assert_eq!(clip(&"a".repeat(400)).chars().count(), 301);
    }
}
