//! Job kinds: what running one item means. A kind validates its payload when a
//! subject or item is written (pure, host-tested) and runs it in the Worker.
//! Add a kind by implementing [`JobKind`] and listing it in [`REGISTRY`].

pub mod noop;
pub mod webhook;

use serde_json::Value;

#[cfg(target_arch = "wasm32")]
use crate::core::model::{ClaimedItem, Outcome};
use crate::core::target::TargetPolicy;

/// What a job may use while it runs.
#[cfg(target_arch = "wasm32")]
pub struct JobContext {
    pub webhook_secret: String,
    /// `DISPATCH_SECRET` (and the previous one during a rotation): no subject's
    /// signing secret may equal one.
    pub dispatch_secrets: Vec<String>,
    /// `ALLOW_PRIVATE_TARGETS`, checked again at run time.
    pub allow_private_targets: bool,
    /// Aborted when the job's time is up, so its fetches stop too.
    pub signal: worker::AbortSignal,
}

pub trait JobKind: Sync {
    /// The `kind` stored on subjects and items.
    fn name(&self) -> &'static str;

    /// Reject a payload this kind could never run, before it is stored. `policy`
    /// says which network targets are allowed (`core::target`).
    fn validate(&self, payload: &Value, policy: &TargetPolicy) -> Result<(), String>;

    /// Hide what a listing must not show (secrets), in place. Default: nothing.
    fn redact(&self, _payload: &mut Value) {}

    /// Subrequests one run makes; counted against the budget in inline mode.
    fn subrequests_per_run(&self) -> i64;

    /// Run one item. Must not touch D1: the dispatcher commits the outcome.
    #[cfg(target_arch = "wasm32")]
    fn run<'a>(
        &'a self,
        ctx: &'a JobContext,
        item: &'a ClaimedItem,
    ) -> futures::future::LocalBoxFuture<'a, Outcome>;
}

/// Every job kind this Worker knows.
pub static REGISTRY: &[&dyn JobKind] = &[&webhook::Webhook, &noop::Noop];

pub fn find(kind: &str) -> Option<&'static dyn JobKind> {
    REGISTRY.iter().copied().find(|k| k.name() == kind)
}

/// The payload check used by request validation.
pub fn check_payload(kind: &str, payload: &Value, policy: &TargetPolicy) -> Result<(), String> {
    match find(kind) {
        Some(job) => job.validate(payload, policy),
        None => {
            let known: Vec<&str> = REGISTRY.iter().map(|k| k.name()).collect();
            Err(format!(
                "unknown kind {kind:?}; known kinds: {}",
                known.join(", ")
            ))
        }
    }
}

/// A stored payload as listings show it: the kind's [`JobKind::redact`] applied.
pub fn public_payload(kind: &str, mut payload: Value) -> Value {
    if let Some(job) = find(kind) {
        job.redact(&mut payload);
    }
    payload
}

/// The largest per-run subrequest cost of any kind (inline budget planning).
pub fn max_subrequests_per_run() -> i64 {
    REGISTRY
        .iter()
        .map(|k| k.subrequests_per_run())
        .max()
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const POLICY: TargetPolicy = TargetPolicy {
        allow_private: false,
        own_host: None,
    };

    #[test]
    fn unknown_kinds_name_the_known_ones() {
        let err = check_payload("email", &json!({}), &POLICY).unwrap_err();
        assert_eq!(err, "unknown kind \"email\"; known kinds: webhook, noop");
    }

    #[test]
    fn known_kinds_validate_their_payload() {
        let check = |kind, payload| check_payload(kind, &payload, &POLICY);
        assert!(check("webhook", json!({"url": "https://example.com/x"})).is_ok());
        assert!(check("webhook", json!({"url": "ftp://example.com/x"})).is_err());
        assert!(check("noop", json!({})).is_ok());
        assert!(check("noop", json!([])).is_err());
    }
}
