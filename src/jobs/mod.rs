//! Job kinds: what running one item means. A kind validates its payload when a
//! subject or item is written (pure, host-tested) and runs it in the Worker.
//! Add a kind by implementing [`JobKind`] and listing it in [`REGISTRY`].

pub mod noop;
pub mod webhook;

use serde_json::Value;

#[cfg(target_arch = "wasm32")]
use crate::core::model::{ClaimedItem, Outcome};

/// What a job may use while it runs.
#[cfg(target_arch = "wasm32")]
pub struct JobContext {
    pub webhook_secret: String,
    /// Aborted when the job's time is up, so its fetches stop too.
    pub signal: worker::AbortSignal,
}

pub trait JobKind: Sync {
    /// The `kind` stored on subjects and items.
    fn name(&self) -> &'static str;

    /// Reject a payload this kind could never run, before it is stored.
    fn validate(&self, payload: &Value) -> Result<(), String>;

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
pub fn check_payload(kind: &str, payload: &Value) -> Result<(), String> {
    match find(kind) {
        Some(job) => job.validate(payload),
        None => {
            let known: Vec<&str> = REGISTRY.iter().map(|k| k.name()).collect();
            Err(format!(
                "unknown kind {kind:?}; known kinds: {}",
                known.join(", ")
            ))
        }
    }
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

    #[test]
    fn unknown_kinds_name_the_known_ones() {
        let err = check_payload("email", &json!({})).unwrap_err();
        assert_eq!(err, "unknown kind \"email\"; known kinds: webhook, noop");
    }

    #[test]
    fn known_kinds_validate_their_payload() {
        assert!(check_payload("webhook", &json!({"url": "https://example.com/x"})).is_ok());
        assert!(check_payload("webhook", &json!({"url": "ftp://example.com/x"})).is_err());
        assert!(check_payload("noop", &json!({})).is_ok());
        assert!(check_payload("noop", &json!([])).is_err());
    }
}
