//! Scheduled invocations. Every cron runs the same tick: fire due schedules
//! (`Store::fire_due`), reap expired leases, drain due items (`edge::drain`) — or,
//! with `DRAINERS` > 1, send that many drain messages (`edge::queue`) —, mark
//! finished batches and record one summary. Every D1 call goes through the
//! invocation's metered store, so the budget counts what was really made.

use serde_json::{json, Value};
use worker::{Env, Fetcher, Queue, ScheduledEvent};

use super::clock;
use super::config::{Config, DRAIN_QUEUE};
use super::drain::{self, DrainStore};
use super::log::InvocationLog;
use super::run::Runner;
use crate::core::batch::callback;
use crate::core::batch::cost;
use crate::core::batch::model::{
    FinishedBatch, InvocationSummary, ItemStatus, StopReason, Tally, Trigger,
};
use crate::core::batch::upkeep::{Retention, TickWork, Upkeep};
use crate::core::drain::budget::Budget;
use crate::core::drain::drainers::{self, DrainMessage};
use crate::core::drain::DrainError;
use crate::core::schedule::tick::{Fired, FIRE_PAGE};
use crate::core::settings::{DispatchMode, Drainers};
use crate::core::time::rfc3339;
use crate::jobs::Jobs;
use crate::store::d1::D1Db;
use crate::store::metered::Metered;
use crate::store::{Store, SUMMARY_ROWS_WRITTEN};

/// Expired leases requeued per tick (one statement).
const REAP_PAGE: i64 = 1_000;

pub async fn on_schedule(_event: ScheduledEvent, env: Env, jobs: &Jobs) {
    // Drawn first: every line of the invocation carries it.
    let logger = InvocationLog::new(clock::random_id());
    // The configuration first: it sets the (test) clock every instant is read from.
    let cfg = match Config::get(&env) {
        Ok(cfg) => cfg,
        Err(e) => return logger.error("invalid_configuration", json!({ "message": e.message })),
    };
    let started = clock::now_ms();
    let store = match open_store(&env, &cfg, jobs) {
        Ok(store) => store,
        Err(message) => {
            return logger.error("invalid_configuration", json!({ "message": message }))
        }
    };
    let mut tally = Tally::default();
    let runner = Runner { jobs, env: &env };
    let result = run_invocation(runner, &cfg, &store, &mut tally, started, &logger).await;
    let stop_reason = result.unwrap_or_else(|e| {
        logger.error("invocation_failed", json!({ "message": e.to_string() }));
        StopReason::Error
    });
    record_summary(
        &store,
        Trigger::Tick,
        tally,
        started,
        stop_reason,
        None,
        &logger,
    )
    .await;
}

async fn run_invocation(
    runner: Runner<'_>,
    cfg: &Config,
    store: &DrainStore,
    tally: &mut Tally,
    started: i64,
    logger: &InvocationLog,
) -> Result<StopReason, DrainError> {
    // Firing never fails the tick: a fire that fails on its own backs its schedule
    // off, the others still apply, and the drain below does not depend on it.
    let (fired, work) = fire_schedules(cfg, store, logger).await;
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
        logger.event(
            "lease_expired",
            json!({ "batch_id": r.batch_id, "item_id": r.id, "status": r.status }),
        );
    }
    // With drainers, the queue's consumers drain; the tick drains itself only
    // when it has none or could not start them.
    // With the messages it sent: each one queue operation (its write).
    let handed = match cfg.settings.drainers {
        Drainers::Fixed(1) => None,
        Drainers::Fixed(n) => start_drainers(runner.env, cfg, store, started, n, json!({}), logger)
            .await
            .map(|sent| (StopReason::Drainers, sent)),
        Drainers::Auto => start_auto_drainers(runner, cfg, store, started, logger).await,
    };
    let stop = if let Some((stop, sent)) = handed {
        *tally = reaper;
        tally.batch_ids.extend(fired);
        tally.queue_operations += sent;
        stop
    } else {
        let self_service = self_service(runner.env, cfg)?;
        let (drained, result) = drain::run(
            cfg,
            runner,
            store,
            self_service.as_ref(),
            started,
            prepare_ms,
            logger,
        )
        .await;
        // The reaper's share (reaped, its failures per batch) plus the drain's.
        *tally = drained;
        tally.absorb(reaper);
        // The summary's batches: those the tick created and those it claimed from.
        tally.batch_ids.extend(fired);
        result?
    };
    // The tail the plan kept: one call for the upkeep (cancel sweep, retention) and
    // the finish check, then the summary.
    let now = clock::now_ms();
    let upkeep = Upkeep::at(now, cfg.settings.retention_days).narrowed(work);
    let finished = store
        .finish_tick(now, &upkeep)
        .await
        .map_err(DrainError::Finish)?;
    log_finished(logger, &finished);
    Ok(stop)
}

