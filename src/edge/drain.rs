//! Scheduled invocations: create the daily batch or reap expired leases, then
//! drain due items through `SELF` (or inline) with a sliding window, group-commit
//! their outcomes, mark finished batches and record one summary.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use std::task::Poll;

use futures::future::{poll_fn, LocalBoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use serde_json::{json, Value};
use worker::{web_sys, Delay, Env, Fetcher, Request, ScheduledEvent};

use super::config::Config;
use super::run::{run_with_timeout, SIGNATURE_HEADER};
use super::{clock, log, SELF_ORIGIN};
use crate::core::budget::{
    may_flush, next_claim, Budget, DrainLimits, DrainState, NextClaim, StopReason, FLUSH_MAX_ROWS,
};
use crate::core::model::{ClaimedItem, ItemStatus, Outcome, Transition};
use crate::core::retry::decide;
use crate::core::settings::{DispatchMode, DISPATCH_GRACE_MS};
use crate::core::{dispatch, signature, time, watchdog};
use crate::jobs;
use crate::store::d1::D1Db;
use crate::store::{BatchSource, Created, Store, StoreError, StoreResult};

/// Group-commit interval: an outcome waits at most this long (plus a running flush)
/// before its commit starts; a commit also starts once FLUSH_MAX_ROWS are waiting.
const FLUSH_INTERVAL_MS: i64 = 100;
/// Expired leases requeued per tick (one statement).
const REAP_PAGE: i64 = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Daily,
    Tick,
}

/// What one invocation did; logged once and stored as one row.
#[derive(Debug, Default)]
struct Tally {
    batch_ids: BTreeSet<String>,
    claimed: i64,
    completed: i64,
    retried: i64,
    failed: i64,
    lost_leases: i64,
    reaped: i64,
}

type Store1 = Store<D1Db>;

pub async fn on_schedule(event: ScheduledEvent, env: Env) {
    let started = clock::now_ms();
    let cfg = match Config::get(&env) {
        Ok(cfg) => cfg,
        Err(e) => return log::error("invalid_configuration", json!({ "message": e })),
    };
    let store = match env.d1("DB") {
        Ok(db) => Store::new(D1Db::new(db)),
        Err(e) => {
            return log::error(
                "invalid_configuration",
                json!({ "message": format!("binding DB: {e}") }),
            )
        }
    };
    let trigger = if event.cron().trim() == cfg.settings.daily_cron {
        Trigger::Daily
    } else {
        Trigger::Tick
    };
    let mut budget = Budget::new(cfg.settings.subrequest_budget);
    let mut tally = Tally::default();
    let result = run_invocation(
        &env,
        &cfg,
        &store,
        &mut budget,
        &mut tally,
        trigger,
        event.schedule() as i64,
        started,
    )
    .await;
    let stop_reason = match &result {
        Ok(reason) => reason.as_str().to_string(),
        Err(e) => {
            log::error("invocation_failed", json!({ "message": e }));
            "error".to_string()
        }
    };
    record_summary(&store, &mut budget, &tally, trigger, started, &stop_reason).await;
}

