//! Internal kind `callback`: a batch's completion callback (`core::callback`).
//! Its rows are enqueued by the Worker when a batch ends, never by a subject or
//! an item, so it accepts no payload from a request. A run POSTs the batch's
//! summary to `on_finish.url`, signed like a webhook with `on_finish.signing_secret`
//! if the batch has one, else with `WEBHOOK_SECRET`, with
//! `Idempotency-Key: batch:<id>:<finished_at>` (one per end); the answer is
//! classified like a webhook's.

use serde_json::Value;

use super::webhook::{post_signed, signing_secret};
use super::{Context, Job, Outcome};
use crate::core::batch::callback::Payload;
use crate::core::security::target::TargetPolicy;

pub struct Callback;

impl Job for Callback {
    type Payload = Value;

    fn name(&self) -> &'static str {
        crate::core::batch::callback::KIND
    }

    /// Never reached from a request (`Jobs::check_payload` knows only the public
    /// kinds); refuses all the same.
    fn validate(&self, _payload: &Value, _targets: &TargetPolicy) -> Result<(), String> {
        Err("callback rows are enqueued by the Worker when a batch ends".into())
    }

    async fn run(&self, ctx: &Context<'_>, _payload: Value) -> Outcome {
        // The URL was checked when the batch (or its schedule) was written; checked
        // again, as every delivery is.
        // A secret equal to a dispatch secret would let its receiver forge
        // dispatches: refused, as a subject's own.
        let dispatch_secrets = ctx.config.dispatch_keys();
        let checked = Payload::parse(&ctx.item.payload).and_then(|p| {
            let url = crate::core::security::target::validate(&p.url, &ctx.config.policy())
                .map_err(|e| e.to_string())?;
            let own = p.signing_secret.as_deref();
            let secret = signing_secret(own, &ctx.config.webhook_secret, &dispatch_secrets)
                .map_err(|e| format!("on_finish.{e}"))?
                .to_string();
            Ok((p, url, secret))
        });
        let (payload, url, secret) = match checked {
            Ok(checked) => checked,
            Err(e) => return Outcome::Fail(format!("not sent: {e}")),
        };
        post_signed(
            ctx.outbound(),
            &ctx.signal,
            &url,
            payload.body(),
            &payload.idempotency_key(),
            &secret,
        )
        .await
    }
}
