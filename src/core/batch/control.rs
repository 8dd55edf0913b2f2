//! Batch control: which status move pause, resume and cancel make from each batch
//! status, what a dead-letter replay may requeue, and the page sizes that bound
//! every bulk move (cancel, replay), so no statement holds D1 for long. Pure: the
//! handlers (`api::control`) read, decide here, and write with a compare-and-set.

use serde::{Deserialize, Serialize};

use crate::core::batch::model::ItemStatus;
use crate::core::batch::requests::MAX_ID_CHARS;
use crate::core::error::ApiError;

/// Pending items a cancel moves to `cancelled` per statement (one page; a tick's
/// page spans every cancelled batch).
/// Measured locally: 10,000 rows move in tens of milliseconds (docs/benchmarks/history-2026-11-23.md).
pub const CANCEL_PAGE: i64 = 10_000;
/// Pages one `POST /batches/{id}/cancel` sweeps before it answers: 100,000 items,
/// 13 D1 calls at most. A bigger batch is swept on by every tick (one page each)
/// and by repeating the request.
pub const CANCEL_PAGES_PER_CALL: i64 = 10;
/// Failed items one replay statement requeues.
pub const REPLAY_PAGE: i64 = 10_000;
/// Most items one `POST /batches/{id}/retry` requeues (the default `limit`).
pub const REPLAY_MAX_PER_CALL: i64 = 100_000;
/// Reads and compare-and-sets a control request tries before it gives up on a
/// batch whose status keeps changing under it.
pub const CONTROL_TRIES: usize = 3;

/// A batch's status (`batches.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchStatus {
    /// Its items are claimed as they come due.
    Running,
    /// Nothing of it is claimed until it is resumed; items in flight finish.
    Paused,
    /// Never claimed again: pending items are swept to `cancelled`, items in flight
    /// finish; it ends (`finished_at`) once nothing is pending or in flight.
    Cancelled,
    /// Every item ended. A replay makes it `Running` again.
    Finished,
}

impl BatchStatus {
    pub const ALL: [BatchStatus; 4] = [
        BatchStatus::Running,
        BatchStatus::Paused,
        BatchStatus::Cancelled,
        BatchStatus::Finished,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BatchStatus::Running => "running",
            BatchStatus::Paused => "paused",
            BatchStatus::Cancelled => "cancelled",
            BatchStatus::Finished => "finished",
        }
    }

    pub fn parse(s: &str) -> Option<BatchStatus> {
        BatchStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether a replay may requeue failed items into a batch in this status.
    pub fn takes_replays(self) -> bool {
        self != BatchStatus::Cancelled
    }
}

/// `POST /batches/{id}/pause`, `/resume`, `/cancel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Pause,
    Resume,
    Cancel,
}

impl Control {
    pub const ALL: [Control; 3] = [Control::Pause, Control::Resume, Control::Cancel];

    pub fn as_str(self) -> &'static str {
        match self {
            Control::Pause => "pause",
            Control::Resume => "resume",
            Control::Cancel => "cancel",
        }
    }
}

/// What a control request does to a batch in a given status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Compare-and-set the batch from the status read to this one.
    To(BatchStatus),
    /// The batch is already where the request would put it: 200, nothing written
    /// (a repeated request).
    Already,
    /// An impossible transition: 409 `invalid_transition`.
    Refused,
}

/// The transition table:
///
/// | request \ status | running   | paused    | cancelled | finished |
/// |------------------|-----------|-----------|-----------|----------|
/// | pause            | → paused  | already   | refused   | refused  |
/// | resume           | already   | → running | refused   | refused  |
/// | cancel           | → cancelled | → cancelled | already | refused |
pub fn decide(control: Control, from: BatchStatus) -> Move {
    use BatchStatus::*;
    match (control, from) {
        (Control::Pause, Running) => Move::To(Paused),
        (Control::Pause, Paused) => Move::Already,
        (Control::Resume, Paused) => Move::To(Running),
        (Control::Resume, Running) => Move::Already,
        (Control::Cancel, Running | Paused) => Move::To(Cancelled),
        (Control::Cancel, Cancelled) => Move::Already,
        (Control::Pause | Control::Resume, Cancelled | Finished) | (Control::Cancel, Finished) => {
            Move::Refused
        }
    }
}

/// The 409 of a refused control request.
pub fn refused(control: Control, batch_id: &str, from: BatchStatus) -> ApiError {
    ApiError::invalid_transition(format!(
        "cannot {} batch {batch_id:?}: it is {}",
        control.as_str(),
        from.as_str()
    ))
}

/// What `POST /items/{id}/retry` does to an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemReplay {
    /// Failed: back to pending.
    Requeue,
    /// Pending or in flight already (e.g. replayed before): nothing to do, 200.
    Already,
    /// 409 `invalid_transition`, with why.
    Refused(&'static str),
}

pub fn decide_item_replay(item: ItemStatus, batch: BatchStatus) -> ItemReplay {
    if !batch.takes_replays() {
        return ItemReplay::Refused("its batch is cancelled");
    }
    match item {
        ItemStatus::Failed => ItemReplay::Requeue,
        ItemStatus::Pending | ItemStatus::Processing => ItemReplay::Already,
        ItemStatus::Completed => ItemReplay::Refused("it completed"),
        ItemStatus::Cancelled => ItemReplay::Refused("it was cancelled"),
    }
}

/// The body of `POST /batches/{id}/retry`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryBody {
    pub status: String,
    pub error_contains: Option<String>,
    pub limit: Option<i64>,
}

/// A validated replay request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// Only failed items whose `last_error` contains this (case-sensitive).
    pub error_contains: Option<String>,
    /// Most items to requeue.
    pub limit: i64,
}

