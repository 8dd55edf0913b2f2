//! The drain as a deterministic state machine, in the style of quinn-proto's
//! `Connection`: no I/O, no clock, no randomness. The shell (`edge::drain` in the
//! Worker, a simulation on the host) feeds it what happened — `claimed`,
//! `finished`, `committed`, `timer`, each with `now` — and asks `poll(now)` what to
//! do next until it answers `Wait` or `Done`. Notable results (retries, failures,
//! lost leases, failed calls) come out of `next_report` for the shell to log.
//!
//! It owns the window (at most `DISPATCH_CONCURRENCY` items running), the
//! claim-ahead rule and the deadline (`budget::next_claim`), the flush rule
//! (every [`FLUSH_INTERVAL_MS`] or [`FLUSH_MAX_ROWS`] outcomes), the watchdog
//! cohorts (`core::watchdog`), the subrequest reservations with their refunds, the
//! commit retry and the tally.

use std::collections::VecDeque;
use std::fmt;

use super::budget::FLUSH_MAX_ROWS;
use super::budget::{may_commit, next_claim, Budget, DrainLimits, DrainState, NextClaim};
use super::model::{ClaimedItem, ItemStatus, Outcome, StopReason, Tally, Transition};
use super::retry::{decide, RetryPolicy};
use super::settings::Settings;
use super::watchdog;
use crate::store::StoreError;

/// Group-commit interval: an outcome waits at most this long (plus a running
/// commit) before its commit starts; a commit also starts once FLUSH_MAX_ROWS are
/// waiting. Measured: one commit per interval rather than per CLAIM_CHUNK outcomes
/// saves a D1 call per chunk, about 1 ms of the runtime's CPU each locally
/// (docs/benchmarks.md).
pub const FLUSH_INTERVAL_MS: i64 = 100;

/// Attempts of one commit statement: commits are fenced, so repeating one never
/// applies anything twice.
pub const COMMIT_TRIES: u8 = 2;

/// What a drain is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub limits: DrainLimits,
    pub lease_ms: i64,
    pub retry: RetryPolicy,
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
            },
            lease_ms: settings.lease_ms,
            retry: settings.retry,
        }
    }
}

/// A claimed item with the transition its outcome decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub item: ClaimedItem,
    pub transition: Transition,
}

/// What the shell should do next.
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
    /// Nothing to start now: wait for a running call, claim or commit to answer,
    /// or until this time, then call `timer`.
    Wait(Option<i64>),
    /// Nothing is running and every claimed item's outcome was committed, found
    /// its lease lost, or was reported in `Report::CommitFailed`.
    Done(StopReason),
}

/// What happened that the shell should log.
#[derive(Debug, PartialEq)]
pub enum Report {
    /// A committed outcome that is not a plain completion: a retry or a failure
    /// (completions are the hot path and report nothing).
    Settled(Settled),
    /// An outcome not applied: the item's lease had been lost.
    LeaseLost(ClaimedItem),
    /// A claim failed: the drain claims nothing more and commits what it has.
    ClaimFailed(StoreError),
    /// A commit failed and is sent again.
    CommitRetry { error: StoreError, rows: usize },
    /// A commit failed for good: these items stay `processing` until their leases
    /// expire and the reaper requeues them (a duplicate delivery, never a loss).
    CommitFailed {
        error: StoreError,
        item_ids: Vec<i64>,
    },
}

/// The slowest D1 round trips seen, in ms (for rules that will size leases and
/// deadlines by them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundTrips {
    pub claim_ms: i64,
    pub commit_ms: i64,
}

/// When waiting outcomes are due for a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlushTimer {
    /// No outcome is waiting.
    Idle,
    /// The first waiting outcome came in; they are due at this time.
    Armed(i64),
    /// Due now, but the budget held the commit back.
    Fired,
}

pub struct Drain {
    policy: Policy,
    budget: Budget,
    started: i64,
    /// Claimed items waiting for a slot.
    queue: VecDeque<ClaimedItem>,
    /// Items dispatched and not finished.
    in_flight: i64,
    /// The running claim: rows asked and when it was sent.
    claiming: Option<(i64, i64)>,
    /// The running commit: its attempt and when it was sent.
    committing: Option<(u8, i64)>,
    /// A failed commit's rows, to send again on the next poll.
    retry: Option<Vec<Settled>>,
    /// Outcomes not yet in a commit.
    buffer: Vec<Settled>,
    flush_timer: FlushTimer,
    /// When the current watchdog cohort started.
    watchdog_since: Option<i64>,
    /// A claim came back short: nothing else is due.
    drained: bool,
    stop: Option<StopReason>,
    tally: Tally,
    round_trips: RoundTrips,
    reports: VecDeque<Report>,
}

