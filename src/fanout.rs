//! [`Fanout`]: the whole orchestrator as a value a Worker calls from its own
//! `#[event]` functions, with the job kinds it runs (the built-in ones plus the
//! Worker's own). Every entry point gets its registry from here: request
//! validation, the drain's per-kind retry policies and the child's run.

use crate::jobs::{Job, Jobs, RegisterError};

/// The orchestrator and the job kinds it runs.
#[derive(Debug, Default)]
pub struct Fanout {
    jobs: Jobs,
}

impl Fanout {
    /// The built-in kinds (`webhook`, `multi`, `noop`).
    pub fn new() -> Fanout {
        Fanout {
            jobs: Jobs::builtin(),
        }
    }

    /// A registry of one's own (e.g. one built and checked in a test).
    pub fn with_jobs(jobs: Jobs) -> Fanout {
        Fanout { jobs }
    }

    /// Add a kind of your own; panics on a refused one (`Jobs::register` says
    /// why: a taken or invalid name, a policy out of range), a programming error
    /// found on the first request.
    pub fn job<J: Job>(mut self, job: J) -> Fanout {
        if let Err(e) = self.register(job) {
            panic!("{e}");
        }
        self
    }

    /// [`Fanout::job`] that returns the refusal instead.
    pub fn register<J: Job>(&mut self, job: J) -> Result<&mut Fanout, RegisterError> {
        self.jobs.register(job)?;
        Ok(self)
    }

    /// The kinds this Worker runs.
    pub fn jobs(&self) -> &Jobs {
        &self.jobs
    }
}

#[cfg(target_arch = "wasm32")]
impl Fanout {
    /// Call from `#[event(fetch)]`: the API, the dashboard and the child side of
    /// each dispatched item.
    pub async fn fetch(
        &self,
        req: worker::Request,
        env: worker::Env,
        _ctx: worker::Context,
    ) -> worker::Result<worker::Response> {
        crate::edge::on_fetch(req, env, &self.jobs).await
    }

    /// Call from `#[event(scheduled)]`: the tick (fire schedules, reap, drain,
    /// finish). Awaited in the handler itself: the invocation lives exactly as
    /// long as the drain, and every SELF child is awaited before it returns.
    pub async fn scheduled(
        &self,
        event: worker::ScheduledEvent,
        env: worker::Env,
        _ctx: worker::ScheduleContext,
    ) {
        crate::edge::on_scheduled(event, env, &self.jobs).await
    }

    /// Call from `#[event(queue)]` (only with `DRAINERS` > 1, whose `DRAIN_QUEUE`
    /// consumer is this Worker): one drain per message, each acknowledged.
    pub async fn queue(
        &self,
        batch: DrainBatch,
        env: worker::Env,
        _ctx: worker::Context,
    ) -> worker::Result<()> {
        crate::edge::on_queue(batch, env, &self.jobs).await;
        Ok(())
    }
}

/// What `DRAIN_QUEUE` delivers to `#[event(queue)]`: drain messages.
#[cfg(target_arch = "wasm32")]
pub type DrainBatch = worker::MessageBatch<crate::core::drain::drainers::DrainMessage>;
