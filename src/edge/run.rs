//! Running one item: the child side of `POST /internal/run` and the shared
//! "run a job under a timeout" used by both the child and inline mode.

use futures::future::{select, Either};
use worker::{AbortController, Delay, Request};

use super::config::Config;
use super::{clock, log};
use crate::core::error::ApiError;
use crate::core::model::{ClaimedItem, Outcome};
use crate::core::requests::parse_json;
use crate::core::signature;
use crate::jobs::{self, JobContext};

pub const SIGNATURE_HEADER: &str = "Fanout-Dispatch-Signature";

/// Run `item`'s job, giving up after `timeout_ms` (a transient failure). The
/// abort signal also cancels the job's own fetches.
pub async fn run_with_timeout(
    item: &ClaimedItem,
    webhook_secret: &str,
    timeout_ms: i64,
) -> Outcome {
    let Some(job) = jobs::find(&item.kind) else {
        return Outcome::Fail(format!("unknown job kind {:?}", item.kind));
    };
    let controller = AbortController::default();
    let ctx = JobContext {
        webhook_secret: webhook_secret.to_string(),
        signal: controller.signal(),
    };
    let outcome = {
        let mut run = std::pin::pin!(job.run(&ctx, item));
        // A job that finishes on its first poll cannot be late: it needs no timer,
        // and a timer per child is measurable CPU.
        if let Some(outcome) = futures::FutureExt::now_or_never(run.as_mut()) {
            return outcome;
        }
        let timer = Delay::from(std::time::Duration::from_millis(timeout_ms as u64));
        match select(run, timer).await {
            Either::Left((outcome, _)) => Some(outcome),
            Either::Right(_) => None,
        }
    };
    outcome.unwrap_or_else(|| {
        controller.abort();
        Outcome::Retry(format!("timed out after {timeout_ms} ms"))
    })
}

/// `POST /internal/run`: verify the dispatcher's signature over the item's JSON (from
/// the `Fanout-Item` header or the body), run, answer the outcome. The child never
/// touches D1: the dispatcher commits for it.
pub async fn handle(item_json: &[u8], req: &Request, cfg: &Config) -> Result<Outcome, ApiError> {
    let header = req.headers().get(SIGNATURE_HEADER).ok().flatten();
    let now_secs = clock::now_ms() / 1_000;
    if let Err(reason) =
        signature::verify(&cfg.dispatch_secret, header.as_deref(), now_secs, item_json)
    {
        log::error(
            "dispatch_rejected",
            serde_json::json!({ "reason": format!("{reason:?}") }),
        );
        return Err(ApiError::Unauthorized);
    }
    let item: ClaimedItem = parse_json(item_json)?;
    let outcome = run_with_timeout(&item, &cfg.webhook_secret, cfg.settings.job_timeout_ms).await;
    if outcome != Outcome::Done {
        log::event(
            "item_outcome",
            serde_json::json!({
                "batch_id": item.batch_id, "item_id": item.item_id, "subject_id": item.subject_id,
                "attempt": item.attempt, "outcome": outcome,
            }),
        );
    }
    Ok(outcome)
}
