//! Schedules: cron, interval and one-off schedules, in a named time zone
//! or in each subject's own, fired by the minute tick. Pure: `now`, the zones in use
//! and fresh ids are arguments; `store` runs the SQL, `edge` supplies the clock.
//! It imports `batch` (a schedule's callback) and `core`'s top; never the drain or
//! flow control.
//!
//! - [`body`]: `PUT /schedules/{id}` parsed and validated into a [`ScheduleSpec`];
//! - [`cron`]: Cloudflare's cron syntax on `croner`;
//! - [`zone`]: IANA zones and the local-time (DST) rule;
//! - [`occurrence`]: when a schedule fires ([`ScheduleSpec::first_after`],
//!   [`ScheduleSpec::latest_at_or_before`]);
//! - [`key`]: batch keys and the keys ad-hoc batches may not use;
//! - [`jitter`]: per-(fire, subject) start offsets, twin of the fire SQL;
//! - [`fill`]: a batch filled from subjects in bounded pages;
//! - [`plan`]: a due schedule row → the one fire the store applies;
//! - [`tick`]: one tick's page of due rows → plans, and what became of each fire.

pub mod body;
pub mod cron;
pub mod fill;
pub mod jitter;
pub mod key;
pub mod occurrence;
pub mod plan;
pub mod tick;
pub mod zone;

use std::fmt;

use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use self::cron::CronExpr;
use self::zone::{parse_zone, SUBJECT_ZONE};
use crate::core::batch::callback::OnFinish;
use crate::core::time::rfc3339;

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Timing {
    Cron(CronExpr),
    /// Every `seconds`, aligned to the Unix epoch.
    Every {
        seconds: i64,
    },
    /// Once, at this instant (ms).
    At {
        at: i64,
    },
}

/// Whose clock a cron reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    Named(Tz),
    /// Each subject's own `timezone` (crons that fire at most once a day only).
    Subject,
}

impl Zone {
    pub fn fixed(&self) -> Option<Tz> {
        match self {
            Zone::Named(tz) => Some(*tz),
            Zone::Subject => None,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Zone::Named(tz) => tz.name(),
            Zone::Subject => SUBJECT_ZONE,
        }
    }
}

/// A validated schedule (from a request body or re-read from its row).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSpec {
    pub timing: Timing,
    pub zone: Zone,
    /// Only subjects of this group; `None`: every active subject.
    pub group: Option<String>,
    pub jitter_seconds: i64,
    pub enabled: bool,
    /// The priority of the batches it fires (-10 to 10).
    pub priority: i64,
}

impl ScheduleSpec {
    pub fn cron_text(&self) -> Option<&str> {
        match &self.timing {
            Timing::Cron(cron) => Some(cron.text()),
            _ => None,
        }
    }

    pub fn every_seconds(&self) -> Option<i64> {
        match self.timing {
            Timing::Every { seconds } => Some(seconds),
            _ => None,
        }
    }

    pub fn at(&self) -> Option<i64> {
        match self.timing {
            Timing::At { at } => Some(at),
            _ => None,
        }
    }

    /// Re-read a stored row. Rows are validated before they are written, so an
    /// error means the row was edited by hand or the tz database dropped a name.
    pub fn from_row(row: &ScheduleRow) -> Result<ScheduleSpec, ScheduleError> {
        let bad = |what: String| ScheduleError {
            schedule_id: row.id.clone(),
            what,
        };
        let timing = match (&row.cron, row.every_seconds, row.at) {
            (Some(cron), None, None) => {
                Timing::Cron(CronExpr::parse(cron).map_err(|e| bad(format!("cron: {e}")))?)
            }
            (None, Some(seconds), None) => Timing::Every { seconds },
            (None, None, Some(at)) => Timing::At { at },
            _ => return Err(bad("not exactly one of cron, every_seconds, at".into())),
        };
        let zone = if row.timezone == SUBJECT_ZONE {
            Zone::Subject
        } else {
            Zone::Named(
                parse_zone(&row.timezone)
                    .ok_or_else(|| bad(format!("unknown timezone {:?}", row.timezone)))?,
            )
        };
        Ok(ScheduleSpec {
            timing,
            zone,
            group: row.group_name.clone(),
            jitter_seconds: row.jitter_seconds,
            enabled: row.enabled != 0,
            priority: row.priority,
        })
    }
}

/// A stored schedule row that can no longer be read as a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleError {
    pub schedule_id: String,
    pub what: String,
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "schedule {:?}: {}", self.schedule_id, self.what)
    }
}

/// A schedule as stored (`schedules` table, migrations/0002_schedules.sql).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRow {
    pub id: String,
    pub cron: Option<String>,
    pub every_seconds: Option<i64>,
    pub at: Option<i64>,
    pub timezone: String,
    pub group_name: Option<String>,
    pub jitter_seconds: i64,
    pub enabled: i64,
    pub next_fire_at: Option<i64>,
    pub last_fired_at: Option<i64>,
    pub last_batch_id: Option<String>,
    /// Bumped by every `PUT`: a fire planned from an older revision applies nothing.
    /// Restarts at 1 when the schedule is deleted and created again, so fires match
    /// on (`revision`, `created_at`).
    pub revision: i64,
    /// When the row was first written; a replace keeps it.
    pub created_at: i64,
    /// When the schedule was last written by `PUT` (fires do not change it).
    pub updated_at: i64,
    /// The completion callback of every batch it fires, as stored (`{"url": …}`,
    /// `core::callback`).
    #[serde(default)]
    pub on_finish: Option<String>,
    /// Fires in a row that failed on their own (0 once one applies or after a PUT).
    #[serde(default)]
    pub fire_failures: i64,
    /// While backing off after failed fires: when the next try is (ms), else NULL.
    #[serde(default)]
    pub retry_at: Option<i64>,
    /// The priority its batches get when it fires (-10 to 10).
    #[serde(default)]
    pub priority: i64,
}

/// A schedule as the API answers it (times RFC 3339 UTC).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleView {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    pub timezone: String,
    pub group: Option<String>,
    pub jitter_seconds: i64,
    pub enabled: bool,
    /// The priority of the batches it fires (-10 to 10).
    pub priority: i64,
    pub next_fire_at: Option<String>,
    pub last_fired_at: Option<String>,
    pub last_batch_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Where the completion callback of each batch it fires goes (a signing
    /// secret redacted), or null.
    pub on_finish: Option<OnFinish>,
    /// Fires in a row that failed (0 once one applies, or after a `PUT`).
    pub fire_failures: i64,
    /// While the schedule backs off after failed fires, when the tick tries again
    /// (RFC 3339 UTC); `null` otherwise.
    pub retry_at: Option<String>,
}

impl ScheduleView {
    pub fn from_row(row: &ScheduleRow) -> ScheduleView {
        ScheduleView {
            id: row.id.clone(),
            cron: row.cron.clone(),
            every_seconds: row.every_seconds,
            at: row.at.map(rfc3339),
            timezone: row.timezone.clone(),
            group: row.group_name.clone(),
            jitter_seconds: row.jitter_seconds,
            enabled: row.enabled != 0,
            priority: row.priority,
            next_fire_at: row.next_fire_at.map(rfc3339),
            last_fired_at: row.last_fired_at.map(rfc3339),
            last_batch_id: row.last_batch_id.clone(),
            created_at: rfc3339(row.created_at),
            updated_at: rfc3339(row.updated_at),
            on_finish: OnFinish::shown(row.on_finish.as_deref()),
            fire_failures: row.fire_failures,
            retry_at: row.retry_at.map(rfc3339),
        }
    }
}
