//! The default cron-fanout Worker (`wrangler.toml` at the repo root): the library
//! with its built-in job kinds only. A Worker of your own is this file with
//! `.job(YourKind)` after `Fanout::new()` (docs/api.md).
#![cfg(target_arch = "wasm32")]

use cron_fanout::{DrainBatch, Fanout};
use worker::{event, Context, Env, Request, Response, Result, ScheduleContext, ScheduledEvent};

#[event(start)]
fn start() {
    cron_fanout::edge::start();
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    Fanout::new().fetch(req, env, ctx).await
}

#[event(scheduled)]
async fn scheduled(event: ScheduledEvent, env: Env, ctx: ScheduleContext) {
    Fanout::new().scheduled(event, env, ctx).await
}

#[event(queue)]
async fn queue(batch: DrainBatch, env: Env, ctx: Context) -> Result<()> {
    Fanout::new().queue(batch, env, ctx).await
}