impl Drain {
    /// A drain starting at `started`, spending from `budget` (which the shell's
    /// metered store charges for every D1 call).
    pub fn new(policy: Policy, budget: Budget, started: i64) -> Drain {
        Drain {
            policy,
            budget,
            started,
            queue: VecDeque::new(),
            in_flight: 0,
            claiming: None,
            committing: None,
            retry: None,
            buffer: Vec::new(),
            flush_timer: FlushTimer::Idle,
            watchdog_since: None,
            drained: false,
            stop: None,
            tally: Tally::default(),
            round_trips: RoundTrips::default(),
            reports: VecDeque::new(),
        }
    }

    /// The next thing to do. Call until it answers `Wait` or `Done`.
    pub fn poll(&mut self, now: i64) -> Action {
        if let Some(rows) = self.retry.take() {
            return Action::Commit(rows);
        }
        if self.in_flight < self.policy.limits.concurrency {
            if let Some(item) = self.queue.pop_front() {
                return self.dispatch(now, item);
            }
        }
        if self.claiming.is_none() && self.stop.is_none() {
            match next_claim(&self.budget, self.policy.limits, self.plan_state(now)) {
                NextClaim::Take(k) => return self.claim(now, k),
                NextClaim::Hold => {}
                NextClaim::Stop(reason) => self.stop = Some(reason),
            }
        }
        if self.committing.is_none() {
            if let Some(rows) = self.flush(now) {
                return Action::Commit(rows);
            }
        }
        if self.unfinished() == 0 && self.committing.is_none() && self.buffer.is_empty() {
            return Action::Done(self.stop.unwrap_or(StopReason::Drained));
        }
        Action::Wait(match self.flush_timer {
            FlushTimer::Armed(at) => Some(at),
            FlushTimer::Idle | FlushTimer::Fired => None,
        })
    }

    /// The claim asked for by `Action::Claim` answered.
    pub fn claimed(&mut self, now: i64, result: Result<Vec<ClaimedItem>, StoreError>) {
        let Some((asked, sent)) = self.claiming.take() else {
            debug_assert!(false, "claimed() without a claim");
            return;
        };
        let rt = &mut self.round_trips.claim_ms;
        *rt = (*rt).max(now - sent);
        let cost = self.policy.limits.per_item_cost;
        match result {
            Ok(items) => {
                let got = items.len() as i64;
                self.drained = got < asked;
                self.budget.release((asked - got) * cost);
                self.tally.claimed += got;
                for item in &items {
                    if !self.tally.batch_ids.contains(&item.batch_id) {
                        self.tally.batch_ids.insert(item.batch_id.clone());
                    }
                }
                self.queue.extend(items);
            }
            Err(error) => {
                self.budget.release(asked * cost);
                // Claim nothing more, but still commit what is running.
                self.stop = Some(StopReason::Error);
                self.reports.push_back(Report::ClaimFailed(error));
            }
        }
    }

    /// A dispatched item answered (or was abandoned, which is a `Retry`).
    /// `jitter` in [0, 1) spreads its retry (`RetryPolicy::backoff_ms`).
    pub fn finished(&mut self, now: i64, item: ClaimedItem, outcome: &Outcome, jitter: f64) {
        self.in_flight -= 1;
        let transition = decide(&item, outcome, self.policy.retry, now, jitter);
        self.buffer.push(Settled { item, transition });
        if self.flush_timer == FlushTimer::Idle {
            self.flush_timer = FlushTimer::Armed(now + FLUSH_INTERVAL_MS);
        }
    }

    /// The commit asked for by `Action::Commit` answered: the ids that still held
    /// their lease, or an error.
    pub fn committed(
        &mut self,
        now: i64,
        rows: Vec<Settled>,
        result: Result<Vec<i64>, StoreError>,
    ) {
        let Some((tries, sent)) = self.committing.take() else {
            debug_assert!(false, "committed() without a commit");
            return;
        };
        let rt = &mut self.round_trips.commit_ms;
        *rt = (*rt).max(now - sent);
        let error = match result {
            Ok(applied) => return self.account(rows, applied),
            Err(error) => error,
        };
        // A retry must leave room to commit everything else: what is running and
        // what is waiting behind it.
        let others = self.unfinished() + self.buffer.len() as i64;
        if tries < COMMIT_TRIES
            && may_commit(&self.budget, others)
            && self.budget.reserve(1, 0).is_ok()
        {
            self.reports.push_back(Report::CommitRetry {
                error,
                rows: rows.len(),
            });
            self.committing = Some((tries + 1, now));
            self.retry = Some(rows);
        } else {
            self.reports.push_back(Report::CommitFailed {
                error,
                item_ids: rows.iter().map(|r| r.item.item_id).collect(),
            });
        }
    }