impl Replay {
    /// The size of the next page after `done` items were requeued.
    pub fn next_page(&self, done: i64) -> i64 {
        (self.limit - done).clamp(0, REPLAY_PAGE)
    }
}

pub fn validate_retry(body: RetryBody) -> Result<Replay, ApiError> {
    let bad = |message: String| ApiError::bad_request("invalid_retry", message);
    if body.status != ItemStatus::Failed.as_str() {
        return Err(bad(format!(
            "status must be \"failed\" (only failed items are replayed), got {:?}",
            body.status
        )));
    }
    if let Some(text) = &body.error_contains {
        let chars = text.chars().count();
        if chars == 0 || chars > MAX_ID_CHARS || text.chars().any(char::is_control) {
            return Err(bad(format!(
                "error_contains must be 1 to {MAX_ID_CHARS} characters without control characters"
            )));
        }
    }
    let limit = body.limit.unwrap_or(REPLAY_MAX_PER_CALL);
    if !(1..=REPLAY_MAX_PER_CALL).contains(&limit) {
        return Err(bad(format!(
            "limit must be 1 to {REPLAY_MAX_PER_CALL}, got {limit}"
        )));
    }
    Ok(Replay {
        error_contains: body.error_contains,
        limit,
    })
}

/// An item id from a URL path: a positive integer.
pub fn parse_item_id(raw: &str) -> Result<i64, ApiError> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0 && raw.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_id",
                format!("item id must be a positive integer, got {raw:?}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use BatchStatus::*;

    #[test]
    fn the_transition_table() {
        let row = |c| BatchStatus::ALL.map(|from| decide(c, from));
        assert_eq!(
            row(Control::Pause),
            [
                Move::To(Paused),
                Move::Already,
                Move::Refused,
                Move::Refused
            ]
        );
        assert_eq!(
            row(Control::Resume),
            [
                Move::Already,
                Move::To(Running),
                Move::Refused,
                Move::Refused
            ]
        );
        assert_eq!(
            row(Control::Cancel),
            [
                Move::To(Cancelled),
                Move::To(Cancelled),
                Move::Already,
                Move::Refused
            ]
        );
    }

    #[test]
    fn every_move_lands_where_the_request_says() {
        // Repeating a request that moved the batch is always a no-op.
        for c in [Control::Pause, Control::Resume, Control::Cancel] {
            for from in BatchStatus::ALL {
                if let Move::To(to) = decide(c, from) {
                    assert_eq!(decide(c, to), Move::Already, "{c:?} from {from:?}");
                }
            }
        }
    }

    #[test]
    fn statuses_round_trip_through_text() {
        for s in BatchStatus::ALL {
            assert_eq!(BatchStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(BatchStatus::parse("done"), None);
    }

    #[test]
    fn replays_go_into_any_batch_but_a_cancelled_one() {
        use ItemStatus as I;
        assert_eq!(decide_item_replay(I::Failed, Finished), ItemReplay::Requeue);
        assert_eq!(decide_item_replay(I::Failed, Paused), ItemReplay::Requeue);
        assert_eq!(decide_item_replay(I::Pending, Running), ItemReplay::Already);
        assert_eq!(
            decide_item_replay(I::Processing, Running),
            ItemReplay::Already
        );
        assert!(matches!(
            decide_item_replay(I::Completed, Finished),
            ItemReplay::Refused(_)
        ));
        assert!(matches!(
            decide_item_replay(I::Failed, Cancelled),
            ItemReplay::Refused(_)
        ));
        assert!(matches!(
            decide_item_replay(I::Cancelled, Cancelled),
            ItemReplay::Refused(_)
        ));
    }

    fn body(status: &str, error_contains: Option<&str>, limit: Option<i64>) -> RetryBody {
        RetryBody {
            status: status.into(),
            error_contains: error_contains.map(Into::into),
            limit,
        }
    }

    #[test]
    fn retry_bodies_are_validated() {
        let ok = validate_retry(body("failed", Some("HTTP 5"), Some(7))).unwrap();
        assert_eq!(
            ok,
            Replay {
                error_contains: Some("HTTP 5".into()),
                limit: 7
            }
        );
        assert_eq!(
            validate_retry(body("failed", None, None)).unwrap().limit,
            REPLAY_MAX_PER_CALL
        );
        for bad in [
            body("completed", None, None),
            body("failed", Some(""), None),
            body("failed", Some("a\nb"), None),
            body("failed", Some(&"x".repeat(MAX_ID_CHARS + 1)), None),
            body("failed", None, Some(0)),
            body("failed", None, Some(REPLAY_MAX_PER_CALL + 1)),
        ] {
            let e = validate_retry(bad.clone()).unwrap_err();
            assert_eq!((e.status(), e.code()), (400, "invalid_retry"), "{bad:?}");
        }
    }

    #[test]
    fn replay_pages_add_up_to_the_limit() {
        let r = Replay {
            error_contains: None,
            limit: 25_000,
        };
        assert_eq!(
            [0, 10_000, 20_000, 25_000].map(|done| r.next_page(done)),
            [10_000, 10_000, 5_000, 0]
        );
    }

    #[test]
    fn item_ids_are_positive_integers() {
        assert_eq!(parse_item_id("42").unwrap(), 42);
        for bad in [
            "0",
            "-1",
            "+1",
            "1.0",
            "x",
            "",
            " 1",
            "99999999999999999999",
        ] {
            assert_eq!(
                parse_item_id(bad).unwrap_err().code(),
                "invalid_id",
                "{bad}"
            );
        }
    }
}
