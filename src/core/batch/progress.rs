//! The progress view of a batch (`GET /batches/{id}`): its counts from the
//! batch's row, with its rate, ETA, callback, waiting reasons and cost beside.

use serde::Serialize;

use crate::core::batch::model::BatchRow;

/// The progress view of a batch served by `GET /batches/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchProgress {
    pub id: String,
    pub key: String,
    pub status: String,
    pub total: i64,
    pub pending: i64,
    pub processing: i64,
    pub completed: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub percent: f64,
    /// Still being filled from subjects: `total` (and `percent`, which is of the
    /// items enqueued so far) grows until it is false; it never finishes before.
    pub filling: bool,
    /// Items ended per minute lately (`core::throughput`); null when unknown.
    pub rate_per_min: Option<f64>,
    /// When the rest should be done at that rate (RFC 3339); null when unknown.
    pub eta: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
    pub schedule_id: Option<String>,
    /// -10 to 10: its due items are claimed before those of lower priorities.
    pub priority: i64,
    /// Where its completion callback goes (`{"url": …}`, a signing secret
    /// redacted), or null.
    pub on_finish: Option<crate::core::batch::callback::OnFinish>,
    /// The delivery of its completion callback, or null without `on_finish`.
    pub callback: Option<crate::core::batch::callback::CallbackView>,
    /// Its pending items per reason they wait (`GET /batches/{id}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_on: Option<crate::core::flow::waiting::WaitingCounts>,
    /// The keys holding most of its pending items, with their state
    /// (`GET /batches/{id}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_keys: Option<Vec<crate::core::flow::waiting::KeyWaiting>>,
    /// What the invocations that worked on it cost, and the money
    /// (`GET /batches/{id}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::core::batch::cost::BatchCost>,
}

impl BatchProgress {
    /// `pending` is derived ([`BatchRow::pending`]), so no million-row count is
    /// needed. `percent` is the share of items that ended, whichever way.
    pub fn from_row(row: &BatchRow) -> BatchProgress {
        let done = row.completed + row.failed + row.cancelled;
        let pending = row.pending();
        let percent = if row.total == 0 {
            if row.filling != 0 {
                0.0
            } else {
                100.0
            }
        } else {
            // One decimal is enough for a progress bar and keeps the JSON stable.
            ((done as f64) * 1000.0 / (row.total as f64)).floor() / 10.0
        };
        BatchProgress {
            id: row.id.clone(),
            key: row.key.clone(),
            status: row.status.clone(),
            total: row.total,
            pending,
            processing: row.processing,
            completed: row.completed,
            failed: row.failed,
            cancelled: row.cancelled,
            percent,
            filling: row.filling != 0,
            rate_per_min: None,
            eta: None,
            created_at: crate::core::time::rfc3339(row.created_at),
            finished_at: row.finished_at.map(crate::core::time::rfc3339),
            schedule_id: row.schedule_id.clone(),
            priority: row.priority,
            on_finish: crate::core::batch::callback::OnFinish::shown(row.on_finish.as_deref()),
            callback: crate::core::batch::callback::CallbackView::from_row(row),
            waiting_on: None,
            waiting_keys: None,
            cost: None,
        }
    }
}

impl BatchProgress {
    /// With a rate and ETA (`core::throughput::estimate`).
    pub fn with_estimate(mut self, e: crate::core::batch::throughput::Estimate) -> BatchProgress {
        self.rate_per_min = e.rate_per_min;
        self.eta = e.eta.map(crate::core::time::rfc3339);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(total: i64, completed: i64, failed: i64, processing: i64) -> BatchRow {
        BatchRow {
            id: "b".into(),
            key: "k".into(),
            status: "running".into(),
            total,
            completed,
            failed,
            cancelled: 0,
            processing,
            created_at: 0,
            finished_at: None,
            schedule_id: None,
            on_finish: None,
            callback_status: None,
            callback_attempts: None,
            callback_error: None,
            filling: 0,
            priority: 0,
            cost: None,
        }
    }

    #[test]
    fn progress_derives_pending_from_exact_counters() {
        let p = BatchProgress::from_row(&row(10, 3, 2, 1));
        assert_eq!(
            (p.pending, p.processing, p.completed, p.failed),
            (4, 1, 3, 2)
        );
        assert_eq!(p.percent, 50.0);
    }

    #[test]
    fn cancelled_items_count_as_ended_not_pending() {
        let p = BatchProgress::from_row(&BatchRow {
            cancelled: 4,
            ..row(10, 3, 2, 1)
        });
        assert_eq!((p.pending, p.cancelled), (0, 4));
        assert_eq!(p.percent, 90.0);
    }

    #[test]
    fn empty_batch_is_complete_and_percent_rounds_down() {
        assert_eq!(BatchProgress::from_row(&row(0, 0, 0, 0)).percent, 100.0);
        assert_eq!(BatchProgress::from_row(&row(3, 1, 0, 0)).percent, 33.3);
        assert_eq!(BatchProgress::from_row(&row(1000, 999, 0, 0)).percent, 99.9);
    }
}
