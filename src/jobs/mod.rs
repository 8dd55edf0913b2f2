//! Job kinds: what running one item means. A kind validates its payload when a
//! subject or item is written (pure, host-tested) and runs it in the Worker.
//! Add a kind by implementing [`JobKind`] and listing it in [`REGISTRY`].
//! [`INTERNAL`] kinds run rows the Worker enqueues itself (completion callbacks):
//! no subject or item may name them.

pub mod callback;
pub mod multi;
pub mod noop;
pub mod webhook;

use serde_json::Value;

#[cfg(target_arch = "wasm32")]
use crate::core::model::{ClaimedItem, Ran};
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
    /// `OWN_HOSTNAMES`, checked again at run time: a URL written before the setting
    /// named its host fails then.
    pub own_hostnames: Vec<String>,
    /// Aborted when the job's time is up, so its fetches stop too.
    pub signal: worker::AbortSignal,
    /// `JOB_TIMEOUT_MS`: a job that can report partial results gives up on
    /// what is still out a little sooner (`core::timing::channel_deadline_ms`).
    pub job_timeout_ms: i64,
}

#[cfg(target_arch = "wasm32")]
impl JobContext {
    /// The target policy a run checks its URLs against again ([`run_policy`]).
    pub fn policy(&self) -> TargetPolicy<'_> {
        run_policy(self.allow_private_targets, &self.own_hostnames)
    }

    pub fn dispatch_keys(&self) -> Vec<&str> {
        self.dispatch_secrets.iter().map(String::as_str).collect()
    }
}

/// The target policy of a run: the settings' rules and `OWN_HOSTNAMES`. The host a
/// request came in on (`TargetPolicy::own_host`) is not known to a child.
pub fn run_policy(allow_private: bool, own_hostnames: &[String]) -> TargetPolicy<'_> {
    TargetPolicy {
        allow_private,
        own_host: None,
        own_hostnames,
    }
}

pub trait JobKind: Sync {
    /// The `kind` stored on subjects and items.
    fn name(&self) -> &'static str;

    /// Reject a payload this kind could never run, before it is stored. `policy`
    /// says which network targets are allowed (`core::target`).
    fn validate(&self, payload: &Value, policy: &TargetPolicy) -> Result<(), String>;

    /// Hide what a listing must not show (secrets), in place. Default: nothing.
    fn redact(&self, _payload: &mut Value) {}

    /// Subrequests one run makes at most; counted against the budget in inline
    /// mode.
    fn subrequests_per_run(&self) -> i64;

    /// Whether its items have channels, each with its receipt (`core::receipts`).
    fn has_channels(&self) -> bool {
        false
    }

    /// Run one item: its outcome and, for kinds with channels, each channel's
    /// result. Must not touch D1: the dispatcher commits them.
    #[cfg(target_arch = "wasm32")]
    fn run<'a>(
        &'a self,
        ctx: &'a JobContext,
        item: &'a ClaimedItem,
    ) -> futures::future::LocalBoxFuture<'a, Ran>;
}

/// Every job kind subjects and items may use.
pub static REGISTRY: &[&dyn JobKind] = &[&webhook::Webhook, &multi::Multi, &noop::Noop];

/// Kinds of rows the Worker enqueues itself: completion callbacks.
pub static INTERNAL: &[&dyn JobKind] = &[&callback::Callback];

/// The kind that runs a claimed row, public or internal.
pub fn find(kind: &str) -> Option<&'static dyn JobKind> {
    REGISTRY
        .iter()
        .chain(INTERNAL)
        .copied()
        .find(|k| k.name() == kind)
}

/// Whether items of `kind` have channels (their listing shows `receipts`).
pub fn has_channels(kind: &str) -> bool {
    find(kind).is_some_and(|k| k.has_channels())
}

/// The payload check used by request validation: public kinds only.
pub fn check_payload(kind: &str, payload: &Value, policy: &TargetPolicy) -> Result<(), String> {
    match REGISTRY.iter().find(|k| k.name() == kind) {
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

/// The largest per-run subrequest cost of any kind (inline budget planning: a
/// claim cannot know its items' kinds, so each is held at the worst, `multi`'s).
pub fn max_subrequests_per_run() -> i64 {
    REGISTRY
        .iter()
        .chain(INTERNAL)
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
        own_hostnames: &[],
    };

    #[test]
    fn unknown_kinds_name_the_known_ones() {
        let err = check_payload("email", &json!({}), &POLICY).unwrap_err();
        assert_eq!(
            err,
            "unknown kind \"email\"; known kinds: webhook, multi, noop"
        );
        // Internal kinds run, but no subject or item may name them.
        assert!(find("callback").is_some());
        let err = check_payload("callback", &json!({"url": "https://example.com/"}), &POLICY)
            .unwrap_err();
        assert!(err.starts_with("unknown kind \"callback\""), "{err}");
    }

    #[test]
    fn known_kinds_validate_their_payload() {
        let check = |kind, payload| check_payload(kind, &payload, &POLICY);
        assert!(check("webhook", json!({"url": "https://example.com/x"})).is_ok());
        assert!(check("webhook", json!({"url": "ftp://example.com/x"})).is_err());
        assert!(check("noop", json!({})).is_ok());
        assert!(check("noop", json!([])).is_err());
        let channels = json!({"channels": [{"name": "email", "url": "https://example.com/e"}]});
        assert!(check("multi", channels).is_ok());
        assert!(check("multi", json!({"channels": []})).is_err());
    }

    /// A run checks its URLs again under [`run_policy`] (`JobContext::policy`): a
    /// target written before `OWN_HOSTNAMES` named its host fails when it runs, as
    /// webhook and multi runs parse their payload and a callback run its URL.
    #[test]
    fn a_target_written_before_own_hostnames_named_it_fails_at_run_time() {
        let url = "https://cron-fanout.acct.workers.dev/batches";
        let hook = json!({ "url": url });
        let multi = json!({"channels": [{"name": "a", "url": "https://example.com/a"}, {"name": "b", "url": url}]});
        assert!(check_payload("webhook", &hook, &run_policy(false, &[])).is_ok());
        assert!(check_payload("multi", &multi, &run_policy(false, &[])).is_ok());
        let own = ["cron-fanout.acct.workers.dev".to_string()];
        let policy = run_policy(false, &own);
        let err = webhook::parse_payload(&hook, &policy).unwrap_err();
        assert!(err.contains("OWN_HOSTNAMES"), "{err}");
        let err = multi::parse_payload(&multi, &policy).unwrap_err();
        assert!(err.contains("OWN_HOSTNAMES"), "{err}");
        let err = crate::core::target::validate(url, &policy).unwrap_err();
        assert!(err.to_string().contains("OWN_HOSTNAMES"), "{err}");
        // ALLOW_PRIVATE_TARGETS does not lift it.
        assert!(webhook::parse_payload(&hook, &run_policy(true, &own)).is_err());
        assert!(webhook::parse_payload(&json!({"url": "https://example.com/"}), &policy).is_ok());
    }

    #[test]
    fn only_multi_has_channels_and_the_inline_cost_is_its_worst() {
        assert!(has_channels("multi"));
        for kind in ["webhook", "noop", "callback", "unknown"] {
            assert!(!has_channels(kind), "{kind}");
        }
        assert_eq!(
            max_subrequests_per_run(),
            crate::core::receipts::MAX_CHANNELS as i64
        );
    }
}
