//! Scheduled invocations: create the daily batch or reap expired leases, then
//! drain due items through `SELF` (or inline) with a sliding window, group-commit
//! their outcomes, mark finished batches and record one summary.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::{select, Either, LocalBoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{json, Value};
use worker::{Delay, Env, Fetcher, Headers, Method, Request, RequestInit, ScheduledEvent};

use super::config::Config;
use super::run::{run_with_timeout, SIGNATURE_HEADER};
use super::{clock, log};
use crate::core::budget::{
    may_flush, next_claim, Budget, DrainLimits, DrainState, NextClaim, StopReason, FLUSH_MAX_ROWS,
};
use crate::core::model::{ClaimedItem, ItemStatus, Outcome, Transition};
use crate::core::retry::decide;
use crate::core::settings::{DispatchMode, DISPATCH_GRACE_MS};
use crate::core::{signature, time};
use crate::jobs;
use crate::store::d1::D1Db;
use crate::store::{BatchSource, Created, Store};

/// Group-commit interval: outcomes wait at most this long before a flush.
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
    let cfg = match Config::load(&env) {
        Ok(cfg) => cfg,
        Err(e) => return log::error("invalid_configuration", json!({ "message": e })),
    };
    let store = match env.d1("DB") {
        Ok(db) => Store::new(D1Db::new(db)),
        Err(e) => return log::error("invalid_configuration", json!({ "message": format!("binding DB: {e}") })),
    };
    let trigger = if event.cron().trim() == cfg.settings.daily_cron {
        Trigger::Daily
    } else {
        Trigger::Tick
    };
    let mut budget = Budget::new(cfg.settings.subrequest_budget);
    let mut tally = Tally::default();
    let result = run_invocation(&env, &cfg, &store, &mut budget, &mut tally, trigger, event.schedule() as i64, started).await;
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
                .create_batch(&clock::random_id(), &key, clock::now_ms(), cfg.settings.max_attempts, BatchSource::ActiveSubjects)
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
                log::event("lease_expired", json!({ "batch_id": r.batch_id, "item_id": r.id, "now": r.status }));
            }
        }
    }
    let self_service = match cfg.settings.dispatch_mode {
        DispatchMode::Fanout => Some(env.service("SELF").map_err(|e| format!("binding SELF: {e}"))?),
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
    let finished = store.finish_batches(clock::now_ms()).await.map_err(|e| e.to_string())?;
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

impl<'a> Drain<'a> {
    /// The sliding window: keep up to DISPATCH_CONCURRENCY items running, refill by
    /// claiming, commit outcomes in groups, stop claiming before the budget or the
    /// deadline runs out, and never return with an outcome uncommitted.
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
        let mut in_flight: FuturesUnordered<LocalBoxFuture<'a, (ClaimedItem, Outcome)>> = FuturesUnordered::new();
        let mut buffer: Vec<(ClaimedItem, Transition)> = Vec::new();
        let mut drained = false;
        let mut stop: Option<StopReason> = None;
        let mut last_flush = clock::now_ms();

        loop {
            if stop.is_none() {
                let state = DrainState {
                    in_flight: in_flight.len() as i64,
                    buffered: buffer.len() as i64,
                    elapsed_ms: clock::now_ms() - self.started,
                    drained,
                };
                match next_claim(budget, limits, state) {
                    NextClaim::Take(k) => {
                        budget.spend(1).map_err(|e| e.to_string())?;
                        let now = clock::now_ms();
                        let items = self
                            .store
                            .claim_due_items(now, k, &clock::random_id(), now + s.lease_ms)
                            .await
                            .map_err(|e| e.to_string())?;
                        drained = (items.len() as i64) < k;
                        tally.claimed += items.len() as i64;
                        for item in items {
                            budget.spend(limits.per_item_cost).map_err(|e| e.to_string())?;
                            tally.batch_ids.insert(item.batch_id.clone());
                            in_flight.push(Box::pin(execute(self.cfg, self.self_service, item)));
                        }
                        continue;
                    }
                    NextClaim::Hold => {}
                    NextClaim::Stop(reason) => stop = Some(reason),
                }
            }
            if in_flight.is_empty() {
                break;
            }
            // Wait for the next outcome, or for the flush interval when outcomes wait.
            let next = if buffer.is_empty() {
                in_flight.next().await
            } else {
                let wait = (last_flush + FLUSH_INTERVAL_MS - clock::now_ms()).max(0) as u64;
                match select(in_flight.next(), Delay::from(Duration::from_millis(wait))).await {
                    Either::Left((next, _)) => next,
                    Either::Right(_) => None,
                }
            };
            if let Some((item, outcome)) = next {
                let t = decide(&item, &outcome, s.retry, clock::now_ms(), clock::jitter());
                buffer.push((item, t));
            }
            let due = buffer.len() as i64 >= s.claim_chunk || clock::now_ms() - last_flush >= FLUSH_INTERVAL_MS;
            if due && may_flush(budget, in_flight.len() as i64, buffer.len() as i64) {
                let rows = std::mem::take(&mut buffer);
                self.flush(rows, budget, tally).await;
                last_flush = clock::now_ms();
            }
        }
        // Everything has answered: commit what is left, in as many statements as the
        // plan reserved.
        while !buffer.is_empty() {
            let rest = buffer.split_off(buffer.len().min(FLUSH_MAX_ROWS as usize));
            let rows = std::mem::replace(&mut buffer, rest);
            self.flush(rows, budget, tally).await;
        }
        Ok(stop.unwrap_or(StopReason::Drained))
    }

    /// Commit a group of outcomes in one statement; a failed statement is tried once
    /// more (commits are fenced, so a repeat never applies anything twice). Rows
    /// that lost their lease are counted and logged, never overwritten.
    async fn flush(&self, rows: Vec<(ClaimedItem, Transition)>, budget: &mut Budget, tally: &mut Tally) {
        let transitions: Vec<Transition> = rows.iter().map(|(_, t)| t.clone()).collect();
        let mut result = Err(crate::store::StoreError("not attempted".into()));
        for attempt in 0..2 {
            // The first try is reserved by the plan; a retry only if budget is left.
            if attempt > 0 && !may_flush(budget, 0, rows.len() as i64) {
                break;
            }
            if budget.spend(1).is_err() {
                break;
            }
            result = self.store.commit_outcomes(&transitions).await;
            if result.is_ok() {
                break;
            }
        }
        let applied: BTreeSet<i64> = match result {
            Ok(ids) => ids.into_iter().collect(),
            Err(e) => {
                let ids: Vec<i64> = rows.iter().map(|(i, _)| i.item_id).collect();
                log::error(
                    "commit_failed",
                    json!({ "message": e.to_string(), "item_ids": ids, "note": "leases will expire and the reaper requeues them" }),
                );
                return;
            }
        };
        for (item, t) in &rows {
            let ids = json!({
                "batch_id": item.batch_id, "item_id": item.item_id, "subject_id": item.subject_id,
                "attempt": item.attempt,
            });
            if !applied.contains(&item.item_id) {
                tally.lost_leases += 1;
                log::event("lease_lost", ids);
                continue;
            }
            match t.status {
                ItemStatus::Completed => tally.completed += 1,
                ItemStatus::Pending => {
                    tally.retried += 1;
                    log::event("item_retry", with(ids, "error", &t.error));
                }
                ItemStatus::Failed => {
                    tally.failed += 1;
                    log::event("item_failed", with(ids, "error", &t.error));
                }
                ItemStatus::Processing => {}
            }
        }
    }
}

