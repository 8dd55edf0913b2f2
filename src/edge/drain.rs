//! The drain's shell: carries out what `core::drain::Drain` decides — dispatches
//! (SELF or inline), claims and commits through the metered store, the flush
//! timer — and feeds back what happened. Every decision is the machine's.
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

use super::config::Config;
use super::dispatch::{execute, Watchdog};
use super::run::Runner;
use super::{clock, log};
use crate::core::drain::{Action, Drain, DrainError, Policy, Refused, Report, Settled};
use crate::core::model::{ClaimedItem, ItemStatus, Ran, StopReason, Tally};
use crate::core::settings::DispatchMode;
use crate::core::timing::call_ms;
use crate::store::d1::D1Db;
use crate::store::metered::Metered;
use crate::store::{Store, StoreError, StoreResult};

/// The store of a scheduled invocation: every D1 call charged to its budget.
pub type DrainStore = Store<Metered<D1Db>>;

/// A running commit; its rows come back with the result.
type Committing<'a> = LocalBoxFuture<'a, (Vec<Settled>, StoreResult<Vec<i64>>)>;

/// What woke the loop.
enum Event {
    Claimed(StoreResult<Vec<ClaimedItem>>),
    Committed(Vec<Settled>, StoreResult<Vec<i64>>),
    Finished(ClaimedItem, Result<Ran, Refused>),
    Timer,
}

/// Drain due items until the machine is done; returns its tally, and why it
/// stopped or the claim error that stopped it.
/// `started`: when the invocation started (the deadline counts from it);
/// `prepare_ms`: how long its first D1 step took (the first claim is sized by it).
/// `runner`: the Worker's kinds and its `Env` (the service bindings items of
/// kind `service` call, run here in the drain).
pub async fn run(
    cfg: &Config,
    runner: Runner<'_>,
    store: &DrainStore,
    self_service: Option<&Fetcher>,
    started: i64,
    prepare_ms: i64,
) -> (Tally, Result<StopReason, DrainError>) {
    let s = &cfg.settings;
    let per_item_cost = match s.dispatch_mode {
        DispatchMode::Fanout => 1,
        DispatchMode::Inline => runner.jobs.max_subrequests_per_run(),
    };
    let budget = store.db().budget().clone();
    let mut machine = Drain::new(Policy::new(s, per_item_cost), budget, started);
    machine.set_kind_retry(runner.jobs.retry_policies(s.retry));
    machine.prepared(prepare_ms);
    let mut watchdog = Watchdog::new(call_ms(s.job_timeout_ms));
    let mut in_flight = FuturesUnordered::new();
    let mut claiming: Option<LocalBoxFuture<'_, StoreResult<Vec<ClaimedItem>>>> = None;
    let mut committing: Option<Committing<'_>> = None;
    // The flush timer the machine asked for, kept until it names another time.
    let mut timer: Option<(i64, Delay)> = None;
    let mut claim_error: Option<StoreError> = None;
    // The runtime's clock moves only with I/O: a fired timer has reached its time
    // even if the clock says otherwise, and time never runs backwards for the
    // machine.
    let mut floor = started;
    loop {
        let now = clock::now_ms().max(floor);
        let until = loop {
            match machine.poll(now) {
                Action::Dispatch { item, new_watchdog } => {
                    let via = self_service.map(|svc| (svc, watchdog.signal(new_watchdog)));
                    in_flight.push(execute(cfg, runner, via, item));
                }
                Action::Claim {
                    limit,
                    lease_expires_at,
                } => {
                    let token = clock::random_id();
                    let claim = async move {
                        store
                            .claim_due_items(now, limit, &token, lease_expires_at)
                            .await
                    };
                    claiming = Some(claim.boxed_local());
                }
                Action::Commit(rows) => committing = Some(commit(store, rows, false)),
                Action::CommitAgain(rows) => committing = Some(commit(store, rows, true)),
                Action::Wait(until) => break until,
                Action::Done(stop) => {
                    log_reports(&mut machine, &mut claim_error);
                    let result = claim_error.map_or(Ok(stop), |e| Err(DrainError::Claim(e)));
                    return (machine.into_tally(), result);
                }
            }
        };
        log_reports(&mut machine, &mut claim_error);
        match until {
            Some(at) if timer.as_ref().is_some_and(|(t, _)| *t == at) => {}
            Some(at) => {
                let wait = Duration::from_millis((at - now).max(0) as u64);
                timer = Some((at, Delay::from(wait)));
            }
            None => timer = None,
        }

        let event = poll_fn(|cx| {
            if let Some(f) = claiming.as_mut() {
                if let Poll::Ready(r) = f.as_mut().poll(cx) {
                    return Poll::Ready(Event::Claimed(r));
                }
            }
            if let Some(f) = committing.as_mut() {
                if let Poll::Ready((rows, r)) = f.as_mut().poll(cx) {
                    return Poll::Ready(Event::Committed(rows, r));
                }
            }
            if let Poll::Ready(Some((item, ran))) = in_flight.poll_next_unpin(cx) {
                return Poll::Ready(Event::Finished(item, ran));
            }
            if let Some((_, t)) = timer.as_mut() {
                if t.poll_unpin(cx).is_ready() {
                    return Poll::Ready(Event::Timer);
                }
            }
            Poll::Pending
        })
        .await;

        let now = clock::now_ms().max(floor);
        floor = now;
        match event {
            Event::Claimed(result) => {
                claiming = None;
                machine.claimed(now, result);
            }
            Event::Committed(rows, result) => {
                committing = None;
                machine.committed(now, rows, result);
            }
            Event::Finished(item, Ok(ran)) => machine.finished(now, item, ran, clock::jitter()),
            Event::Finished(item, Err(refused)) => machine.refused(now, item, refused),
            Event::Timer => {
                if let Some((at, _)) = timer.take() {
                    floor = now.max(at);
                    machine.timer(floor);
                }
            }
        }
        log_reports(&mut machine, &mut claim_error);
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
fn log_reports(machine: &mut Drain, claim_error: &mut Option<StoreError>) {
    // Log lines are built only for the items that get one: completions are the
    // hot path and report nothing.
    let ids = |item: &ClaimedItem| {
        json!({
            "batch_id": item.batch_id, "item_id": item.item_id, "subject_id": item.subject_id,
            "attempt": item.attempt,
        })
    };
    while let Some(report) = machine.next_report() {
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
                log::event(name, line);
            }
            Report::LeaseLost(item) => log::event("lease_lost", ids(&item)),
            Report::Released(item) => log::event("item_released", ids(&item)),
            Report::ClaimFailed(e) => *claim_error = Some(e),
            Report::DispatchRefused { message, item_ids } => log::error(
                "dispatch_refused",
                json!({
                    "message": message, "given_back": item_ids.len(), "item_ids": item_ids,
                    "note": "given back unrun with their attempts, due at once; lower MAX_CHILD_INVOCATIONS if this recurs",
                }),
            ),
            Report::CommitRetry { error, rows } => log::error(
                "commit_retry",
                json!({ "message": error.to_string(), "rows": rows }),
            ),
            Report::CommitFailed { error, item_ids } => log::error(
                "commit_failed",
                json!({
                    "message": error.to_string(), "item_ids": item_ids,
                    "note": "unless the failed attempt applied them, leases will expire and the reaper requeues them",
                }),
            ),
        }
    }
}
