//! Scheduled invocations. Every cron runs the same tick: fire due schedules
//! (`Store::fire_due`), reap expired leases, drain due items (`edge::drain`), mark
//! finished batches and record one summary. Every D1 call goes through the
//! invocation's metered store, so the budget counts what was really made.

use serde_json::json;
use worker::{Env, ScheduledEvent};

use super::config::Config;
use super::drain::{self, DrainStore};
use super::{clock, log};
use crate::core::budget::Budget;
use crate::core::callback;
use crate::core::drain::DrainError;
use crate::core::model::{InvocationSummary, ItemStatus, StopReason, Tally, Trigger};
use crate::core::schedule::tick::{Fired, FIRE_PAGE};
use crate::core::settings::DispatchMode;
use crate::core::time::rfc3339;
use crate::core::upkeep::Upkeep;
use crate::store::d1::D1Db;
use crate::store::metered::Metered;
use crate::store::{Store, SUMMARY_ROWS_WRITTEN};

/// Expired leases requeued per tick (one statement).
const REAP_PAGE: i64 = 1_000;

pub async fn on_schedule(_event: ScheduledEvent, env: Env) {
    // The configuration first: it sets the (test) clock every instant is read from.
    let cfg = match Config::get(&env) {
        Ok(cfg) => cfg,
        Err(e) => return log::error("invalid_configuration", json!({ "message": e.message })),
    };
    let started = clock::now_ms();
    let db = match env.d1("DB") {
        Ok(db) => db,
        Err(e) => {
            let message = format!("binding DB: {e}");
            return log::error("invalid_configuration", json!({ "message": message }));
        }
    };
    let budget = Budget::new(cfg.settings.subrequest_budget);
    let store = Store::new(Metered::new(D1Db::new(db), budget));
    let mut tally = Tally::default();
    let result = run_invocation(&env, &cfg, &store, &mut tally, started).await;
    let stop_reason = result.unwrap_or_else(|e| {
        log::error("invocation_failed", json!({ "message": e.to_string() }));
        StopReason::Error
    });
    record_summary(&store, tally, started, stop_reason).await;
}

async fn run_invocation(
    env: &Env,
    cfg: &Config,
    store: &DrainStore,
    tally: &mut Tally,
    started: i64,
) -> Result<StopReason, DrainError> {
    // Firing never fails the tick: a fire that fails on its own backs its schedule
    // off, the others still apply, and the drain below does not depend on it.
    let fired = fire_schedules(cfg, store).await;
    // The reaper's round trip (one statement) sizes the drain's first claim.
    let prepare_from = clock::now_ms();
    let reaped = store
        .reap_expired_leases(clock::now_ms(), REAP_PAGE)
        .await
        .map_err(DrainError::Prepare)?;
    let prepare_ms = clock::now_ms() - prepare_from;
    let mut reaper = Tally {
        reaped: reaped.len() as i64,
        ..Tally::default()
    };
    for r in &reaped {
        // A completion callback is no item of its batch (core::callback).
        if let Some(status) = ItemStatus::parse(&r.status).filter(|_| r.kind != callback::KIND) {
            reaper.count_terminal(&r.batch_id, status);
        }
        log::event(
            "lease_expired",
            json!({ "batch_id": r.batch_id, "item_id": r.id, "status": r.status }),
        );
    }
    let self_service = match cfg.settings.dispatch_mode {
        DispatchMode::Fanout => Some(
            env.service("SELF")
                .map_err(|e| DrainError::Binding(format!("SELF: {e}")))?,
        ),
        DispatchMode::Inline => None,
    };
    let (drained, result) =
        drain::run(cfg, env, store, self_service.as_ref(), started, prepare_ms).await;
    // The reaper's share (reaped, its failures per batch) plus the drain's.
    *tally = drained;
    tally.absorb(reaper);
    // The summary's batches: those the tick created and those it claimed from.
    tally.batch_ids.extend(fired);
    let stop = result?;
    // The tail the plan kept: one call for the upkeep (cancel sweep, retention) and
    // the finish check, then the summary.
    let now = clock::now_ms();
    let finished = store
        .finish_tick(now, &Upkeep::at(now, cfg.settings.retention_days))
        .await
        .map_err(DrainError::Finish)?;
    for b in finished {
        log::event(
            "batch_finished",
            json!({
                "batch_id": b.id, "key": b.key, "status": b.status, "total": b.total,
                "completed": b.completed, "failed": b.failed, "cancelled": b.cancelled,
                "duration_ms": b.finished_at - b.created_at,
            }),
        );
    }
    Ok(stop)
}

