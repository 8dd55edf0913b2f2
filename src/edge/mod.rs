//! The Workers runtime boundary: entry points (called by `Fanout` from the
//! Worker crate's own `#[event]` functions), HTTP routing, the scheduled
//! invocation and the drain's shell, the child executor. Everything here is thin glue over `core`, `store` and `jobs`.

mod body;
mod clock;
mod config;
mod dispatch;
mod drain;
mod http;
mod log;
mod outbound;
mod probe;
mod queue;
mod run;
mod schedule;

/// Origin of calls through the `SELF` binding: a service binding ignores the host,
/// so any fixed name works; one name keeps the dispatch and probe URLs in step.
const SELF_ORIGIN: &str = "https://cron-fanout.internal";

use worker::{Env, MessageBatch, Request, Response, Result, ScheduledEvent};

use crate::jobs::Jobs;

/// Call from `#[event(start)]`: panics reach the log with their message.
pub fn start() {
    console_error_panic_hook::set_once();
}

/// A fetch event, run with the Worker's kinds (`Fanout::fetch`).
pub async fn on_fetch(req: Request, env: Env, jobs: &Jobs) -> Result<Response> {
    http::handle(req, env, jobs).await
}

/// A scheduled event, run with the Worker's kinds (`Fanout::scheduled`).
pub async fn on_scheduled(event: ScheduledEvent, env: Env, jobs: &Jobs) {
    schedule::on_schedule(event, env, jobs).await;
}

/// A queue batch of drain messages (`DRAINERS` > 1), run with the Worker's kinds
/// (`Fanout::queue`): one drain per message, awaited like the tick's.
pub async fn on_queue(
    batch: MessageBatch<crate::core::drain::drainers::DrainMessage>,
    env: Env,
    jobs: &Jobs,
) {
    queue::on_queue(batch, env, jobs).await;
}
