//! The Worker's answers and request bodies as the harness reads them (the
//! contract's shapes): ids, subjects, schedules, batches with their callbacks,
//! items, pages, and the `POST /probe` results. The client is `api`, which
//! names them too.

use anyhow::Result;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

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
    /// `None`: the Worker's default (`"default"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `None`: the Worker's default (`"UTC"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Subject {
    pub id: String,
    pub kind: String,
    pub payload: Value,
    pub active: bool,
    pub group: String,
    pub timezone: String,
    pub created_at: String,
    pub updated_at: String,
}

/// A schedule as `PUT`/`GET /schedules` answer it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub id: String,
    pub cron: Option<String>,
    pub every_seconds: Option<u64>,
    pub at: Option<String>,
    pub timezone: String,
    pub group: Option<String>,
    pub jitter_seconds: u64,
    pub enabled: bool,
    pub next_fire_at: Option<String>,
    pub last_fired_at: Option<String>,
    pub last_batch_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// The priority of the batches it fires.
    #[serde(default)]
    pub priority: i64,
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
    pub cancelled: u64,
    pub percent: f64,
    #[serde(default)]
    pub rate_per_min: Option<f64>,
    #[serde(default)]
    pub eta: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
    /// The schedule that fired it (`None`: ad-hoc).
    pub schedule_id: Option<String>,
    /// Where its completion callback goes (`{"url": …}`), if anywhere.
    #[serde(default)]
    pub on_finish: Option<Value>,
    /// Its completion callback's delivery (`None` without `on_finish`).
    #[serde(default)]
    pub callback: Option<Callback>,
    /// -10 to 10: claimed before batches of lower priority.
    #[serde(default)]
    pub priority: i64,
}

/// A batch's completion callback as `GET /batches/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Callback {
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    pub attempts: u32,
    pub last_error: Option<String>,
}

impl Batch {
    pub fn is_finished(&self) -> bool {
        self.status == "finished"
    }

    /// Finished, or cancelled with nothing left in flight: `finished_at` is set.
    pub fn has_ended(&self) -> bool {
        self.finished_at.is_some()
    }

    /// One-line progress, e.g. `pending 10 processing 25 completed 400 failed 3 (80.6%)`
    /// (and `cancelled n` when there are any).
    pub fn progress(&self) -> String {
        let cancelled = if self.cancelled > 0 {
            format!(" cancelled {}", self.cancelled)
        } else {
            String::new()
        };
        format!(
            "pending {} processing {} completed {} failed {}{cancelled} ({:.1}%)",
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
    /// Per-channel receipts (multi-channel items); `None` for other kinds.
    #[serde(default)]
    pub receipts: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct ItemsPage {
    pub items: Vec<Item>,
    pub next_after: Option<String>,
}
/// The `POST /probe` answer: N `GET /health` calls through SELF from one invocation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Probe {
    pub calls: u64,
    pub concurrency: u64,
    pub ok: u64,
    pub failed: u64,
    pub first_failed_call: Option<u64>,
    /// Error message -> how many calls failed with it.
    pub errors: BTreeMap<String, u64>,
    pub elapsed_ms: f64,
    pub calls_per_second: f64,
    /// The first call that threw (no answer: a refusal), 0-based, and its message.
    #[serde(default)]
    pub first_refusal: Option<Refusal>,
    /// Every call's result in call order, as runs of equal results.
    #[serde(default)]
    pub runs: Vec<CallRun>,
}

/// The first call of a self-call probe that threw instead of answering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub call: u64,
    pub message: String,
}

/// Calls `from` to `from + count - 1` of a self-call probe, all with one result:
/// `ok`, `threw` (with the message) or `status` (`HTTP <code>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRun {
    pub from: u64,
    pub count: u64,
    pub result: String,
    pub message: Option<String>,
}

/// The `POST /probe` answer in `service` mode: a `service` item's run made
/// `calls` times `via` one path (`drain`: by the caller itself; `self`: through a
/// SELF child), counted by outcome (`errors`: each other outcome's text and count).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceProbe {
    pub service: String,
    pub via: String,
    pub calls: u64,
    pub concurrency: u64,
    pub done: u64,
    pub failed: u64,
    pub errors: BTreeMap<String, u64>,
    pub elapsed_ms: f64,
    pub calls_per_second: f64,
}

/// The `POST /probe` answer in `connections` or `cpu` mode: children started at
/// once, each timed by the caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildrenProbe {
    pub mode: String,
    pub children: u64,
    pub failed: u64,
    /// From the first child sent to the last answer, read by the caller.
    pub elapsed_ms: f64,
    pub results: Vec<ChildResult>,
}

/// One child of a `connections` or `cpu` probe.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildResult {
    pub child: u64,
    pub ok: bool,
    /// When its answer reached the caller, from the start.
    pub answered_ms: f64,
    /// The child's own timing of its task (a CPU burn reads 0 on the platform,
    /// whose clock only moves on I/O).
    #[serde(default)]
    pub own_ms: Option<f64>,
    /// The slow URL's status (`connections`).
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub error: Option<String>,
}