    /// The time a `Wait` named has come.
    pub fn timer(&mut self, now: i64) {
        if matches!(self.flush_timer, FlushTimer::Armed(at) if at <= now) {
            self.flush_timer = FlushTimer::Fired;
        }
    }

    pub fn next_report(&mut self) -> Option<Report> {
        self.reports.pop_front()
    }

    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    pub fn into_tally(self) -> Tally {
        self.tally
    }

    pub fn round_trips(&self) -> RoundTrips {
        self.round_trips
    }

    /// Claimed (or being claimed) items without an outcome yet.
    fn unfinished(&self) -> i64 {
        self.in_flight + self.queue.len() as i64 + self.claiming.map_or(0, |(k, _)| k)
    }

    fn plan_state(&self, now: i64) -> DrainState {
        DrainState {
            in_flight: self.in_flight,
            queued: self.queue.len() as i64,
            buffered: self.buffer.len() as i64,
            elapsed_ms: now - self.started,
            drained: self.drained,
        }
    }

    fn dispatch(&mut self, now: i64, item: ClaimedItem) -> Action {
        self.in_flight += 1;
        // Paid from what its claim held.
        let paid = self.budget.charge(self.policy.limits.per_item_cost);
        debug_assert!(paid.is_ok(), "a claimed item's dispatch is held: {paid:?}");
        let new_watchdog = watchdog::needs_new_timer(self.watchdog_since, now);
        if new_watchdog {
            self.watchdog_since = Some(now);
        }
        Action::Dispatch { item, new_watchdog }
    }

    fn claim(&mut self, now: i64, k: i64) -> Action {
        // Hold the statement and every item it may return now, so a commit that
        // runs while the claim is out cannot spend it.
        let held = self.budget.reserve(1, k * self.policy.limits.per_item_cost);
        debug_assert!(held.is_ok(), "next_claim takes only what is free: {held:?}");
        self.claiming = Some((k, now));
        Action::Claim {
            limit: k,
            lease_expires_at: now + self.policy.lease_ms,
        }
    }

    /// The next group commit, if one is due and affordable. Commits are paced by
    /// the timer, not by a row count: one statement per FLUSH_INTERVAL_MS carries
    /// every outcome of that interval. Once nothing runs, whatever waits is
    /// committed at once, in as many statements as the plan kept for it.
    fn flush(&mut self, now: i64) -> Option<Vec<Settled>> {
        if self.buffer.is_empty() {
            return None;
        }
        let n = self.buffer.len().min(FLUSH_MAX_ROWS as usize);
        let last = self.unfinished() == 0;
        if !last {
            let due =
                self.buffer.len() as i64 >= FLUSH_MAX_ROWS || self.flush_timer == FlushTimer::Fired;
            let others = self.unfinished() + (self.buffer.len() - n) as i64;
            if !due || !may_commit(&self.budget, others) {
                return None;
            }
        }
        if let Err(e) = self.budget.reserve(1, 0) {
            // Only a planning bug gets here, and then no commit can be paid for.
            let item_ids = self.buffer.drain(..).map(|r| r.item.item_id).collect();
            self.reports.push_back(Report::CommitFailed {
                error: StoreError::OverBudget(e),
                item_ids,
            });
            return None;
        }
        let rest = self.buffer.split_off(n);
        let rows = std::mem::replace(&mut self.buffer, rest);
        self.committing = Some((1, now));
        self.flush_timer = if self.buffer.is_empty() {
            FlushTimer::Idle
        } else {
            FlushTimer::Armed(now + FLUSH_INTERVAL_MS)
        };
        Some(rows)
    }

    /// Count a commit's rows: applied ones by their new state; the others lost
    /// their lease and were left untouched.
    fn account(&mut self, rows: Vec<Settled>, mut applied: Vec<i64>) {
        applied.sort_unstable();
        for row in rows {
            if applied.binary_search(&row.item.item_id).is_err() {
                self.tally.lost_leases += 1;
                self.reports.push_back(Report::LeaseLost(row.item));
                continue;
            }
            self.tally
                .count_terminal(&row.item.batch_id, row.transition.status);
            match row.transition.status {
                ItemStatus::Completed => self.tally.completed += 1,
                ItemStatus::Pending => {
                    self.tally.retried += 1;
                    self.reports.push_back(Report::Settled(row));
                }
                ItemStatus::Failed => {
                    self.tally.failed += 1;
                    self.reports.push_back(Report::Settled(row));
                }
                ItemStatus::Processing => {}
            }
        }
    }
}

/// Why an invocation could not run its drain, or finish it, cleanly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainError {
    /// A binding the drain needs is missing.
    Binding(String),
    /// The first step failed: creating today's batch, or reaping.
    Prepare(StoreError),
    /// A claim failed; what was running was still committed.
    Claim(StoreError),
    /// Marking finished batches failed.
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

#[cfg(test)]
mod tests;