#[allow(clippy::too_many_arguments)]
async fn run_invocation(
    env: &Env,
    cfg: &Config,
    store: &Store1,
    budget: &mut Budget,
    tally: &mut Tally,
    trigger: Trigger,
    scheduled_ms: i64,
    started: i64,
) -> Result<StopReason, String> {
    match trigger {
        Trigger::Daily => {
            let key = time::daily_batch_key(scheduled_ms);
            budget.spend(2).map_err(|e| e.to_string())?;
            let created = store
                .create_batch(
                    &clock::random_id(),
                    &key,
                    clock::now_ms(),
                    cfg.settings.max_attempts,
                    BatchSource::ActiveSubjects,
                )
                .await
                .map_err(|e| e.to_string())?;
            let (row, new) = match created {
                Created::New(row) => (row, true),
                Created::Existing(row) => (row, false),
            };
            log::event(
                if new { "batch_created" } else { "batch_exists" },
                json!({ "batch_id": row.id, "key": row.key, "total": row.total }),
            );
        }
        Trigger::Tick => {
            budget.spend(1).map_err(|e| e.to_string())?;
            let reaped = store
                .reap_expired_leases(clock::now_ms(), REAP_PAGE)
                .await
                .map_err(|e| e.to_string())?;
            tally.reaped = reaped.len() as i64;
            for r in &reaped {
                log::event(
                    "lease_expired",
                    json!({ "batch_id": r.batch_id, "item_id": r.id, "status": r.status }),
                );
            }
        }
    }
    let self_service = match cfg.settings.dispatch_mode {
        DispatchMode::Fanout => Some(
            env.service("SELF")
                .map_err(|e| format!("binding SELF: {e}"))?,
        ),
        DispatchMode::Inline => None,
    };
    let stop = Drain {
        cfg,
        store,
        self_service: self_service.as_ref(),
        started,
    }
    .run(budget, tally)
    .await?;

    // The tail reserved by the budget plan: finish batches, then the summary.
    budget.spend(1).map_err(|e| e.to_string())?;
    let finished = store
        .finish_batches(clock::now_ms())
        .await
        .map_err(|e| e.to_string())?;
    for b in finished {
        log::event(
            "batch_finished",
            json!({
                "batch_id": b.id, "key": b.key, "total": b.total, "completed": b.completed,
                "failed": b.failed, "duration_ms": b.finished_at - b.created_at,
            }),
        );
    }
    Ok(stop)
}

struct Drain<'a> {
    cfg: &'a Config,
    store: &'a Store1,
    self_service: Option<&'a Fetcher>,
    started: i64,
}

/// What woke the drain loop.
enum Event {
    Claimed(StoreResult<Vec<ClaimedItem>>),
    Flushed(Vec<(ClaimedItem, Transition)>, StoreResult<Vec<i64>>),
    Finished(ClaimedItem, Outcome),
    FlushTimer,
}

type Flushing<'a> = LocalBoxFuture<'a, (Vec<(ClaimedItem, Transition)>, StoreResult<Vec<i64>>)>;

