//! The drain's ports on the Workers runtime: dispatches (SELF or inline), claims
//! and commits through the metered store, the flush timer (`Delay`), the clock
//! and the log. The loop is `drain_loop`'s, every decision the machine's
//! (`core::drain::Drain`).
//!
//! Claims and commits run concurrently with the calls in flight (one of each at
//! a time): awaiting a D1 round trip inline would stall every running call's
//! completion and the next dispatch behind it.

use std::task::Poll;
use std::time::Duration;

use futures::future::{poll_fn, LocalBoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use serde_json::{json, Value};
use worker::{Delay, Fetcher};

use super::clock;
use super::config::Config;
use super::dispatch::{execute, Watchdog};
use super::log::InvocationLog;
use super::run::Runner;
use crate::core::batch::model::{ClaimedItem, ItemStatus, Ran, StopReason, Tally};
use crate::core::drain::timing::call_ms;
use crate::core::drain::{Drain, DrainError, Policy, Refused, Report, Settled};
use crate::core::settings::DispatchMode;
use crate::drain_loop::{self, Event, Ports};
use crate::store::d1::D1Db;
use crate::store::metered::Metered;
use crate::store::{Claim, Claimed, Store, StoreError, StoreResult};

/// The store of a scheduled invocation: every D1 call charged to its budget.
pub type DrainStore = Store<Metered<D1Db>>;

/// A running commit; its rows come back with the result.
type Committing<'a> = LocalBoxFuture<'a, (Vec<Settled>, StoreResult<Vec<i64>>)>;

/// A running dispatch.
type Running<'a> = LocalBoxFuture<'a, (ClaimedItem, Result<Ran, Refused>)>;

/// Drain due items until the machine is done; returns its tally, and why it
/// stopped or the claim error that stopped it.
/// `started`: when the invocation started (the deadline counts from it);
/// `prepare_ms`: how long its first D1 step took (the first claim is sized by it);
/// `logger`: the invocation's log, whose id every dispatch names;
/// `runner`: the Worker's kinds and its `Env` (the service bindings items of
/// kind `service` call, run here in the drain).
pub async fn run(
    cfg: &Config,
    runner: Runner<'_>,
    store: &DrainStore,
    self_service: Option<&Fetcher>,
    started: i64,
    prepare_ms: i64,
    logger: &InvocationLog,
) -> (Tally, Result<StopReason, DrainError>) {
    let s = &cfg.settings;
    let per_item_cost = per_item_cost(cfg, runner.jobs);
    let budget = store.db().budget().clone();
    let mut machine = Drain::new(Policy::new(s, per_item_cost), budget, started);
    machine.set_kind_retry(runner.jobs.retry_policies(s.retry));
    machine.prepared(prepare_ms);
    machine.knows_answered(ANSWERED_UP_TO.get());
    let mut ports = WorkerPorts {
        cfg,
        runner,
        store,
        self_service,
        logger,
        watchdog: Watchdog::new(call_ms(s.job_timeout_ms)),
        in_flight: FuturesUnordered::new(),
        claiming: None,
        claimed: Claimed::default(),
        committing: None,
        timer: None,
        claim_error: None,
    };
    let stop = drain_loop::run(&mut machine, &mut ports).await;
    ANSWERED_UP_TO.set(machine.answered_up_to());
    let result = ports
        .claim_error
        .map_or(Ok(stop), |e| Err(DrainError::Claim(e)));
    (machine.into_tally(), result)
}

thread_local! {
    // The highest place at which a drain of this isolate had a dispatch
    // answered: the platform's cap on a request's calls is a constant, so a later
    // drain's call that throws below it crashed (`Drain::refused`).
    static ANSWERED_UP_TO: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// Subrequests one item costs a drain: its SELF call, or inline the most its
/// kind's run makes.
pub fn per_item_cost(cfg: &Config, jobs: &crate::jobs::Jobs) -> i64 {
    match cfg.settings.dispatch_mode {
        DispatchMode::Fanout => 1,
        DispatchMode::Inline => jobs.max_subrequests_per_run(),
    }
}

/// The loop's ports on the runtime: SELF (or inline) dispatches, the metered
/// store, `Delay` for the flush timer, the runtime's clock and randomness, and
/// the log.
struct WorkerPorts<'a> {
    cfg: &'a Config,
    runner: Runner<'a>,
    store: &'a DrainStore,
    self_service: Option<&'a Fetcher>,
    logger: &'a InvocationLog,
    watchdog: Watchdog,
    in_flight: FuturesUnordered<Running<'a>>,
    claiming: Option<LocalBoxFuture<'a, StoreResult<Claim>>>,
    /// What this drain claimed, so its claims skip its own items in flight.
    claimed: Claimed,
    committing: Option<Committing<'a>>,
    /// The flush timer the machine asked for, kept until it names another time.
    timer: Option<(i64, Delay)>,
    /// A failed claim, kept for the invocation's result.
    claim_error: Option<StoreError>,
}

impl<'a> Ports for WorkerPorts<'a> {
    fn now(&mut self) -> i64 {
        clock::now_ms()
    }

    fn dispatch(&mut self, _now: i64, item: ClaimedItem, new_watchdog: bool) {
        let via = self
            .self_service
            .map(|svc| (svc, self.watchdog.signal(new_watchdog)));
        self.in_flight
            .push(execute(self.cfg, self.runner, via, item, self.logger.id()).boxed_local());
    }

    fn claim(&mut self, now: i64, limit: i64, lease_expires_at: i64) {
        let store = self.store;
        let token = clock::short_id();
        let claimed = self.claimed.clone();
        let claim = async move {
            store
                .claim_due_items_after(now, limit, &token, lease_expires_at, &claimed)
                .await
        };
        self.claiming = Some(claim.boxed_local());
    }

    fn commit(&mut self, _now: i64, rows: Vec<Settled>, again: bool) {
        self.committing = Some(commit(self.store, rows, again));
    }

    async fn wait(&mut self, until: Option<i64>) -> Event {
        match until {
            Some(at) if self.timer.as_ref().is_some_and(|(t, _)| *t == at) => {}
            Some(at) => {
                let wait = Duration::from_millis((at - clock::now_ms()).max(0) as u64);
                self.timer = Some((at, Delay::from(wait)));
            }
            None => self.timer = None,
        }
        poll_fn(|cx| {
            if let Some(f) = self.claiming.as_mut() {
                if let Poll::Ready(r) = f.as_mut().poll(cx) {
                    self.claiming = None;
                    if let Ok(claim) = &r {
                        self.claimed.note(claim);
                    }
                    let held_until = r.as_ref().ok().and_then(|c| c.held_until);
                    return Poll::Ready(Event::Claimed(r.map(|c| c.items), held_until));
                }
            }
            if let Some(f) = self.committing.as_mut() {
                if let Poll::Ready((rows, r)) = f.as_mut().poll(cx) {
                    self.committing = None;
                    return Poll::Ready(Event::Committed(rows, r));
                }
            }
            if let Poll::Ready(Some((item, ran))) = self.in_flight.poll_next_unpin(cx) {
                return Poll::Ready(Event::Finished(item, ran));
            }
            if let Some((_, t)) = self.timer.as_mut() {
                if t.poll_unpin(cx).is_ready() {
                    self.timer = None;
                    return Poll::Ready(Event::Timer);
                }
            }
            Poll::Pending
        })
        .await
    }

    fn jitter(&mut self) -> f64 {
        clock::jitter()
    }

    fn report(&mut self, report: Report) {
        log_report(report, &mut self.claim_error, self.logger);
    }
}

/// One group-commit call; the rows come back with the result. `again`: after a
/// failed attempt, also read back what that attempt applied.
fn commit(store: &DrainStore, rows: Vec<Settled>, again: bool) -> Committing<'_> {
    async move {
        let transitions = rows.iter().map(|r| &r.transition);
        let result = if again {
            store.recommit_outcomes(transitions).await
        } else {
            store.commit_outcomes(transitions).await
        };
        (rows, result)
    }
    .boxed_local()
}

