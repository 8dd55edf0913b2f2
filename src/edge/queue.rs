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
use super::config::Config;
use super::drain::{self, DrainStore};
use super::log::InvocationLog;
use super::run::Runner;
use super::schedule::{log_finished, open_store, record_summary, self_service};
use crate::core::drain::DrainError;
use crate::core::drainers::DrainMessage;
use crate::core::model::{StopReason, Tally, Trigger};
use crate::jobs::Jobs;

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

/// One drainer: verify the message, drain, finish, record the summary.
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
    let (tally, result) = drain_once(runner, &cfg, &store, started, &logger).await;
    let stop_reason = result.unwrap_or_else(|e| {
        logger.error(
            "invocation_failed",
            json!({ "message": e.to_string(), "drainer": message.drainer }),
        );
        StopReason::Error
    });
    record_summary(&store, Trigger::Queue, tally, started, stop_reason, &logger).await;
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
