//! Items, subjects and timeline buckets as the store reads them and the API
//! lists them.

use serde::{Deserialize, Serialize};

/// An item as listed by `GET /batches/{id}/items`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemRow {
    pub id: i64,
    pub subject_id: String,
    pub kind: String,
    pub status: String,
    pub attempt: i64,
    pub max_attempts: i64,
    pub last_error: Option<String>,
    pub run_after: i64,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    /// Per-channel receipts as stored (`core::receipts`), for kinds with channels.
    #[serde(default)]
    pub receipts: Option<String>,
    /// The limit keys it holds as stored (a JSON array's text), `None` for none.
    #[serde(default)]
    pub limits: Option<String>,
}

/// One bucket of a batch's timeline: items ended in the invocations that started
/// in it (`bucket` is its start, ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineBucket {
    pub bucket: i64,
    pub completed: i64,
    pub failed: i64,
}

/// An item and its batch's status, what a replay of it is decided on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemRef {
    pub id: i64,
    pub batch_id: String,
    pub status: String,
    pub batch_status: String,
}

/// A subject as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectRow {
    pub id: String,
    pub kind: String,
    pub payload: String,
    pub active: i64,
    /// What a schedule's `group` selects (`"default"` unless set).
    pub group_name: String,
    /// IANA zone read by schedules on `"timezone": "subject"` (`"UTC"` unless set).
    pub timezone: String,
    pub created_at: i64,
    pub updated_at: i64,
    /// The limit keys it holds (its own and its kind's) as stored (a JSON
    /// array's text), `None` for none.
    #[serde(default)]
    pub limits: Option<String>,
}
