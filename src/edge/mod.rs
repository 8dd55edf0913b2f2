//! The Workers runtime boundary: entry points, HTTP routing, the scheduled
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

use worker::{
    event, Context, Env, MessageBatch, Request, Response, Result, ScheduleContext, ScheduledEvent,
};

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    http::handle(req, env).await
}

#[event(scheduled)]
async fn scheduled(event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    // Awaited in the handler itself: the invocation lives exactly as long as the
    // drain, and every SELF child is awaited before it returns.
    schedule::on_schedule(event, env).await;
}

#[event(queue)]
async fn queue(
    batch: MessageBatch<crate::core::drainers::DrainMessage>,
    env: Env,
    _ctx: Context,
) -> Result<()> {
    // Drainers (`DRAINERS` > 1): one drain per message, awaited like the tick's.
    queue::on_queue(batch, env).await;
    Ok(())
}
