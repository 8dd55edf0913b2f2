//! The sink as its readers see it over HTTP: what it records (deliveries,
//! callbacks, their summaries, the totals in `Stats`), the bodies of its control
//! routes, and the client that reads and steers it (`SinkClient`), in-process
//! or external alike.

use crate::sink::faults::Faults;
use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// One delivery as the sink saw it. Fields from the body are `None` when the
/// body could not be read as the delivery JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    /// Arrival order, never reused (not even after `/reset`).
    pub seq: u64,
    /// From the URL path: who the Worker meant to notify.
    pub subject_id: String,
    pub idempotency_key: Option<String>,
    /// 1 for the first delivery of this Idempotency-Key, 2 for the next...
    pub delivery_no: u32,
    pub item_id: Option<i64>,
    pub batch_id: Option<String>,
    /// The body's own `subject_id`, to compare with the path's.
    pub body_subject_id: Option<String>,
    pub attempt: Option<u32>,
    /// The channel of a multi-channel item's delivery (`None` for a webhook's).
    #[serde(default)]
    pub channel: Option<String>,
    /// SHA-256 (hex) of the body's `data`, re-serialised canonically: compared with
    /// the subject's payload to prove it arrived intact (`data_digest`).
    #[serde(default)]
    pub data_sha256: Option<String>,
    /// `valid`, `missing`, `malformed`, `stale` or `mismatch`.
    pub signature: String,
    /// What the sink answered; `None` while it is still sleeping, or for good when
    /// the Worker gave up first (its timeout dropped the connection).
    pub status: Option<u16>,
    /// RFC 3339 UTC with milliseconds.
    pub received_at: String,
    /// Why the sink refused the delivery, if it did.
    pub error: Option<String>,
    /// Its `Fanout-Invocation` header: the invocation that dispatched it.
    #[serde(default)]
    pub invocation: Option<String>,
}

/// The `GET /stats` answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub total: u64,
    pub valid_signatures: u64,
    pub invalid_signatures: u64,
    /// Deliveries with no answer yet (or never: the Worker hung up).
    pub unanswered: u64,
    /// Answers by status code, e.g. `{"200": 480, "503": 20}`.
    pub by_status: BTreeMap<String, u64>,
    /// Deliveries per Idempotency-Key.
    pub per_key: BTreeMap<String, u32>,
    /// Deliveries beyond the first, summed over keys.
    pub duplicates: u64,
    /// Requests that reached the redirect target (any method, signed or not).
    #[serde(default)]
    pub redirect_hits: u64,
    /// Every record, oldest first; only with `?deliveries=1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliveries: Option<Vec<Delivery>>,
    /// Every completion callback received, oldest first (always: they are few).
    #[serde(default)]
    pub callbacks: Vec<CallbackRecord>,
    /// The connection cap per invocation, when it is on.
    #[serde(default)]
    pub connection_cap: Option<u32>,
    /// Requests that found their invocation's slots all taken and waited.
    #[serde(default)]
    pub cap_waits: u64,
    /// The most requests of one invocation handled at once (with the header only;
    /// counted with the cap on or off).
    #[serde(default)]
    pub peak_in_flight: u32,
    /// Bytes of `body_mib` bodies handed to their connections so far: what the
    /// Worker took (and its connection buffered) before it hung up.
    #[serde(default)]
    pub answer_body_bytes: u64,
    /// Per `group` fault: the most of its requests handled at once (since the
    /// last `/reset`, which starts each from what is in flight then).
    #[serde(default)]
    pub peak_in_flight_by_group: BTreeMap<String, u32>,
}