impl<'a> Drain<'a> {
    /// The sliding window: keep up to DISPATCH_CONCURRENCY items running, refill by
    /// claiming, commit outcomes in groups, stop claiming before the budget or the
    /// deadline runs out, and never return with an outcome uncommitted.
    ///
    /// Claims and group commits run concurrently with the calls in flight (one of
    /// each at a time): awaiting a D1 round trip inline would stall every running
    /// call's completion and the next dispatch behind it.
    async fn run(&self, budget: &mut Budget, tally: &mut Tally) -> Result<StopReason, String> {
        let s = &self.cfg.settings;
        let limits = DrainLimits {
            concurrency: s.dispatch_concurrency,
            claim_chunk: s.claim_chunk,
            per_item_cost: match s.dispatch_mode {
                DispatchMode::Fanout => 1,
                DispatchMode::Inline => jobs::max_subrequests_per_run(),
            },
            job_timeout_ms: s.job_timeout_ms,
            deadline_ms: s.invocation_deadline_ms,
        };
        let mut watchdog = Watchdog::new(s.job_timeout_ms + DISPATCH_GRACE_MS);
        let mut in_flight: FuturesUnordered<LocalBoxFuture<'a, (ClaimedItem, Outcome)>> =
            FuturesUnordered::new();
        let mut queue: VecDeque<ClaimedItem> = VecDeque::new();
        let mut buffer: Vec<(ClaimedItem, Transition)> = Vec::new();
        let mut claiming: Option<(i64, LocalBoxFuture<'a, StoreResult<Vec<ClaimedItem>>>)> = None;
        let mut flushing: Option<(u8, Flushing<'a>)> = None;
        // Outcomes wait at most FLUSH_INTERVAL_MS for a group commit.
        let mut flush_timer: Option<Delay> = None;
        let mut timer_fired = false;
        let mut drained = false;
        let mut stop: Option<StopReason> = None;
        let mut failure: Option<String> = None;

        loop {
            while (in_flight.len() as i64) < limits.concurrency {
                let Some(item) = queue.pop_front() else { break };
                let via = self
                    .self_service
                    .map(|service| (service, watchdog.signal(clock::now_ms())));
                in_flight.push(Box::pin(execute(self.cfg, via, item)));
            }
            // Claimed (or being claimed) items without an outcome yet; outcomes inside
            // a running flush were paid for when that flush started.
            let claiming_k = claiming.as_ref().map_or(0, |(k, _)| *k);
            let unfinished = (in_flight.len() + queue.len()) as i64 + claiming_k;
            if claiming.is_none() && stop.is_none() {
                let state = DrainState {
                    in_flight: in_flight.len() as i64,
                    queued: queue.len() as i64,
                    buffered: buffer.len() as i64,
                    elapsed_ms: clock::now_ms() - self.started,
                    drained,
                };
                match next_claim(budget, limits, state) {
                    NextClaim::Take(k) => {
                        // Pay for the statement and every item it may return now, so a
                        // flush that runs while the claim is out cannot spend it.
                        budget
                            .spend(1 + k * limits.per_item_cost)
                            .map_err(|e| e.to_string())?;
                        let now = clock::now_ms();
                        let token = clock::random_id();
                        let store = self.store;
                        claiming = Some((
                            k,
                            Box::pin(async move {
                                store
                                    .claim_due_items(now, k, &token, now + s.lease_ms)
                                    .await
                            }),
                        ));
                    }
                    NextClaim::Hold => {}
                    NextClaim::Stop(reason) => stop = Some(reason),
                }
            }
            // Commits are paced by the timer, not by a row count: one statement per
            // FLUSH_INTERVAL_MS carries every outcome of that interval. Flushing every
            // CLAIM_CHUNK outcomes cost a D1 call per chunk, and a local D1 call costs
            // about 1 ms of the runtime's CPU (docs/benchmarks.md).
            let due = buffer.len() as i64 >= FLUSH_MAX_ROWS || timer_fired;
            if flushing.is_none() && due && may_flush(budget, unfinished, buffer.len() as i64) {
                budget.spend(1).map_err(|e| e.to_string())?;
                let rows = std::mem::take(&mut buffer);
                flushing = Some((1, self.commit(rows)));
                flush_timer = None;
                timer_fired = false;
            }
            if in_flight.is_empty() && queue.is_empty() && claiming.is_none() && flushing.is_none()
            {
                break;
            }
            if !buffer.is_empty() && flush_timer.is_none() && !timer_fired {
                flush_timer = Some(Delay::from(Duration::from_millis(FLUSH_INTERVAL_MS as u64)));
            }

            let event = poll_fn(|cx| {
                if let Some((_, f)) = claiming.as_mut() {
                    if let Poll::Ready(r) = f.as_mut().poll(cx) {
                        return Poll::Ready(Event::Claimed(r));
                    }
                }
                if let Some((_, f)) = flushing.as_mut() {
                    if let Poll::Ready((rows, r)) = f.as_mut().poll(cx) {
                        return Poll::Ready(Event::Flushed(rows, r));
                    }
                }
                if let Poll::Ready(Some((item, outcome))) = in_flight.poll_next_unpin(cx) {
                    return Poll::Ready(Event::Finished(item, outcome));
                }
                if let Some(t) = flush_timer.as_mut() {
                    if t.poll_unpin(cx).is_ready() {
                        return Poll::Ready(Event::FlushTimer);
                    }
                }
                Poll::Pending
            })
            .await;

            match event {
                Event::Claimed(result) => {
                    let (asked, _) = claiming.take().expect("a claim was running");
                    match result {
                        Ok(items) => {
                            let got = items.len() as i64;
                            drained = got < asked;
                            budget.refund((asked - got) * limits.per_item_cost);
                            tally.claimed += got;
                            for item in items {
                                tally.batch_ids.insert(item.batch_id.clone());
                                queue.push_back(item);
                            }
                        }
                        Err(e) => {
                            budget.refund(asked * limits.per_item_cost);
                            // Stop claiming but still commit what is running.
                            failure = Some(format!("claim: {e}"));
                            stop = Some(StopReason::Error);
                        }
                    }
                }
                Event::Flushed(rows, result) => {
                    let (tries, _) = flushing.take().expect("a flush was running");
                    match result {
                        Ok(applied) => self.account(&rows, &applied, tally),
                        // Commits are fenced, so repeating one never applies anything twice.
                        Err(e) if tries < 2 && may_flush(budget, unfinished, rows.len() as i64) => {
                            log::error(
                                "commit_retry",
                                json!({ "message": e.to_string(), "rows": rows.len() }),
                            );
                            budget.spend(1).map_err(|e| e.to_string())?;
                            flushing = Some((tries + 1, self.commit(rows)));
                        }
                        Err(e) => log_commit_failure(&rows, &e),
                    }
                }
                Event::Finished(item, outcome) => {
                    let t = decide(&item, &outcome, s.retry, clock::now_ms(), clock::jitter());
                    buffer.push((item, t));
                }
                Event::FlushTimer => {
                    flush_timer = None;
                    timer_fired = true;
                }
            }
        }
        // Everything has answered: commit what is left, in as many statements as the
        // plan reserved.
        while !buffer.is_empty() {
            let rest = buffer.split_off(buffer.len().min(FLUSH_MAX_ROWS as usize));
            let rows = std::mem::replace(&mut buffer, rest);
            budget.spend(1).map_err(|e| e.to_string())?;
            let (rows, result) = self.commit(rows).await;
            match result {
                Ok(applied) => self.account(&rows, &applied, tally),
                Err(e) => log_commit_failure(&rows, &e),
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(stop.unwrap_or(StopReason::Drained)),
        }
    }

    /// One group-commit statement (budget already spent by the caller).
    fn commit(&self, rows: Vec<(ClaimedItem, Transition)>) -> Flushing<'a> {
        let store = self.store;
        Box::pin(async move {
            let transitions: Vec<Transition> = rows.iter().map(|(_, t)| t.clone()).collect();
            let result = store.commit_outcomes(&transitions).await;
            (rows, result)
        })
    }

    /// Count applied outcomes; rows that lost their lease are counted and logged,
    /// never overwritten.
    fn account(&self, rows: &[(ClaimedItem, Transition)], applied: &[i64], tally: &mut Tally) {
        let applied: BTreeSet<i64> = applied.iter().copied().collect();
        // Log lines are built only for the items that get one: completions are the
        // hot path and log nothing.
        let ids = |item: &ClaimedItem| {
            json!({
                "batch_id": item.batch_id, "item_id": item.item_id, "subject_id": item.subject_id,
                "attempt": item.attempt,
            })
        };
        for (item, t) in rows {
            if !applied.contains(&item.item_id) {
                tally.lost_leases += 1;
                log::event("lease_lost", ids(item));
                continue;
            }
            match t.status {
                ItemStatus::Completed => tally.completed += 1,
                ItemStatus::Pending => {
                    tally.retried += 1;
                    log::event("item_retry", with(ids(item), "error", &t.error));
                }
                ItemStatus::Failed => {
                    tally.failed += 1;
                    log::event("item_failed", with(ids(item), "error", &t.error));
                }
                ItemStatus::Processing => {}
            }
        }
    }
}

fn log_commit_failure(rows: &[(ClaimedItem, Transition)], e: &StoreError) {
    let ids: Vec<i64> = rows.iter().map(|(i, _)| i.item_id).collect();
    log::error(
        "commit_failed",
        json!({ "message": e.to_string(), "item_ids": ids, "note": "leases will expire and the reaper requeues them" }),
    );
}

/// Abandons dispatches that outlive their limit: the platform's own
/// `AbortSignal.timeout`, one per cohort of dispatches (`core::watchdog`). One per
/// dispatch crashed fast drains on the runtime's cap of live timers.
struct Watchdog {
    limit_ms: i64,
    current: Option<(i64, web_sys::AbortSignal)>,
}

impl Watchdog {
    fn new(limit_ms: i64) -> Watchdog {
        Watchdog {
            limit_ms,
            current: None,
        }
    }

    fn signal(&mut self, now: i64) -> web_sys::AbortSignal {
        match &self.current {
            Some((created, signal)) if !watchdog::needs_new_timer(Some(*created), now) => {
                signal.clone()
            }
            _ => {
                let signal = web_sys::AbortSignal::timeout_with_u32(self.limit_ms as u32);
                self.current = Some((now, signal.clone()));
                signal
            }
        }
    }
}

/// Run one claimed item: through SELF (its own invocation, abandoned when the
/// signal fires) or inline.
async fn execute(
    cfg: &Config,
    via: Option<(&Fetcher, web_sys::AbortSignal)>,
    item: ClaimedItem,
) -> (ClaimedItem, Outcome) {
    let s = &cfg.settings;
    let outcome = match via {
        // The child enforces the job timeout; the dispatch's own limit only guards
        // against a child that never answers.
        Some((service, signal)) => dispatch(service, &cfg.dispatch_secret, &item, &signal).await,
        None => run_with_timeout(&item, &cfg.webhook_secret, s.job_timeout_ms).await,
    };
    (item, outcome)
}

fn with(mut v: Value, key: &str, value: &Option<String>) -> Value {
    if let Value::Object(map) = &mut v {
        map.insert(key.into(), json!(value));
    }
    v
}

/// One signed `POST /internal/run` through the SELF binding, abandoned when
/// `signal` (the drain's [`Watchdog`]) fires.
async fn dispatch(
    service: &Fetcher,
    secret: &str,
    item: &ClaimedItem,
    signal: &web_sys::AbortSignal,
) -> Outcome {
    let body = match serde_json::to_string(item) {
        Ok(b) => b,
        Err(e) => return Outcome::Retry(format!("cannot encode item: {e}")),
    };
    let sig = signature::sign(secret, clock::now_ms() / 1_000, body.as_bytes());
    let request = (|| -> Result<Request, worker::wasm_bindgen::JsValue> {
        let headers = web_sys::Headers::new()?;
        headers.set(SIGNATURE_HEADER, &sig)?;
        let init = web_sys::RequestInit::new();
        init.set_method("POST");
        // The item rides in a header unless it is too long for one (core::dispatch).
        match dispatch::item_header(&body) {
            Some(value) => headers.set(dispatch::ITEM_HEADER, &value)?,
            None => {
                headers.set("Content-Type", "application/json")?;
                init.set_body(&body.into());
            }
        }
        init.set_headers(&headers);
        init.set_signal(Some(signal));
        web_sys::Request::new_with_str_and_init(&format!("{SELF_ORIGIN}/internal/run"), &init)
            .map(Request::from)
    })();
    let response = match request {
        Ok(req) => match service.fetch_request(req).await {
            Ok(r) => r,
            Err(e) => return Outcome::Retry(format!("dispatch failed: {e}")),
        },
        Err(e) => return Outcome::Retry(format!("cannot build dispatch request: {e:?}")),
    };
    // The outcome is in the headers; the body is never read (core::dispatch).
    if response.status_code() != dispatch::OUTCOME_STATUS {
        return Outcome::Retry(format!("dispatch answered HTTP {}", response.status_code()));
    }
    let header = |name: &str| response.headers().get(name).ok().flatten();
    dispatch::decode(
        header(dispatch::OUTCOME_HEADER).as_deref(),
        header(dispatch::REASON_HEADER).as_deref(),
    )
    .unwrap_or_else(|e| Outcome::Retry(format!("unreadable dispatch answer: {e}")))
}

/// Log the invocation summary once and store it as one row (reserved by the plan).
async fn record_summary(
    store: &Store1,
    budget: &mut Budget,
    tally: &Tally,
    trigger: Trigger,
    started: i64,
    stop_reason: &str,
) {
    let usage = store.usage();
    let mut summary = json!({
        "trigger": match trigger { Trigger::Daily => "daily", Trigger::Tick => "tick" },
        "started_at": started,
        "elapsed_ms": clock::now_ms() - started,
        "batch_ids": tally.batch_ids,
        "claimed": tally.claimed,
        "completed": tally.completed,
        "retried": tally.retried,
        "failed": tally.failed,
        "lost_leases": tally.lost_leases,
        "reaped": tally.reaped,
        // This summary's own insert is included: one statement, one row, one call.
        "subrequests": budget.used() + 1,
        "subrequest_budget": budget.limit(),
        "d1_statements": usage.statements + 1,
        "d1_rows_written": usage.rows_written + 1,
        "stop_reason": stop_reason,
    });
    if budget.spend(1).is_ok() {
        if let Err(e) = store.record_invocation(&summary).await {
            log::error("summary_not_stored", json!({ "message": e.to_string() }));
        }
    } else if let Value::Object(map) = &mut summary {
        // Only after an error path used the tail: say so rather than overspend.
        map.insert("subrequests".into(), json!(budget.used()));
        map.insert("stored".into(), json!(false));
    }
    log::event("invocation", summary);
}
