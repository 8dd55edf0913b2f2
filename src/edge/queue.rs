//! Drainers: the `DRAIN_QUEUE` consumer (`max_batch_size = 1`). Each message a
//! tick sent (`DRAINERS` > 1) is one drain in an invocation of its own, with its
//! own subrequest budget, deadline, child cap and connections: claim, dispatch,
//! commit (`edge::drain`), then the finish check and its own summary (trigger
//! `queue`). Drainers never reap: the tick does, once. Claims are exclusive, so
//! drainers never share an item; the finish check is a compare-and-set, so a
//! batch is finished once whoever runs it.

use serde_json::json;
use worker::{Env, MessageBatch, MessageExt};

use super::clock;
use super::config::{Config, DRAIN_QUEUE};
use super::drain::{self, DrainStore};
use super::log::InvocationLog;
use super::run::Runner;
use super::schedule::{log_finished, open_store, record_summary, self_service};
use crate::core::batch::model::{StopReason, Tally, Trigger};
use crate::core::drain::drainers::{self, Continuation, DrainMessage};
use crate::core::drain::DrainError;
use crate::core::settings::Drainers;
use crate::jobs::Jobs;
use crate::store::SlotPassed;

pub async fn on_queue(batch: MessageBatch<DrainMessage>, env: Env, jobs: &Jobs) {
    // Every message is acknowledged, drained or not: a drain message is a
    // request to drain now, and the next tick sends fresh ones.
    let messages = match batch.messages() {
        Ok(m) => m,
        Err(e) => {
            batch.ack_all();
            let logger = InvocationLog::new(clock::random_id());
            let note = "not drain messages: is DRAIN_QUEUE's producer this Worker?";
            return logger.error(
                "drain_message_refused",
                json!({ "message": e.to_string(), "queue": batch.queue(), "note": note }),
            );
        }
    };
    for message in messages {
        drainer(message.body(), Runner { jobs, env: &env }).await;
        message.ack();
    }
}

/// One drainer: verify the message, (with `auto`) take or receive its slot,
/// drain, finish, hand the slot on with a continuation while work is due, and
/// record the summary.
async fn drainer(message: &DrainMessage, runner: Runner<'_>) {
    let env = runner.env;
    // Each drainer is an invocation of its own, with its own id and summary.
    let logger = InvocationLog::new(clock::random_id());
    let cfg = match Config::get(env) {
        Ok(cfg) => cfg,
        Err(e) => return logger.error("invalid_configuration", json!({ "message": e.message })),
    };
    let started = clock::now_ms();
    if let Err(e) = message.verify(cfg.secrets.dispatch_keys(), clock::wall_ms() / 1_000) {
        return logger.error(
            "drain_message_refused",
            json!({
                "reason": format!("{e:?}"), "drainer": message.drainer,
                "note": "not signed with this Worker's DISPATCH_SECRET (or older than 15 minutes): is DRAIN_QUEUE shared with another Worker?",
            }),
        );
    }
    let store = match open_store(env, &cfg, runner.jobs) {
        Ok(store) => store,
        Err(message) => {
            return logger.error("invalid_configuration", json!({ "message": message }))
        }
    };
    let auto = cfg.settings.drainers == Drainers::Auto;
    let slot = if auto {
        match take_slot(message, &cfg, &store, &logger).await {
            Taken::Slot(slot) => Some(slot),
            Taken::None => None,
            // MAX_DRAINERS are live: they drain what is due; this one does not.
            Taken::Busy => return,
        }
    } else {
        None
    };
    // A slot's last step and the continuation's send are kept out of the drain.
    let budget = store.db().budget().clone();
    if slot.is_some() {
        budget.keep_back(CONTINUE_SUBREQUESTS);
    }
    let (mut tally, result) = drain_once(runner, &cfg, &store, started, &logger).await;
    // Its own message: read, then acknowledged (deleted) once this returns.
    tally.queue_operations += 2;
    let stop_reason = result.unwrap_or_else(|e| {
        logger.error(
            "invocation_failed",
            json!({ "message": e.to_string(), "drainer": message.drainer }),
        );
        StopReason::Error
    });
    if let Some(slot) = slot {
        budget.give_back(CONTINUE_SUBREQUESTS);
        let capacity = drainers::capacity(&cfg.settings, drain::per_item_cost(&cfg, runner.jobs));
        let end = ChainEnd {
            stop: stop_reason,
            capacity,
        };
        tally.queue_operations +=
            continue_chain(message, slot, end, runner.env, &cfg, &store, &logger).await;
    }
    let place = auto.then_some((message.drainer, message.chain));
    record_summary(
        &store,
        Trigger::Queue,
        tally,
        started,
        stop_reason,
        place,
        &logger,
    )
    .await;
}

/// A drainer's last step and its continuation's send.
const CONTINUE_SUBREQUESTS: i64 = 2;

/// How a drainer of `auto` came by its slot.
enum Taken {
    /// Its slot (number, and the holder name it holds it under).
    Slot((i64, String)),
    /// Taking one failed (logged): it drains without one and sends no
    /// continuation.
    None,
    /// Every slot is held.
    Busy,
}

