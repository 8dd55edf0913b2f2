//! What the drain's machine and its shell say to each other: the policy it is
//! given, the actions it asks for, the reports it gives, what an item settled
//! to, and the errors that end a drain.

use std::fmt;

use crate::core::batch::model::{ClaimedItem, StopReason, Transition};
use crate::core::drain::budget::DrainLimits;
use crate::core::drain::retry::RetryPolicy;
use crate::core::drain::store_error::StoreError;
use crate::core::settings::{DispatchMode, Settings};

/// What a drain is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub limits: DrainLimits,
    pub retry: RetryPolicy,
    /// `REFUSAL_GIVE_UP_SECONDS` in ms: a streak of refusals longer than this
    /// fails the item (`retry::refused`).
    pub refusal_give_up_ms: i64,
}

impl Policy {
    /// `per_item_cost`: subrequests one item costs this invocation (1 SELF call,
    /// or the job's own calls inline).
    pub fn new(settings: &Settings, per_item_cost: i64) -> Policy {
        Policy {
            limits: DrainLimits {
                concurrency: settings.dispatch_concurrency,
                claim_chunk: settings.claim_chunk,
                per_item_cost,
                job_timeout_ms: settings.job_timeout_ms,
                deadline_ms: settings.invocation_deadline_ms,
                lease_ms: settings.lease_ms,
                // Inline runs make no SELF calls: the platform's cap is not theirs.
                max_children: match settings.dispatch_mode {
                    DispatchMode::Fanout => settings.max_child_invocations,
                    DispatchMode::Inline => i64::MAX,
                },
            },
            retry: settings.retry,
            refusal_give_up_ms: settings.refusal_give_up_ms,
        }
    }
}

/// A claimed item with the transition its outcome (or its release) decided, and
/// when its lease expires.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub item: ClaimedItem,
    pub transition: Transition,
    pub lease_expires_at: i64,
}

/// What the shell should do next.
// A dispatch holds its item by value: it is handed to the shell at once, and a
// box per dispatch would only add an allocation on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Start this item. `new_watchdog`: give it a new abandon-timer, which the
    /// dispatches after it share until the machine says so again.
    Dispatch {
        item: ClaimedItem,
        new_watchdog: bool,
    },
    /// Claim up to `limit` due items under leases expiring at `lease_expires_at`
    /// (one statement), then call `claimed`.
    Claim { limit: i64, lease_expires_at: i64 },
    /// Commit these outcomes (one statement), then hand them back to `committed`.
    Commit(Vec<Settled>),
    /// Commit these outcomes again after a failed attempt, which may have been
    /// applied all the same: apply what is still fenced and read back what is
    /// applied (`Store::recommit_outcomes`, one call), then hand them back to
    /// `committed`.
    CommitAgain(Vec<Settled>),
    /// Nothing to start now: wait for a running call, claim or commit to answer,
    /// or until this time, then call `timer`.
    Wait(Option<i64>),
    /// Nothing is running and every claimed item's outcome was committed, found
    /// its lease lost, or was reported in `Report::CommitFailed`.
    Done(StopReason),
}

/// What happened that the shell should log.
// Reports hold items by value: each is made once and logged at once, so a
// box per report would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub enum Report {
    /// A committed outcome that is not a plain completion: a retry or a failure
    /// (completions are the hot path and report nothing), or any outcome of a
    /// completion callback (rare, and worth a line each).
    Settled(Settled),
    /// An outcome not applied: the item's lease had been lost.
    LeaseLost(ClaimedItem),
    /// A claimed item not dispatched: its call and commit could no longer end
    /// before its lease expired or the deadline, at the D1 round trips seen. It
    /// goes back to `pending` unrun, its attempt given back, in the next commit.
    Released(ClaimedItem),
    /// A claim failed: the drain claims nothing more and commits what it has.
    ClaimFailed(StoreError),
    /// A commit failed and is sent again.
    CommitRetry { error: StoreError, rows: usize },
    /// The platform refused dispatches of this invocation (the first refusal's
    /// message): these items went back to `pending` unrun, their attempts given
    /// back, and nothing more was dispatched. Reported once, when the drain is
    /// done.
    DispatchRefused { message: String, item_ids: Vec<i64> },
    /// A commit failed for good: these items stay `processing` until their leases
    /// expire and the reaper requeues them (a duplicate delivery, never a loss),
    /// unless the failed attempt had applied them.
    CommitFailed {
        error: StoreError,
        item_ids: Vec<i64>,
    },
}

/// The slowest D1 round trips seen, in ms: the lease and deadline rules are sized
/// by them (`timing::wind_down_ms`, `timing::commit_allowance_ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundTrips {
    /// The reaper's statement, just before the drain.
    pub prepare_ms: i64,
    pub claim_ms: i64,
    pub commit_ms: i64,
}

impl RoundTrips {
    /// D1 is one writer: a slow claim means slow commits too, and the other way.
    pub fn slowest(&self) -> i64 {
        self.prepare_ms.max(self.claim_ms).max(self.commit_ms)
    }
}

/// A dispatch the platform refused before any answer (its runtime's message):
/// the call never reached a child, so the item has not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// Why an invocation could not run its drain, or finish it, cleanly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainError {
    /// A binding the drain needs is missing.
    Binding(String),
    /// The first step failed: creating today's batch, or reaping.
    Prepare(StoreError),
    /// A claim failed; what was running was still committed.
    Claim(StoreError),
    /// The tail's upkeep and finish check failed.
    Finish(StoreError),
}

impl fmt::Display for DrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DrainError::Binding(message) => write!(f, "binding {message}"),
            DrainError::Prepare(e) => write!(f, "prepare: {e}"),
            DrainError::Claim(e) => write!(f, "claim: {e}"),
            DrainError::Finish(e) => write!(f, "finish batches: {e}"),
        }
    }
}

impl std::error::Error for DrainError {}