/// Log what the machine reported; a failed claim is kept for the invocation's
/// result instead.
fn log_report(report: Report, claim_error: &mut Option<StoreError>, logger: &InvocationLog) {
    // Log lines are built only for the items that get one: completions are the
    // hot path and report nothing.
    let ids = |item: &ClaimedItem| {
        json!({
            "batch_id": item.batch_id, "item_id": item.item_id, "subject_id": item.subject_id,
            "attempt": item.attempt,
        })
    };
    match report {
        Report::Settled(Settled {
            item, transition, ..
        }) => {
            let name = match (item.is_callback(), transition.status) {
                (false, ItemStatus::Pending) => "item_retry",
                (false, _) => "item_failed",
                (true, ItemStatus::Completed) => "callback_delivered",
                (true, ItemStatus::Pending) => "callback_retry",
                (true, _) => "callback_failed",
            };
            let mut line = ids(&item);
            if let Value::Object(map) = &mut line {
                map.insert("error".into(), json!(transition.error));
            }
            logger.event(name, line);
        }
        Report::LeaseLost(item) => logger.event("lease_lost", ids(&item)),
        Report::Released(item) => logger.event("item_released", ids(&item)),
        Report::ClaimFailed(e) => *claim_error = Some(e),
        Report::DispatchRefused { message, item_ids } => logger.error(
            "dispatch_refused",
            json!({
                "message": message, "given_back": item_ids.len(), "item_ids": item_ids,
                "note": "given back unrun with their attempts, due at once; lower MAX_CHILD_INVOCATIONS if this recurs",
            }),
        ),
        Report::CommitRetry { error, rows } => logger.error(
            "commit_retry",
            json!({ "message": error.to_string(), "rows": rows }),
        ),
        Report::CommitFailed { error, item_ids } => logger.error(
            "commit_failed",
            json!({
                "message": error.to_string(), "item_ids": item_ids,
                "note": "unless the failed attempt applied them, leases will expire and the reaper requeues them",
            }),
        ),
    }
}