/// The invocation's store: D1 (`DB`) metered by its own `SUBREQUEST_BUDGET`,
/// enqueueing with each kind's own max attempts (`jobs::Policy`).
pub(super) fn open_store(env: &Env, cfg: &Config, jobs: &Jobs) -> Result<DrainStore, String> {
    let db = env.d1("DB").map_err(|e| format!("binding DB: {e}"))?;
    let budget = Budget::new(cfg.settings.subrequest_budget);
    Ok(Store::new(Metered::new(D1Db::new(db), budget))
        .with_kind_attempts(jobs.max_attempts_by_kind())
        .with_learning(cfg.settings.learn_limits))
}

/// One `batch_finished` line per batch the finish check ended.
pub(super) fn log_finished(logger: &InvocationLog, finished: &[FinishedBatch]) {
    for b in finished {
        logger.event(
            "batch_finished",
            json!({
                "batch_id": b.id, "key": b.key, "status": b.status, "total": b.total,
                "completed": b.completed, "failed": b.failed, "cancelled": b.cancelled,
                "duration_ms": b.finished_at - b.created_at,
            }),
        );
    }
}

/// The SELF binding in fan-out mode; none inline.
pub(super) fn self_service(env: &Env, cfg: &Config) -> Result<Option<Fetcher>, DrainError> {
    match cfg.settings.dispatch_mode {
        DispatchMode::Fanout => env
            .service("SELF")
            .map(Some)
            .map_err(|e| DrainError::Binding(format!("SELF: {e}"))),
        DispatchMode::Inline => Ok(None),
    }
}

/// `DRAINERS = "auto"`: count the due work (one bounded statement) and send as
/// many drain messages as it needs within `MAX_DRAINERS` live drainers. Answers
/// how the tick stopped: `Drained` when nothing is due (no message),
/// `Drainers` when drainers (new or live) drain it, with the messages sent;
/// `None` when the tick drains itself (the count or the send failed, both logged).
async fn start_auto_drainers(
    runner: Runner<'_>,
    cfg: &Config,
    store: &DrainStore,
    started: i64,
    logger: &InvocationLog,
) -> Option<(StopReason, i64)> {
    let s = &cfg.settings;
    let capacity = drainers::capacity(s, drain::per_item_cost(cfg, runner.jobs));
    let cap = drainers::count_cap(capacity, s.max_drainers);
    let work = match store.count_drain_work(clock::now_ms(), cap).await {
        Ok(work) => work,
        Err(e) => {
            logger.error(
                "drain_work_unknown",
                json!({ "message": e.to_string(), "note": "this tick drains itself" }),
            );
            return None;
        }
    };
    let n = drainers::to_start(work.due, work.live, capacity, s.max_drainers);
    if n == 0 {
        if work.due > 0 {
            logger.event(
                "drainers_busy",
                json!({ "due": work.due, "live": work.live, "max_drainers": s.max_drainers }),
            );
            return Some((StopReason::Drainers, 0));
        }
        return Some((StopReason::Drained, 0));
    }
    let counted = json!({ "due": work.due, "live": work.live, "capacity": capacity });
    start_drainers(runner.env, cfg, store, started, n, counted, logger)
        .await
        .map(|sent| (StopReason::Drainers, sent))
}

/// Send one `DRAIN_QUEUE` message per drainer (one call for all of them);
/// how many were sent, `None` when they were not. A failed send is logged as `misconfigured` and the
/// tick drains itself instead. `counted`: what `auto` counted, for the log line.
async fn start_drainers(
    env: &Env,
    cfg: &Config,
    store: &DrainStore,
    started: i64,
    n: i64,
    counted: Value,
    logger: &InvocationLog,
) -> Option<i64> {
    let now_secs = clock::wall_ms() / 1_000;
    let messages: Vec<DrainMessage> = (1..=n)
        .map(|i| DrainMessage::new(&cfg.secrets.dispatch, now_secs, started, i))
        .collect();
    let sent = match env.queue(DRAIN_QUEUE) {
        Err(e) => Err(drainers::missing_queue(
            &cfg.settings.drainers.value(),
            &e.to_string(),
        )),
        Ok(queue) => send_in_batches(&queue, store, messages).await,
    };
    match sent {
        Ok(()) => {
            let mut line = counted;
            line["drainers"] = json!(n);
            logger.event("drainers_sent", line);
            Some(n)
        }
        Err(message) => {
            logger.error(
                "misconfigured",
                json!({ "message": message, "note": "this tick drains itself" }),
            );
            None
        }
    }
}

/// Send drain messages, at most [`drainers::SEND_BATCH_MAX`] a call (each call a
/// subrequest like any other).
async fn send_in_batches(
    queue: &Queue,
    store: &DrainStore,
    messages: Vec<DrainMessage>,
) -> Result<(), String> {
    let n = messages.len();
    for chunk in messages.chunks(drainers::SEND_BATCH_MAX) {
        store
            .db()
            .budget()
            .charge_call()
            .map_err(|e| format!("no subrequest left for the send: {e:?}"))?;
        queue.send_batch(chunk.to_vec()).await.map_err(|e| {
            format!("sending {n} messages to DRAIN_QUEUE failed: {e}; is it a queue whose consumer is this Worker?")
        })?;
    }
    Ok(())
}

