//! The drain as a deterministic state machine (no I/O, no clock, no randomness):
//! the shell (`drain_loop::run`) feeds it what happened, each with `now`, and polls
//! it for the next action until `Wait` or `Done`; notable results come out of
//! `next_report`. It owns the window, the claim, flush, lease and refusal rules,
//! the watchdog cohorts, the subrequest reservations, the commit retry and the
//! tally; docs/architecture/drain.md ("The drain: a state machine and its shell" and
//! the sections after it) describes each.
//!
//! The room holds its rules beside the machine: the budget, timing, watchdog,
//! dispatch, retries and the drainers' capacity. It imports `batch`, `flow`,
//! `schedule`, `security` and `core`'s top.

pub mod budget;
mod commit;
pub mod dispatch;
pub mod drainers;
mod events;
mod paused;
pub mod retry;
pub mod store_error;
pub mod timing;
pub mod watchdog;

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::core::batch::model::{
    ClaimedItem, ItemStatus, Outcome, Ran, RefusedBy, StopReason, Tally,
};
use crate::core::batch::receipts;
use crate::core::drain::budget::{
    cover_items, flush_reserve, may_commit, next_claim, Budget, DrainState, NextClaim,
    FLUSH_MAX_ROWS, RETRY_RESERVE,
};
use crate::core::drain::retry::{decide, defer, refused, release, release_refused, RetryPolicy};
use crate::core::drain::store_error::StoreError;
use crate::core::drain::timing::{call_ms, commit_allowance_ms, wind_down_ms};
use crate::core::flow::learn;
use crate::core::flow::pace;

pub use crate::core::drain::timing::FLUSH_INTERVAL_MS;
pub use events::{Action, DrainError, Policy, Refused, Report, RoundTrips, Settled};

/// Attempts of one commit statement: commits are fenced, so repeating one never
/// applies anything twice, and the second reads back what the first applied.
pub const COMMIT_TRIES: u8 = 2;

/// Throws running for one item after which its child is taken to crash while
/// no answered call shows where the platform's cap is (a deployment whose every
/// call so far threw): a refused item is claimed again at once, so the same
/// item refused three times running is the platform refusing every call.
pub const THROWS_BEFORE_CRASH: i64 = 3;

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

/// The refusal this invocation met.
#[derive(Debug)]
struct Refusal {
    message: String,
    /// The items given back.
    item_ids: Vec<i64>,
}

/// A claimed item waiting for a slot.
#[derive(Debug)]
struct Queued {
    item: ClaimedItem,
    lease_expires_at: i64,
}

/// A dispatched item not finished.
#[derive(Debug, Clone)]
struct Running {
    lease_expires_at: i64,
    /// Its dispatch's place among this drain's (1 for the first).
    place: i64,
    /// Its item's keys, to weigh a budget left (`pace::on_their_way`).
    limits: Option<String>,
}

/// The running claim.
#[derive(Debug, Clone, Copy)]
struct Claiming {
    asked: i64,
    sent: i64,
    lease_expires_at: i64,
}

/// The running commit.
#[derive(Debug, Clone, Copy)]
struct Committing {
    tries: u8,
    sent: i64,
}