/// Run one claimed item: through SELF (its own invocation) or inline.
async fn execute(cfg: &Config, self_service: Option<&Fetcher>, item: ClaimedItem) -> (ClaimedItem, Outcome) {
    let s = &cfg.settings;
    let outcome = match self_service {
        Some(service) => {
            // The child enforces the job timeout; this one only guards against a
            // child that never answers.
            let limit = s.job_timeout_ms + DISPATCH_GRACE_MS;
            let call = Box::pin(dispatch(service, &cfg.dispatch_secret, &item));
            match select(call, Delay::from(Duration::from_millis(limit as u64))).await {
                Either::Left((outcome, _)) => outcome,
                Either::Right(_) => Outcome::Retry(format!("dispatch got no answer within {limit} ms")),
            }
        }
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

/// One signed `POST /internal/run` through the SELF binding.
async fn dispatch(service: &Fetcher, secret: &str, item: &ClaimedItem) -> Outcome {
    let body = match serde_json::to_string(item) {
        Ok(b) => b,
        Err(e) => return Outcome::Retry(format!("cannot encode item: {e}")),
    };
    let sig = signature::sign(secret, clock::now_ms() / 1_000, body.as_bytes());
    let request = (|| {
        let headers = Headers::new();
        headers.set("Content-Type", "application/json")?;
        headers.set(SIGNATURE_HEADER, &sig)?;
        let mut init = RequestInit::new();
        init.with_method(Method::Post)
            .with_headers(headers)
            .with_body(Some(body.into()));
        Request::new_with_init("https://cron-fanout.internal/internal/run", &init)
    })();
    let mut response = match request {
        Ok(req) => match service.fetch_request(req).await {
            Ok(r) => r,
            Err(e) => return Outcome::Retry(format!("dispatch failed: {e}")),
        },
        Err(e) => return Outcome::Retry(format!("cannot build dispatch request: {e}")),
    };
    if response.status_code() != 200 {
        return Outcome::Retry(format!("dispatch answered HTTP {}", response.status_code()));
    }
    match response.json::<Outcome>().await {
        Ok(outcome) => outcome,
        Err(e) => Outcome::Retry(format!("unreadable dispatch answer: {e}")),
    }
}

/// Log the invocation summary once and store it as one row (reserved by the plan).
async fn record_summary(store: &Store1, budget: &mut Budget, tally: &Tally, trigger: Trigger, started: i64, stop_reason: &str) {
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