/// A continuation holds the slot its message names; a tick's drainer takes the
/// lowest free one, under its own invocation id.
async fn take_slot(
    message: &DrainMessage,
    cfg: &Config,
    store: &DrainStore,
    logger: &InvocationLog,
) -> Taken {
    if message.slot > 0 {
        return Taken::Slot((message.slot, message.holder.clone()));
    }
    let now = clock::now_ms();
    let holder = logger.id().to_string();
    let lease = now + slot_lease_ms(cfg);
    match store
        .acquire_drainer_slot(now, &holder, lease, cfg.settings.max_drainers)
        .await
    {
        Ok(Some(slot)) => Taken::Slot((slot, holder)),
        Ok(None) => {
            logger.event(
                "drainers_busy",
                json!({
                    "drainer": message.drainer, "max_drainers": cfg.settings.max_drainers,
                    "note": "every drainer slot is held: the live drainers drain what is due",
                }),
            );
            Taken::Busy
        }
        Err(e) => {
            logger.error(
                "drainer_slot_failed",
                json!({ "message": e.to_string(), "drainer": message.drainer, "note": "this drainer drains without a slot and sends no continuation" }),
            );
            Taken::None
        }
    }
}

/// How long a slot is leased: the drain's deadline, a job's timeout and a
/// minute for the continuation to be delivered. A drainer that dies leaves its
/// slot to expire.
fn slot_lease_ms(cfg: &Config) -> i64 {
    let s = &cfg.settings;
    s.invocation_deadline_ms + s.job_timeout_ms + 60_000
}

/// How a drainer's drain ended, and how many items one drainer takes
/// (`drainers::capacity`), for its last step.
struct ChainEnd {
    stop: StopReason,
    capacity: i64,
}

/// After a drain that stopped on its child cap, budget or deadline: if work is
/// still due, hand the slot to a continuation and send it (one message, signed
/// like the tick's); otherwise free the slot and end the chain. Answers the
/// messages it sent (0 or 1).
async fn continue_chain(
    message: &DrainMessage,
    (slot, holder): (i64, String),
    ChainEnd { stop, capacity }: ChainEnd,
    env: &Env,
    cfg: &Config,
    store: &DrainStore,
    logger: &InvocationLog,
) -> i64 {
    let goes_on = matches!(
        stop,
        StopReason::ChildCap | StopReason::Budget | StopReason::Deadline
    );
    let now = clock::now_ms();
    let next = Continuation {
        chain: message.chain + 1,
        slot,
        // Whoever drains the continuation hands the slot on under this name.
        holder: clock::random_id(),
    };
    // A drain that stopped for any other reason frees its slot: a batch of
    // nothing due hands on nothing.
    let expires_at = if goes_on { now + slot_lease_ms(cfg) } else { 0 };
    let passed = store
        .pass_drainer_slot(now, (slot, &holder), &next.holder, expires_at, capacity)
        .await;
    let ids = json!({ "drainer": message.drainer, "chain": message.chain, "slot": slot });
    match passed {
        Ok(SlotPassed::Continue) if goes_on => {}
        Ok(SlotPassed::Lost) => {
            logger.event("drainer_slot_lost", ids);
            return 0;
        }
        Ok(_) => return 0,
        Err(e) => {
            // The slot's lease runs out; the next tick starts drainers again.
            logger.error(
                "drainer_continuation_failed",
                json!({ "message": e.to_string(), "drainer": message.drainer, "chain": message.chain }),
            );
            return 0;
        }
    }
    let next_message = message.continuation(&cfg.secrets.dispatch, clock::wall_ms() / 1_000, next);
    let chain = next_message.chain;
    let sent = match (env.queue(DRAIN_QUEUE), store.db().budget().charge_call()) {
        (Err(e), _) => Err(e.to_string()),
        (_, Err(e)) => Err(format!("no subrequest left for the send: {e:?}")),
        (Ok(queue), Ok(())) => queue.send(next_message).await.map_err(|e| e.to_string()),
    };
    match sent {
        Ok(()) => {
            logger.event(
                "drainer_continued",
                json!({ "drainer": message.drainer, "chain": chain, "slot": slot, "stop_reason": stop }),
            );
            1
        }
        Err(e) => {
            logger.error(
                "drainer_continuation_failed",
                json!({ "message": e, "drainer": message.drainer, "chain": message.chain, "note": "the slot's lease runs out; the next tick starts drainers again" }),
            );
            0
        }
    }
}

/// The drain, then the finish check (one statement; the tick's finish runs
/// before its drainers have drained anything).
async fn drain_once(
    runner: Runner<'_>,
    cfg: &Config,
    store: &DrainStore,
    started: i64,
    logger: &InvocationLog,
) -> (Tally, Result<StopReason, DrainError>) {
    let self_service = match self_service(runner.env, cfg) {
        Ok(s) => s,
        Err(e) => return (Tally::default(), Err(e)),
    };
    // No first step: the first claim is sized by the round trips it sees.
    let (tally, result) = drain::run(
        cfg,
        runner,
        store,
        self_service.as_ref(),
        started,
        0,
        logger,
    )
    .await;
    let stop = match result {
        Ok(stop) => stop,
        Err(e) => return (tally, Err(e)),
    };
    match store.finish_batches(clock::now_ms()).await {
        Ok(finished) => {
            log_finished(logger, &finished);
            (tally, Ok(stop))
        }
        Err(e) => (tally, Err(DrainError::Finish(e))),
    }
}
