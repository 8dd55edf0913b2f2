//! A Worker of one's own on cron-fanout: the whole orchestrator, with one job
//! kind of its own (`hello`) registered beside the built-in ones, reading the
//! Worker's `[vars]` and KV with `ctx.var` and `ctx.kv` (no `cfg`). Its e2e test
//! (`loadtest e2e --only-hello-kind`) runs it on `wrangler dev`.

use cron_fanout::core::target::TargetPolicy;
use cron_fanout::jobs::{Context, Job, Outcome, Policy};
use cron_fanout::Fanout;
use serde::Deserialize;

/// `{"name": "ada", "retries": 1, "fail": false, "once": false}`: greet `name`,
/// after asking for `retries` retries first; `fail` fails it for good instead;
/// `once` greets the subject once ever (the Worker's KV `HELLO_SEEN` remembers
/// the batch that did): a later item for it fails.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloPayload {
    pub name: String,
    #[serde(default)]
    pub retries: i64,
    #[serde(default)]
    pub fail: bool,
    #[serde(default)]
    pub once: bool,
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
        } else if p.once {
            greet_once(ctx, &greeting, &p.name).await
        } else {
            Outcome::Done
        }
    }

    // At most one KV read and one write.
    fn subrequests_per_run(&self) -> i64 {
        2
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

/// Greet the item's subject unless the KV namespace `HELLO_SEEN` says a batch
/// did already; remember this batch if not.
async fn greet_once(ctx: &Context<'_>, greeting: &str, name: &str) -> Outcome {
    let seen = match ctx.kv("HELLO_SEEN") {
        Ok(kv) => kv,
        Err(e) => return Outcome::Fail(e),
    };
    let subject = &ctx.item.subject_id;
    match seen.get(subject).await {
        Ok(Some(batch)) => {
            return Outcome::Fail(format!(
                "{greeting}, {name}: greeted before (batch {batch})"
            ))
        }
        Ok(None) => {}
        Err(e) => return Outcome::Retry(e),
    }
    match seen.put(subject, &ctx.item.batch_id).await {
        Ok(()) => Outcome::Done,
        Err(e) => Outcome::Retry(e),
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
