//! A Worker of one's own on cron-fanout: the whole orchestrator, with one job
//! kind of its own (`hello`) registered beside the built-in ones. Its e2e test
//! (`loadtest e2e --only-hello-kind`) runs it on `wrangler dev`.

use cron_fanout::core::target::TargetPolicy;
use cron_fanout::jobs::{Context, Job, Outcome, Policy};
use cron_fanout::Fanout;
use serde::Deserialize;

/// `{"name": "ada", "retries": 1, "fail": false}`: greet `name`, after asking for
/// `retries` retries first; `fail` fails it for good instead.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloPayload {
    pub name: String,
    #[serde(default)]
    pub retries: i64,
    #[serde(default)]
    pub fail: bool,
}

pub struct Hello;

impl Job for Hello {
    type Payload = HelloPayload;

    fn name(&self) -> &'static str {
        "hello"
    }

    fn validate(&self, p: &HelloPayload, _targets: &TargetPolicy) -> Result<(), String> {
        if p.name.trim().is_empty() || p.name.len() > 64 {
            return Err("name must be 1 to 64 bytes".into());
        }
        if !(0..=3).contains(&p.retries) {
            return Err("retries must be between 0 and 3".into());
        }
        Ok(())
    }

    async fn run(&self, ctx: &Context<'_>, p: HelloPayload) -> Outcome {
        // The Worker's own `[vars]`: its Env on the Worker, the harness's on the host.
        let Some(greeting) = ctx.var("HELLO_GREETING") else {
            return Outcome::Fail("HELLO_GREETING is not set".into());
        };
        if p.fail {
            Outcome::Fail(format!("{greeting}, {}: told to fail", p.name))
        } else if ctx.item.attempt <= p.retries {
            Outcome::Retry(format!("{greeting}, {}: not yet", p.name))
        } else {
            Outcome::Done
        }
    }

    // Its own backoff: retries come back within a second whatever RETRY_BASE_MS says.
    fn policy(&self) -> Policy {
        Policy {
            retry_base_ms: Some(200),
            retry_max_ms: Some(1_000),
            ..Policy::default()
        }
    }
}

/// The orchestrator with this Worker's kinds: the built-in ones and `hello`.
pub fn fanout() -> Fanout {
    Fanout::new().job(Hello)
}

// events:start
// The Worker's entry points (the library has none): each calls the orchestrator.
#[cfg(target_arch = "wasm32")]
mod events {
    use super::fanout;
    use worker::{event, Context, Env, Request, Response, Result, ScheduleContext, ScheduledEvent};

    #[event(start)]
    fn start() {
        cron_fanout::edge::start();
    }

    #[event(fetch)]
    async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
        fanout().fetch(req, env, ctx).await
    }

    #[event(scheduled)]
    async fn scheduled(event: ScheduledEvent, env: Env, ctx: ScheduleContext) {
        fanout().scheduled(event, env, ctx).await
    }

    // Only with DRAINERS > 1 (a DRAIN_QUEUE whose consumer is this Worker).
    #[event(queue)]
    async fn queue(batch: cron_fanout::DrainBatch, env: Env, ctx: Context) -> Result<()> {
        fanout().queue(batch, env, ctx).await
    }
}
// events:end