/// Fire every due schedule (a page of them), each apart from the others, and log
/// one line per fire (and per fire that failed and backs off); returns the ids of
/// the batches created, and what the tick's upkeep has to do (everything when it
/// could not be read).
async fn fire_schedules(
    cfg: &Config,
    store: &DrainStore,
    logger: &InvocationLog,
) -> (Vec<String>, TickWork) {
    let now = clock::now_ms();
    let cutoff = Retention::at(now, cfg.settings.retention_days).map(|r| r.cutoff);
    let report = match store
        .fire_due(
            now,
            FIRE_PAGE,
            cfg.settings.max_attempts,
            &clock::short_id,
            cutoff,
        )
        .await
    {
        Ok(report) => report,
        Err(e) => {
            logger.error(
                "schedules_fire_failed",
                json!({ "message": e.to_string(), "note": "the due schedules or the zones in use could not be read: nothing was applied; due schedules fire on the next tick" }),
            );
            return (Vec::new(), TickWork::default());
        }
    };
    if let Err(e) = &report.fill {
        logger.error(
            "batch_fill_failed",
            json!({ "message": e.to_string(), "note": "the batches still filling were not continued this tick (the fires were applied): tried again on the next tick" }),
        );
    }
    for e in &report.plan.unreadable {
        logger.error(
            "schedule_unreadable",
            json!({ "schedule_id": e.schedule_id, "message": e.what, "note": "disabled; PUT /schedules/{id} to fix it" }),
        );
    }
    let backoff_note = match &report.backoff {
        Ok(()) => "backs off; a fire that applies or a PUT clears it".to_string(),
        Err(e) => format!("backoff not written ({e}): due again on the next tick"),
    };
    for f in &report.failed {
        logger.error(
            "schedule_fire_failed",
            json!({
                "schedule_id": f.schedule_id, "message": f.error.to_string(),
                "fire_failures": f.failures, "retry_at": rfc3339(f.retry_at), "note": backoff_note,
            }),
        );
    }
    if !report.left.is_empty() {
        let message = report.left_error.as_ref().map(ToString::to_string);
        logger.error(
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
            } => logger.event(
                "schedule_fired",
                json!({ "schedule_id": schedule_id, "batch_id": batch_id, "key": key, "total": total }),
            ),
            Fired::Existing {
                schedule_id,
                batch_id,
                key,
            } => logger.event(
                "schedule_refired",
                json!({ "schedule_id": schedule_id, "batch_id": batch_id, "key": key, "note": "the key exists: nothing created" }),
            ),
            Fired::Empty { schedule_id, key } => logger.event(
                "schedule_fired_empty",
                json!({ "schedule_id": schedule_id, "key": key, "note": "no active subject matched: no batch created; the schedule advanced" }),
            ),
            Fired::Superseded { schedule_id, key } => logger.event(
                "schedule_superseded",
                json!({ "schedule_id": schedule_id, "key": key, "note": "replaced or deleted since planned: nothing applied" }),
            ),
        }
    }
    let created = fired
        .iter()
        .filter_map(|f| f.created_batch_id().map(str::to_string))
        .collect();
    (created, report.work)
}

/// Log the invocation summary once and store it as one row, if the budget can
/// still pay for the insert (the plan kept it; only an error path can use it up).
pub(super) async fn record_summary(
    store: &DrainStore,
    trigger: Trigger,
    tally: Tally,
    started: i64,
    stop_reason: StopReason,
    place: Option<(i64, i64)>,
    logger: &InvocationLog,
) {
    let (usage, budget) = (store.usage(), store.db().budget());
    // The figures include this summary's own insert: one call and statement, and
    // its rows (the row and its index entry, and the row of each batch it charges
    // its share to: migration 0026).
    let own = i64::from(budget.free() >= 1);
    let charged = cost::charged(&tally);
    let mut summary = InvocationSummary {
        invocation: Some(logger.id().to_string()),
        trigger,
        started_at: started,
        elapsed_ms: clock::now_ms() - started,
        tally,
        subrequests: budget.used() + own,
        subrequest_budget: budget.limit(),
        d1_statements: usage.statements + own,
        d1_rows_written: usage.rows_written + own * (SUMMARY_ROWS_WRITTEN + charged),
        d1_rows_read: Some(usage.rows_read),
        stop_reason,
        drainer: place.map(|(drainer, _)| drainer),
        chain: place.map(|(_, chain)| chain),
    };
    cost::attach(&mut summary);
    let mut line = json!(summary);
    if own == 1 {
        if let Err(e) = store.record_invocation(&summary).await {
            logger.error("summary_not_stored", json!({ "message": e.to_string() }));
        }
    } else {
        line["stored"] = json!(false);
    }
    logger.event("invocation", line);
}
