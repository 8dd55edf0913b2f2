//! Scheduled invocations: create the daily batch or reap expired leases, drain due
//! items (`edge::drain`), mark finished batches and record one summary. Every D1
//! call goes through the invocation's metered store, so the budget counts what was
//! really made.

use serde_json::json;
use worker::{Env, ScheduledEvent};

use super::config::Config;
use super::drain::{self, DrainStore};
use super::{clock, log};
use crate::core::budget::Budget;
use crate::core::drain::DrainError;
use crate::core::model::{InvocationSummary, ItemStatus, StopReason, Tally, Trigger};
use crate::core::settings::DispatchMode;
use crate::core::time;
use crate::store::d1::D1Db;
use crate::store::metered::Metered;
use crate::store::{BatchSource, Created, Store, SUMMARY_ROWS_WRITTEN};

/// Expired leases requeued per tick (one statement).
const REAP_PAGE: i64 = 1_000;

pub async fn on_schedule(event: ScheduledEvent, env: Env) {
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
    let trigger = if event.cron().trim() == cfg.settings.daily_cron {
        Trigger::Daily
    } else {
        Trigger::Tick
    };
    let budget = Budget::new(cfg.settings.subrequest_budget);
    let store = Store::new(Metered::new(D1Db::new(db), budget));
    let mut tally = Tally::default();
    let scheduled = event.schedule() as i64;
    let result = run_invocation(&env, &cfg, &store, &mut tally, trigger, scheduled, started).await;
    let stop_reason = result.unwrap_or_else(|e| {
        log::error("invocation_failed", json!({ "message": e.to_string() }));
        StopReason::Error
    });
    record_summary(&store, tally, trigger, started, stop_reason).await;
}

async fn run_invocation(
    env: &Env,
    cfg: &Config,
    store: &DrainStore,
    tally: &mut Tally,
    trigger: Trigger,
    scheduled_ms: i64,
    started: i64,
) -> Result<StopReason, DrainError> {
    match trigger {
        Trigger::Daily => {
            let key = time::daily_batch_key(scheduled_ms);
            let (id, now, attempts) = (
                clock::random_id(),
                clock::now_ms(),
                cfg.settings.max_attempts,
            );
            let created = store
                .create_batch(&id, &key, now, attempts, BatchSource::ActiveSubjects)
                .await
                .map_err(DrainError::Prepare)?;
            let (name, row) = match created {
                Created::New(row) => ("batch_created", row),
                Created::Existing(row) => ("batch_exists", row),
            };
            log::event(
                name,
                json!({ "batch_id": row.id, "key": row.key, "total": row.total }),
            );
        }
        Trigger::Tick => {
            let reaped = store
                .reap_expired_leases(clock::now_ms(), REAP_PAGE)
                .await
                .map_err(DrainError::Prepare)?;
            tally.reaped = reaped.len() as i64;
            for r in &reaped {
                if let Some(status) = ItemStatus::parse(&r.status) {
                    tally.count_terminal(&r.batch_id, status);
                }
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
                .map_err(|e| DrainError::Binding(format!("SELF: {e}")))?,
        ),
        DispatchMode::Inline => None,
    };
    let (drained, result) = drain::run(cfg, store, self_service.as_ref(), started).await;
    // The reaper's share (reaped, its failures per batch) plus the drain's.
    let reaper = std::mem::replace(tally, drained);
    tally.absorb(reaper);
    let stop = result?;
    // The tail the plan kept: finish batches, then the summary.
    let finished = store
        .finish_batches(clock::now_ms())
        .await
        .map_err(DrainError::Finish)?;
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

/// Log the invocation summary once and store it as one row, if the budget can
/// still pay for the insert (the plan kept it; only an error path can use it up).
async fn record_summary(
    store: &DrainStore,
    tally: Tally,
    trigger: Trigger,
    started: i64,
    stop_reason: StopReason,
) {
    let (usage, budget) = (store.usage(), store.db().budget());
    // The figures include this summary's own insert: one call and statement, and
    // its rows (the row and its index entry).
    let own = i64::from(budget.free() >= 1);
    let summary = InvocationSummary {
        trigger,
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
    if own == 1 {
        if let Err(e) = store.record_invocation(&summary).await {
            log::error("summary_not_stored", json!({ "message": e.to_string() }));
        }
    } else {
        line["stored"] = json!(false);
    }
    log::event("invocation", line);
}