/// One completion callback as the sink saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallbackRecord {
    /// Arrival order among callbacks.
    pub seq: u64,
    /// From the URL path (`/callback/<name>`).
    pub name: String,
    pub idempotency_key: Option<String>,
    /// 1 for the first callback of this Idempotency-Key, 2 for the next...
    pub delivery_no: u32,
    /// `valid`, `missing`, `malformed`, `stale` or `mismatch`.
    pub signature: String,
    /// The body, when it is exactly the documented summary.
    pub summary: Option<Summary>,
    /// What the sink answered (`None`: still sleeping, or the Worker hung up).
    pub status: Option<u16>,
    pub received_at: String,
    pub error: Option<String>,
    /// Its `Fanout-Invocation` header.
    #[serde(default)]
    pub invocation: Option<String>,
}

/// The body of a completion callback: exactly these fields (docs/api.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub batch_id: String,
    pub key: String,
    pub status: String,
    pub total: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub created_at: String,
    pub finished_at: String,
}

/// The JSON body the Worker sends.
/// The `POST /connection-cap` body: slots per invocation, or `null` for no cap.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectionCap {
    pub per_invocation: Option<u32>,
}
/// Reads a sink (in-process or external) over HTTP.
#[derive(Clone)]
pub struct SinkClient {
    base: String,
    http: reqwest::Client,
}

impl SinkClient {
    pub fn new(base: &str) -> SinkClient {
        SinkClient {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::new(),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Base URL the Worker posts to (`<base>/hook/<subject>?<faults>`).
    pub fn hook_url(&self, subject_id: &str, faults: &Faults) -> String {
        let q = faults.to_query();
        let sep = if q.is_empty() { "" } else { "?" };
        format!("{}/hook/{subject_id}{sep}{q}", self.base)
    }

    /// Where a batch's completion callback goes (`<base>/callback/<name>?<faults>`).
    pub fn callback_url(&self, name: &str, faults: &Faults) -> String {
        let q = faults.to_query();
        let sep = if q.is_empty() { "" } else { "?" };
        format!("{}/callback/{name}{sep}{q}", self.base)
    }

    pub async fn stats(&self, with_deliveries: bool) -> Result<Stats> {
        let query = if with_deliveries { "?deliveries=1" } else { "" };
        self.get(&format!("/stats{query}")).await
    }

    /// Every delivery the sink recorded.
    pub async fn deliveries(&self) -> Result<Vec<Delivery>> {
        Ok(self.stats(true).await?.deliveries.unwrap_or_default())
    }

    /// Registers subjects whose deliveries are signed with their own secret.
    pub async fn set_subject_secrets(&self, secrets: &HashMap<String, String>) -> Result<()> {
        self.post("/secrets", secrets).await
    }

    /// Turns the connection cap emulation on (`Some(slots)` per invocation) or off.
    pub async fn set_connection_cap(&self, per_invocation: Option<u32>) -> Result<()> {
        self.post("/connection-cap", &ConnectionCap { per_invocation })
            .await
    }

    /// Fixes these subjects' receivers: their deliveries answer 200 from now on.
    pub async fn fix(&self, subjects: &[String]) -> Result<()> {
        self.post("/fixed", &subjects).await
    }

    pub async fn reset(&self) -> Result<()> {
        let url = format!("{}/reset", self.base);
        answered(self.http.post(&url), &format!("POST {url}")).await?;
        Ok(())
    }

    /// `POST path` with `body` as JSON, answered 2xx.
    pub(crate) async fn post(&self, path: &str, body: &impl Serialize) -> Result<()> {
        let url = format!("{}{path}", self.base);
        answered(self.http.post(&url).json(body), &format!("POST {url}")).await?;
        Ok(())
    }

    /// `GET path`'s JSON answer, answered 2xx.
    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = format!("{}{path}", self.base);
        answered(self.http.get(&url), &format!("GET {url}"))
            .await?
            .json()
            .await
            .with_context(|| format!("reading {url}"))
    }
}

/// Sends `request` (`what`, in errors); its answer must be 2xx.
async fn answered(request: reqwest::RequestBuilder, what: &str) -> Result<reqwest::Response> {
    request
        .send()
        .await
        .with_context(|| what.to_string())?
        .error_for_status()
        .with_context(|| what.to_string())
}
