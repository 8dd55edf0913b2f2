//! Internal kind `callback`: a batch's completion callback (`core::callback`).
//! Its rows are enqueued by the Worker when a batch ends, never by a subject or
//! an item, so it accepts no payload from a request. A run POSTs the batch's
//! summary to `on_finish.url`, signed with `WEBHOOK_SECRET` like a webhook, with
//! `Idempotency-Key: batch:<id>:<finished_at>` (one per end); the answer is
//! classified like a webhook's.

use serde_json::Value;

use super::JobKind;
#[cfg(target_arch = "wasm32")]
use crate::core::model::{ClaimedItem, Ran};
use crate::core::target::TargetPolicy;

pub struct Callback;

impl JobKind for Callback {
    fn name(&self) -> &'static str {
        crate::core::callback::KIND
    }

    /// Never reached from a request (`jobs::check_payload` knows only the public
    /// kinds); refuses all the same.
    fn validate(&self, _payload: &Value, _policy: &TargetPolicy) -> Result<(), String> {
        Err("callback rows are enqueued by the Worker when a batch ends".into())
    }

    fn subrequests_per_run(&self) -> i64 {
        1
    }

    #[cfg(target_arch = "wasm32")]
    fn run<'a>(
        &'a self,
        ctx: &'a super::JobContext,
        item: &'a ClaimedItem,
    ) -> futures::future::LocalBoxFuture<'a, Ran> {
        Box::pin(async move { run(ctx, item).await.into() })
    }
}

#[cfg(target_arch = "wasm32")]
async fn run(ctx: &super::JobContext, item: &ClaimedItem) -> crate::core::model::Outcome {
    use super::webhook::post_signed;
    use crate::core::callback::Payload;
    use crate::core::model::Outcome;

    // The URL was checked when the batch (or its schedule) was written; checked
    // again, as every delivery is.
    let checked = Payload::parse(&item.payload).and_then(|p| {
        let url =
            crate::core::target::validate(&p.url, &ctx.policy()).map_err(|e| e.to_string())?;
        Ok((p, url))
    });
    let (payload, url) = match checked {
        Ok(checked) => checked,
        Err(e) => return Outcome::Fail(format!("not sent: {e}")),
    };
    post_signed(
        &ctx.signal,
        &url,
        payload.body(),
        &payload.idempotency_key(),
        &ctx.webhook_secret,
    )
    .await
}
