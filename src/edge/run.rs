//! Running one item: the child side of `POST /internal/run` and the shared
//! "run a job under a timeout" used by both the child and inline mode.

use std::cell::RefCell;

use worker::Env;

use super::clock;
use super::config::Config;
use super::log::{self, InvocationLog};
use super::outbound::EdgeOutbound;
use crate::core::batch::model::{ClaimedItem, Outcome, Ran};
use crate::core::batch::requests::parse_json;
use crate::core::drain::dispatch::Dispatched;
use crate::core::error::ApiError;
use crate::core::log_limit::{LogDecision, LogLimit};
use crate::core::security::signature::{self, SignatureError, SignatureHeader};
use crate::jobs::{Jobs, RunConfig};

thread_local! {
    // Anyone can send POST /internal/run: its rejections are logged within a
    // limit per isolate, with a count of the lines left out.
    static REJECTED: RefCell<LogLimit> = const { RefCell::new(LogLimit::rejected_dispatches()) };
}

/// What runs a job in this invocation: the Worker's kinds (its `Fanout`) and
/// its environment, which a kind reaches through `Context::host`.
#[derive(Clone, Copy)]
pub struct Runner<'a> {
    pub jobs: &'a Jobs,
    pub env: &'a Env,
}

/// Run `item`'s job through the runtime's outbound seam, giving up after its
/// timeout (`Jobs::run`: the kind's own, at most `JOB_TIMEOUT_MS`; a transient
/// failure, with no channel results). A `multi` job gives up on its late
/// channels before this (`jobs::multi`), so it returns every channel's result
/// in time; this timer is its backstop. The runner's `Env` is also the seam's:
/// the service bindings `service` items call. `invocation`: the invocation it
/// runs for (its requests carry the id as `Fanout-Invocation`).
pub async fn run_with_timeout(
    item: &ClaimedItem,
    cfg: &Config,
    runner: Runner<'_>,
    invocation: Option<&str>,
) -> Ran {
    let config = RunConfig {
        invocation: invocation.map(str::to_string),
        webhook_secret: cfg.secrets.webhook.clone(),
        dispatch_secrets: cfg
            .secrets
            .dispatch_keys()
            .into_iter()
            .map(str::to_string)
            .collect(),
        allow_private_targets: cfg.settings.allow_private_targets,
        own_hostnames: cfg.settings.own_hostnames.clone(),
        job_timeout_ms: cfg.settings.job_timeout_ms,
        service_bindings: cfg.settings.service_bindings.clone(),
    };
    // The Worker's Env reaches the kinds as `Context::host::<worker::Env>()`.
    let host: &dyn std::any::Any = runner.env;
    runner
        .jobs
        .run(item, &config, &EdgeOutbound { env: runner.env }, Some(host))
        .await
}

/// The dispatch signature (the first line of the body, `core::dispatch`), checked
/// for shape and age before the rest is read: a dispatch older than the lease can
/// never be valid (`signature::dispatch_max_age_secs`).
pub fn admit(header: Option<&str>, cfg: &Config) -> Result<SignatureHeader, ApiError> {
    let now_secs = clock::wall_ms() / 1_000;
    let max_age = signature::dispatch_max_age_secs(cfg.settings.lease_ms);
    SignatureHeader::parse(header)
        .and_then(|h| h.check_fresh(now_secs, max_age).map(|()| h))
        .map_err(reject)
}

/// `POST /internal/run`, once admitted: verify the signature over the item's JSON
/// and its invocation id (the body after the signature line) with the current or
/// the previous dispatch secret, run, answer the outcome. The child never touches
/// D1: the dispatcher commits for it.
pub async fn handle(
    item_json: &[u8],
    header: &SignatureHeader,
    cfg: &Config,
    runner: Runner<'_>,
) -> Result<Ran, ApiError> {
    header
        .check_tag(cfg.secrets.dispatch_keys(), item_json)
        .map_err(reject)?;
    let Dispatched { invocation, item } = parse_json(item_json)?;
    // The child's lines carry the id of the invocation that dispatched it.
    let logger = InvocationLog::new(invocation);
    let ran = run_with_timeout(&item, cfg, runner, Some(logger.id())).await;
    if ran.outcome != Outcome::Done {
        logger.event(
            "item_outcome",
            serde_json::json!({
                "batch_id": item.batch_id, "item_id": item.item_id, "subject_id": item.subject_id,
                "attempt": item.attempt, "outcome": ran.outcome, "channels": ran.channels,
            }),
        );
    }
    Ok(ran)
}

/// A refused dispatch: 401, and a log line unless too many were written lately.
fn reject(reason: SignatureError) -> ApiError {
    let decision = REJECTED.with(|l| l.borrow_mut().decide(clock::wall_ms()));
    if let LogDecision::Write { suppressed } = decision {
        log::error(
            "dispatch_rejected",
            serde_json::json!({ "reason": format!("{reason:?}"), "suppressed_since_last": suppressed }),
        );
    }
    ApiError::Unauthorized
}