/// Fire every due schedule (a page of them), each apart from the others, and log
/// one line per fire (and per fire that failed and backs off); returns the ids of
/// the batches created.
async fn fire_schedules(cfg: &Config, store: &DrainStore) -> Vec<String> {
    let now = clock::now_ms();
    let report = match store
        .fire_due(now, FIRE_PAGE, cfg.settings.max_attempts, &clock::random_id)
        .await
    {
        Ok(report) => report,
        Err(e) => {
            log::error(
                "schedules_fire_failed",
                json!({ "message": e.to_string(), "note": "the due schedules or the zones in use could not be read: nothing was applied; due schedules fire on the next tick" }),
            );
            return Vec::new();
        }
    };
    for e in &report.plan.unreadable {
        log::error(
            "schedule_unreadable",
            json!({ "schedule_id": e.schedule_id, "message": e.what, "note": "disabled; PUT /schedules/{id} to fix it" }),
        );
    }
    let backoff_note = match &report.backoff {
        Ok(()) => "backs off; a fire that applies or a PUT clears it".to_string(),
        Err(e) => format!("backoff not written ({e}): due again on the next tick"),
    };
    for f in &report.failed {
        log::error(
            "schedule_fire_failed",
            json!({
                "schedule_id": f.schedule_id, "message": f.error.to_string(),
                "fire_failures": f.failures, "retry_at": rfc3339(f.retry_at), "note": backoff_note,
            }),
        );
    }
    if !report.left.is_empty() {
        let message = report.left_error.as_ref().map(ToString::to_string);
        log::error(
            "schedules_fire_deferred",
            json!({
                "schedule_ids": report.left, "message": message,
                "note": "not applied this tick (the other fires were): due again on the next tick",
            }),
        );
    }
    let fired = report.fired;
    for f in &fired {
        match f {
            Fired::Created {
                schedule_id,
                batch_id,
                key,
                total,
            } => log::event(
                "schedule_fired",
                json!({ "schedule_id": schedule_id, "batch_id": batch_id, "key": key, "total": total }),
            ),
            Fired::Existing {
                schedule_id,
                batch_id,
                key,
            } => log::event(
                "schedule_refired",
                json!({ "schedule_id": schedule_id, "batch_id": batch_id, "key": key, "note": "the key exists: nothing created" }),
            ),
            Fired::Superseded { schedule_id, key } => log::event(
                "schedule_superseded",
                json!({ "schedule_id": schedule_id, "key": key, "note": "replaced or deleted since planned: nothing applied" }),
            ),
        }
    }
    fired
        .iter()
        .filter_map(|f| f.created_batch_id().map(str::to_string))
        .collect()
}

/// Log the invocation summary once and store it as one row, if the budget can
/// still pay for the insert (the plan kept it; only an error path can use it up).
async fn record_summary(store: &DrainStore, tally: Tally, started: i64, stop_reason: StopReason) {
    let (usage, budget) = (store.usage(), store.db().budget());
    // The figures include this summary's own insert: one call and statement, and
    // its rows (the row and its index entry).
    let own = i64::from(budget.free() >= 1);
    let summary = InvocationSummary {
        trigger: Trigger::Tick,
        started_at: started,
        elapsed_ms: clock::now_ms() - started,
        tally,
        subrequests: budget.used() + own,
        subrequest_budget: budget.limit(),
        d1_statements: usage.statements + own,
        d1_rows_written: usage.rows_written + own * SUMMARY_ROWS_WRITTEN,
        stop_reason,
    };
    let mut line = json!(summary);
    // Rows read are billed too; logged, not stored (`loadtest bench` reads it here).
    line["d1_rows_read"] = json!(usage.rows_read);
    if own == 1 {
        if let Err(e) = store.record_invocation(&summary).await {
            log::error("summary_not_stored", json!({ "message": e.to_string() }));
        }
    } else {
        line["stored"] = json!(false);
    }
    log::event("invocation", line);
}