pub struct Drain {
    policy: Policy,
    /// Job kinds with a backoff of their own (`jobs::Policy`); others use
    /// `policy.retry`.
    kind_retry: Vec<(String, RetryPolicy)>,
    budget: Budget,
    started: i64,
    /// Claimed items waiting for a slot, in claim order (so in lease order),
    /// those claimed ahead of their rate's slot by their start.
    queue: VecDeque<Queued>,
    /// The queue was sorted by slot: its front may not hold the earliest lease.
    queue_by_slot: bool,
    /// Items dispatched and not finished, by lease token.
    running: HashMap<String, Running>,
    claiming: Option<Claiming>,
    committing: Option<Committing>,
    /// A failed commit's rows, to send again on the next poll.
    retry: Option<Vec<Settled>>,
    /// Outcomes not yet in a commit.
    buffer: Vec<Settled>,
    /// The earliest lease expiry in `buffer` (kept so a poll need not scan it).
    buffer_oldest: Option<i64>,
    /// Items whose outcome is not yet in a commit (queued, running or in the
    /// buffer), by lease expiry: the plan keeps a flush per 500 of each.
    outstanding: BTreeMap<i64, i64>,
    /// Commit retries sent; the plan keeps `RETRY_RESERVE` until they are used.
    retries_sent: i64,
    flush_timer: FlushTimer,
    /// The watchdog cohorts of its dispatches.
    watchdog: watchdog::Cohorts,
    /// A claim came back short: nothing else is due.
    drained: bool,
    /// A claim came back short with items held back by their limits: claim
    /// again at this time (a rate's next token, or a poll for a slot).
    held_until: Option<i64>,
    /// Items dispatched, counted against `max_children`.
    dispatched: i64,
    /// The highest place at which a dispatch was answered, in this drain or one
    /// before it ([`Drain::knows_answered`]): the platform's cap on a request's
    /// calls is at least that, so a call below it that throws crashed.
    answered_up_to: i64,
    /// When the first item was dispatched: the finishing rate counts from it.
    first_dispatch: Option<i64>,
    /// The platform refused a dispatch: nothing more is dispatched.
    refusal: Option<Refusal>,
    /// Keys this drain's own answers paused (a receiver's refusal, a spent
    /// budget), until when: D1 holds the pause only once their commit lands,
    /// and a claim before then may return items holding them again.
    paused: Vec<(String, i64)>,
    /// Budget left per key as its latest answer told: key, what remains, when
    /// it resets (`Drain::spoken_for`).
    budgets: Vec<(String, i64, i64)>,
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
            kind_retry: Vec::new(),
            budget,
            started,
            queue: VecDeque::new(),
            queue_by_slot: false,
            running: HashMap::new(),
            claiming: None,
            committing: None,
            retry: None,
            buffer: Vec::new(),
            buffer_oldest: None,
            outstanding: BTreeMap::new(),
            retries_sent: 0,
            flush_timer: FlushTimer::Idle,
            watchdog: watchdog::Cohorts::default(),
            drained: false,
            held_until: None,
            dispatched: 0,
            answered_up_to: 0,
            first_dispatch: None,
            refusal: None,
            paused: Vec::new(),
            budgets: Vec::new(),
            stop: None,
            tally: Tally::default(),
            round_trips: RoundTrips::default(),
            reports: VecDeque::new(),
        }
    }

    /// The next thing to do. Call until it answers `Wait` or `Done`.
    pub fn poll(&mut self, now: i64) -> Action {
        if let Some(rows) = self.retry.take() {
            return Action::CommitAgain(rows);
        }
        self.release_late(now);
        if self.refusal.is_some() {
            self.give_back_queued(now);
        }
        while (self.running.len() as i64) < self.policy.limits.concurrency {
            let Some(queued) = self.next_ready(now) else {
                break;
            };
            // Its receiver said "not now" to this drain: it would only be refused.
            if self.holds_paused(&queued.item, now) {
                self.release_unrun(now, queued);
                continue;
            }
            return self.dispatch(now, queued);
        }
        let held = self.held_until.is_some_and(|at| now < at);
        if self.claiming.is_none() && self.stop.is_none() && !held {
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
            if let Some(Refusal { message, item_ids }) = self.refusal.take() {
                self.reports
                    .push_back(Report::DispatchRefused { message, item_ids });
            }
            return Action::Done(self.stop.unwrap_or(StopReason::Drained));
        }
        Action::Wait(self.wake_at(now))
    }

    /// The reaper's statement just before the drain took `round_trip_ms`: the
    /// first claim is sized by it.
    pub fn prepared(&mut self, round_trip_ms: i64) {
        self.round_trips.prepare_ms = round_trip_ms.max(0);
    }

    /// The claim asked for by `Action::Claim` answered.
    pub fn claimed(&mut self, now: i64, result: Result<Vec<ClaimedItem>, StoreError>) {
        self.claimed_holding(now, result, None)
    }

    /// [`Drain::claimed`] for a claim whose limits held items back that may go
    /// at `held_until`: a short claim then does not mean nothing else is due,
    /// and the drain claims again at that time (or after its next commit, which
    /// may give a slot back), unless that is past its deadline.
    pub fn claimed_holding(
        &mut self,
        now: i64,
        result: Result<Vec<ClaimedItem>, StoreError>,
        held_until: Option<i64>,
    ) {
        let deadline = self.started + self.policy.limits.deadline_ms;
        self.held_until = held_until.filter(|&at| at < deadline);
        let Some(claim) = self.claiming.take() else {
            debug_assert!(false, "claimed() without a claim");
            return;
        };
        let rt = &mut self.round_trips.claim_ms;
        *rt = (*rt).max(now - claim.sent);
        let cost = self.policy.limits.per_item_cost;
        match result {
            Ok(items) => {
                let got = items.len() as i64;
                self.drained = got < claim.asked && self.held_until.is_none();
                self.budget.release((claim.asked - got) * cost);
                self.tally.claimed += got;
                for item in &items {
                    if !self.tally.batch_ids.contains(&item.batch_id) {
                        self.tally.batch_ids.insert(item.batch_id.clone());
                    }
                }
                if got > 0 {
                    *self.outstanding.entry(claim.lease_expires_at).or_default() += got;
                }
                let ahead = items.iter().any(|i| i.start_at > now);
                self.queue.extend(items.into_iter().map(|item| Queued {
                    item,
                    lease_expires_at: claim.lease_expires_at,
                }));
                // Items a rate let through ahead go at their slots, in order.
                self.queue_by_slot |= ahead;
                if self.queue_by_slot {
                    self.queue
                        .make_contiguous()
                        .sort_by_key(|q| q.item.start_at);
                }
            }
            Err(error) => {
                self.budget.release(claim.asked * cost);
                // Claim nothing more, but still commit what is running.
                self.stop = Some(StopReason::Error);
                self.reports.push_back(Report::ClaimFailed(error));
            }
        }
    }

    /// The backoff of kinds that have their own (`jobs::Jobs::retry_policies`).
    /// The highest place at which an earlier drain (in this isolate) had a
    /// dispatch answered: the platform's cap is at least that.
    pub fn knows_answered(&mut self, place: i64) {
        self.answered_up_to = self.answered_up_to.max(place);
    }

    /// The highest place at which a dispatch was answered, this drain's or one
    /// it was told of: for the drains after it.
    pub fn answered_up_to(&self) -> i64 {
        self.answered_up_to
    }

    pub fn set_kind_retry(&mut self, kinds: Vec<(String, RetryPolicy)>) {
        self.kind_retry = kinds;
    }

    /// A dispatched item answered (or was abandoned, which is a `Retry`): its
    /// outcome and, for kinds with channels, each channel's result, committed
    /// together (`receipts::settle`). `jitter` in [0, 1) spreads its retry
    /// (`RetryPolicy::backoff_ms`).
    pub fn finished(&mut self, now: i64, item: ClaimedItem, ran: impl Into<Ran>, jitter: f64) {
        let Some(running) = self.running.remove(&item.lease_token) else {
            debug_assert!(false, "finished() for an item not running: {item:?}");
            return;
        };
        self.answered_up_to = self.answered_up_to.max(running.place);
        self.settle_run(now, item, running.lease_expires_at, ran.into(), jitter);
    }

    /// The transition a run's outcome decides, settled.
    fn settle_run(
        &mut self,
        now: i64,
        item: ClaimedItem,
        lease_expires_at: i64,
        ran: Ran,
        jitter: f64,
    ) {
        let retry = self
            .kind_retry
            .iter()
            .find(|(kind, _)| *kind == item.kind)
            .map_or(self.policy.retry, |(_, own)| *own);
        let refused_keys = ran.refused.as_ref().and_then(|r| r.keys.clone());
        let mut transition = match (&ran.outcome, &ran.refused) {
            // One rule for every kind: a receiver's refusal spends no attempt.
            (
                Outcome::Retry(reason),
                Some(RefusedBy {
                    with_failure: false,
                    ..
                }),
            ) => {
                let by = retry::refused_by(refused_keys.as_deref(), &item);
                let give_up_ms = self.policy.refusal_give_up_ms;
                let (at, after) = (now, ran.retry_after_ms);
                refused(&item, reason, after, retry, give_up_ms, &by, at, jitter)
            }
            _ => {
                let mut t = decide(&item, &ran.outcome, retry, now, jitter);
                defer(&mut t, ran.retry_after_ms, ran.own_delay, retry, now);
                t
            }
        };
        transition.refused_at = learn::is_refusal(&ran).then_some(now);
        if transition.refused_at.is_some() {
            transition.refused_keys = refused_keys;
            self.give_back_siblings(now, &item, transition.refused_keys.as_deref());
        }
        if let Some(mut paced) = ran.paced {
            let keys = ran.paced_keys.clone().unwrap_or_else(|| item.keys());
            if paced.remaining.is_some() {
                let running = self.running.values().map(|r| r.limits.as_deref());
                paced = pace::spent_by_flight(paced, pace::on_their_way(&keys, running), now);
            }
            self.note_budget(now, &keys, paced);
            pace::apply(&mut transition, paced, now);
            // Paused on a spent budget: what is queued for its keys would be refused.
            if transition.paced_at.is_some() && transition.refused_at.is_none() {
                transition.refused_keys = ran.paced_keys.clone();
                self.give_back_siblings(now, &item, ran.paced_keys.as_deref());
            }
        }
        if let Some(until) = transition.paused_until.filter(|&until| until > now) {
            let keys = transition
                .refused_keys
                .clone()
                .unwrap_or_else(|| item.keys());
            self.note_paused(now, keys, until);
        }
        transition.receipts =
            receipts::settle(&item, ran.channels.as_ref(), transition.status, now);
        self.settle(
            now,
            Settled {
                item,
                transition,
                lease_expires_at,
            },
        );
    }

    /// A dispatched item's call threw before any answer: the platform refusing
    /// it, or its child crashing. The platform refuses a request's calls past
    /// its cap, every one of them: a throw at a place no higher than one already
    /// answered ([`Drain::knows_answered`]) is a crash, and so is the
    /// [`THROWS_BEFORE_CRASH`]-th throw running for one item while no answer is
    /// known at all. A crash is a run that spends its attempt (`child crashed:
    /// …`, retried with backoff, failed when its attempts are spent), and the
    /// drain goes on. A refusal spends nothing: the item goes back to `pending`
    /// unrun with its attempt given back, due at once, and so do the claimed
    /// items still queued; the drain dispatches and claims nothing more, and
    /// commits what runs.
    pub fn refused(&mut self, now: i64, item: ClaimedItem, refused: Refused, jitter: f64) {
        let Some(Running {
            lease_expires_at,
            place,
            ..
        }) = self.running.remove(&item.lease_token)
        else {
            debug_assert!(false, "refused() for an item not running: {item:?}");
            return;
        };
        let crashed = place <= self.answered_up_to
            || (self.answered_up_to == 0 && item.given_back + 1 >= THROWS_BEFORE_CRASH);
        if crashed {
            // A run that ended, not an answer: the floor stays where it was.
            let reason = format!("child crashed: {}", refused.0);
            let ran = Outcome::Retry(reason).bounded().into();
            return self.settle_run(now, item, lease_expires_at, ran, jitter);
        }
        // Its subrequest stays charged: whether a refused call counts towards the
        // platform's limits is not documented.
        let refusal = self.refusal.get_or_insert(Refusal {
            message: refused.0,
            item_ids: Vec::new(),
        });
        refusal.item_ids.push(item.item_id);
        if self.stop != Some(StopReason::Error) {
            self.stop = Some(StopReason::Refused);
        }
        let transition = release_refused(&item, true);
        self.settle(
            now,
            Settled {
                item,
                transition,
                lease_expires_at,
            },
        );
        self.give_back_queued(now);
    }

    /// The commit asked for by `Action::Commit` or `Action::CommitAgain`
    /// answered: the ids applied (by this attempt or, for `CommitAgain`, the
    /// failed one before it), or an error.
    pub fn committed(
        &mut self,
        now: i64,
        rows: Vec<Settled>,
        result: Result<Vec<i64>, StoreError>,
    ) {
        let Some(commit) = self.committing.take() else {
            debug_assert!(false, "committed() without a commit");
            return;
        };
        let rt = &mut self.round_trips.commit_ms;
        *rt = (*rt).max(now - commit.sent);
        let error = match result {
            Ok(applied) => {
                // Items that ended may have given their keys' slots back.
                self.held_until = self.held_until.map(|at| at.min(now));
                return self.account(rows, applied);
            }
            Err(error) => error,
        };
        // A retry keeps the flushes for everything else (what is running and what
        // waits behind it) and may spend the retry the plan kept.
        if commit.tries < COMMIT_TRIES
            && may_commit(&self.budget, self.flushes(), 0)
            && self.budget.reserve(1, 0).is_ok()
        {
            self.retries_sent += 1;
            self.reports.push_back(Report::CommitRetry {
                error,
                rows: rows.len(),
            });
            self.committing = Some(Committing {
                tries: commit.tries + 1,
                sent: now,
            });
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
        self.running.len() as i64 + self.queue.len() as i64 + self.claiming.map_or(0, |c| c.asked)
    }

    /// The slowest D1 round trip known at `now`: those seen, and the age of a
    /// claim or commit still out (a call slower than any before is seen while it
    /// runs).
    fn d1_ms(&self, now: i64) -> i64 {
        let claim = self.claiming.map_or(0, |c| now - c.sent);
        let commit = self.committing.map_or(0, |c| now - c.sent);
        self.round_trips.slowest().max(claim).max(commit)
    }

    /// How long an outcome known at `now` may take to be committed.
    fn commit_allowance(&self, now: i64) -> i64 {
        commit_allowance_ms(self.d1_ms(now), self.policy.limits.concurrency)
    }

    /// The same from the answered round trips only: it changes only when a call
    /// answers, so a wake-up time computed from it does not drift (the shell keeps
    /// one timer until the time changes).
    fn answered_commit_allowance(&self) -> i64 {
        commit_allowance_ms(self.round_trips.slowest(), self.policy.limits.concurrency)
    }

    /// The latest time a commit of an item under this lease may land: before the
    /// reaper may take the lease (`lease_expires_at <= now`), and by the deadline.
    fn landing_limit(&self, lease_expires_at: i64) -> i64 {
        (lease_expires_at - 1).min(self.started + self.policy.limits.deadline_ms)
    }

    /// Whether an item dispatched at `now` could overrun: its call and its commit
    /// might not end by its landing limit.
    fn too_late(&self, now: i64, lease_expires_at: i64) -> bool {
        now + call_ms(self.policy.limits.job_timeout_ms) + self.commit_allowance(now)
            > self.landing_limit(lease_expires_at)
    }

    /// Flushes kept for the outcomes not yet in a commit: one per 500 of each
    /// lease expiry, so the oldest claim's outcomes can always be committed before
    /// their lease expires, whatever newer claims still run. A claim still out
    /// keeps the flush its plan counted for its items (`next_claim`): they join
    /// `outstanding` only when it answers, and a commit sent meanwhile must not
    /// spend it.
    fn flushes(&self) -> i64 {
        self.outstanding
            .values()
            .map(|&n| flush_reserve(n))
            .sum::<i64>()
            + self.claim_flushes()
    }

    /// The flushes kept for the items of the claim still out, if any.
    fn claim_flushes(&self) -> i64 {
        self.claiming.map_or(0, |c| flush_reserve(c.asked))
    }

    /// `flushes()` once these rows are in a commit.
    fn flushes_without(&self, rows: &[Settled]) -> i64 {
        let mut taken: BTreeMap<i64, i64> = BTreeMap::new();
        for r in rows {
            *taken.entry(r.lease_expires_at).or_default() += 1;
        }
        self.outstanding
            .iter()
            .map(|(at, &n)| flush_reserve(n - taken.get(at).copied().unwrap_or(0)))
            .sum::<i64>()
            + self.claim_flushes()
    }

    fn retries_kept(&self) -> i64 {
        (RETRY_RESERVE - self.retries_sent).max(0)
    }

    fn plan_state(&self, now: i64) -> DrainState {
        DrainState {
            in_flight: self.running.len() as i64,
            queued: self.queue.len() as i64,
            flushes: self.flushes(),
            retries: self.retries_kept(),
            elapsed_ms: now - self.started,
            wind_down_ms: wind_down_ms(self.d1_ms(now), self.policy.limits.concurrency),
            drained: self.drained,
            children: self.dispatched + self.queue.len() as i64,
            cover: self.first_dispatch.and_then(|first| {
                // Dispatched and no longer running: answered or refused.
                let finished = self.dispatched - self.running.len() as i64;
                let limits = &self.policy.limits;
                let sample = limits.claim_chunk.max(limits.concurrency);
                cover_items(finished, now - first, self.d1_ms(now), sample)
            }),
        }
    }

    /// An outcome (or a release) waits for its commit.
    fn settle(&mut self, now: i64, settled: Settled) {
        let at = settled.lease_expires_at;
        self.buffer_oldest = Some(self.buffer_oldest.map_or(at, |oldest| oldest.min(at)));
        self.buffer.push(settled);
        if self.flush_timer == FlushTimer::Idle {
            self.flush_timer = FlushTimer::Armed(now + FLUSH_INTERVAL_MS);
        }
    }

    /// Release the queued items that could no longer be dispatched in time: the
    /// deadline is the same for all, so the one with the earliest lease is the
    /// first too late (an item waiting for its slot is released then, unrun).
    fn release_late(&mut self, now: i64) {
        while let Some((at, place)) = self.earliest_queued_lease() {
            if !self.too_late(now, at) {
                return;
            }
            let Some(queued) = self.queue.remove(place) else {
                return;
            };
            self.release_unrun(now, queued);
        }
    }

    /// A queued item goes back to `pending` unrun, its attempt given back, in
    /// the next commit; reported as released.
    fn release_unrun(&mut self, now: i64, queued: Queued) {
        let Queued {
            item,
            lease_expires_at,
        } = queued;
        // Its dispatch was held by its claim; it will not be made.
        self.budget.release(self.policy.limits.per_item_cost);
        self.reports.push_back(Report::Released(item.clone()));
        let transition = release(&item);
        self.settle(
            now,
            Settled {
                item,
                transition,
                lease_expires_at,
            },
        );
    }

    /// The earliest lease expiry among the queued items, and where it is: the
    /// front, unless items claimed ahead were sorted by their slots (then a
    /// later claim's item may be in front of an earlier one's).
    fn earliest_queued_lease(&self) -> Option<(i64, usize)> {
        if !self.queue_by_slot {
            return self.queue.front().map(|q| (q.lease_expires_at, 0));
        }
        self.queue
            .iter()
            .enumerate()
            .map(|(place, q)| (q.lease_expires_at, place))
            .min()
    }

    /// After a refusal: every claimed item still queued goes back unrun.
    fn give_back_queued(&mut self, now: i64) {
        if self.refusal.is_none() {
            return;
        }
        while let Some(Queued {
            item,
            lease_expires_at,
        }) = self.queue.pop_front()
        {
            // Its dispatch was held by its claim; it will not be made.
            self.budget.release(self.policy.limits.per_item_cost);
            if let Some(refusal) = self.refusal.as_mut() {
                refusal.item_ids.push(item.item_id);
            }
            let transition = release_refused(&item, false);
            self.settle(
                now,
                Settled {
                    item,
                    transition,
                    lease_expires_at,
                },
            );
        }
    }

    fn dispatch(&mut self, now: i64, queued: Queued) -> Action {
        let Queued {
            item,
            lease_expires_at,
        } = queued;
        self.dispatched += 1;
        let place = self.dispatched;
        self.running.insert(
            item.lease_token.clone(),
            Running {
                lease_expires_at,
                place,
                limits: item.limits.clone(),
            },
        );
        self.first_dispatch.get_or_insert(now);
        // Paid from what its claim held.
        let paid = self.budget.charge(self.policy.limits.per_item_cost);
        debug_assert!(paid.is_ok(), "a claimed item's dispatch is held: {paid:?}");
        let new_watchdog = self.watchdog.start(now);
        Action::Dispatch { item, new_watchdog }
    }

    fn claim(&mut self, now: i64, k: i64) -> Action {
        // Hold the statement and every item it may return now, so a commit that
        // runs while the claim is out cannot spend it.
        let held = self.budget.reserve(1, k * self.policy.limits.per_item_cost);
        debug_assert!(held.is_ok(), "next_claim takes only what is free: {held:?}");
        let lease_expires_at = now + self.policy.limits.lease_ms;
        self.claiming = Some(Claiming {
            asked: k,
            sent: now,
            lease_expires_at,
        });
        Action::Claim {
            limit: k,
            lease_expires_at,
        }
    }

    /// Whether the oldest waiting outcome's commit must start now to land before
    /// its lease expires.
    fn lease_due(&self, now: i64) -> bool {
        self.oldest_waiting()
            .is_some_and(|at| self.landing_limit(at) - self.commit_allowance(now) <= now)
    }

    /// The earliest lease expiry among the waiting outcomes.
    fn oldest_waiting(&self) -> Option<i64> {
        self.buffer_oldest
    }

    /// When to wake up if nothing answers first: the flush timer, the moment the
    /// front of the queue may start (its rate's slot) or could no longer be
    /// dispatched in time, the moment the
    /// oldest waiting outcome's commit must start (both at the answered round
    /// trips: a call still out only moves them earlier, and its answer wakes the
    /// machine anyway). A moment already past whose commit is held back (by the
    /// budget, or a commit still out) waits for an answer instead.
    fn wake_at(&self, now: i64) -> Option<i64> {
        let timer = match self.flush_timer {
            FlushTimer::Armed(at) => Some(at),
            FlushTimer::Idle | FlushTimer::Fired => None,
        };
        let allowance = self.answered_commit_allowance();
        let release = self.earliest_queued_lease().map(|(at, _)| {
            self.landing_limit(at) - call_ms(self.policy.limits.job_timeout_ms) - allowance + 1
        });
        let commit = self
            .oldest_waiting()
            .map(|at| self.landing_limit(at) - allowance)
            .filter(|&at| at > now && self.committing.is_none());
        let held = self
            .held_until
            .filter(|&at| at > now && self.claiming.is_none() && self.stop.is_none());
        let slot =
            self.queue.front().map(|q| q.item.start_at).filter(|&at| {
                at > now && (self.running.len() as i64) < self.policy.limits.concurrency
            });
        [timer, release, commit, held, slot, self.budget_wake(now)]
            .into_iter()
            .flatten()
            .min()
    }
}

#[cfg(test)]
mod tests;
