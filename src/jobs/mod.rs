//! Job kinds: what running one item means, and the API a kind is written in.
//!
//! A kind is a [`Job`]: a name, a payload type and its validation (at write time,
//! pure), an async `run` that returns [`Outcome`] (done, retry, fail), and
//! defaults for the rest (listing redaction, subrequest cost, channels, its own
//! [`Policy`], the limit keys its items hold). A run gets a [`Context`]: the item, the abort signal, the
//! outbound seam ([`outbound::Outbound`]: fetch, sleep, clock), the settings a
//! built-in kind needs, the Worker's environment (on the Worker only, as an
//! opaque handle) and, for kinds with channels, a place to report each
//! channel's result. [`Jobs`] is the registry: the built-in kinds plus any
//! registered at runtime; request validation and the child both use it.
//! Internal kinds run rows the Worker enqueues itself (completion callbacks): no
//! subject or item may name them.

pub mod bindings;
pub mod callback;
pub mod memory;
pub mod multi;
pub mod noop;
pub mod outbound;
pub mod service;
pub mod webhook;

use std::any::Any;
use std::cell::RefCell;
use std::collections::BTreeMap;

use futures::future::{select, Either, LocalBoxFuture};
use serde::de::DeserializeOwned;
use serde::Deserialize as _;
use serde_json::Value;

pub use crate::core::batch::model::{ClaimedItem, Outcome, Ran, RefusedBy};
use crate::core::batch::receipts::{self, ChannelResults, Receipts};
use crate::core::drain::retry::RetryPolicy;
use crate::core::security::target::{self, TargetPolicy};
pub use bindings::{Bindings, Kv};
pub use outbound::{
    BodyRead, Correlated, Outbound, Request, Response, ServiceError, Signal,
    DEFAULT_MAX_BODY_BYTES, FAILURE_TEXT_BYTES, INVOCATION_HEADER,
};

/// A job kind. Only `name` and `run` are required; the rest has defaults.
pub trait Job: 'static {
    /// What items of this kind carry, parsed from their stored JSON (use
    /// `serde_json::Value` to take any JSON and parse it yourself).
    type Payload: DeserializeOwned;

    /// The `kind` stored on subjects and items: unique in a registry.
    fn name(&self) -> &'static str;

    /// Refuse a payload this kind could never run, before it is stored (400
    /// `invalid_payload`). `targets` says which network targets the deployment
    /// allows (`core::target`; `target::validate_field` names the field): the
    /// rules [`Context::fetch`] applies at run time anyway, checked here only to
    /// refuse a bad URL at once. Default: any payload that parses.
    fn validate(&self, _payload: &Self::Payload, _targets: &TargetPolicy) -> Result<(), String> {
        Ok(())
    }

    /// Run one item. Must not touch D1: the dispatcher commits the outcome.
    /// Dropped when the job's time is up (the abort signal fires first).
    #[allow(async_fn_in_trait)] // Workers are single-threaded: no `Send` needed.
    async fn run(&self, ctx: &Context<'_>, payload: Self::Payload) -> Outcome;

    /// Hide what a listing must not show (secrets), in place. Default: nothing.
    fn redact(&self, _payload: &mut Value) {}

    /// Subrequests one run makes at most: counted against the budget in inline
    /// mode. Default 1.
    fn subrequests_per_run(&self) -> i64 {
        1
    }

    /// Whether every item of it has channels, each with its receipt
    /// (`core::receipts`): its listing shows `receipts` (`{}` before any). A run
    /// of any kind may report channels ([`Context::report_channel`]); an item that
    /// did shows them whatever this says (a `service` item whose handler reported
    /// some).
    fn has_channels(&self) -> bool {
        false
    }

    /// This kind's own retry and timeout settings. Default: the global ones.
    fn policy(&self) -> Policy {
        Policy::default()
    }

    /// Whether the drain runs it itself, not through a `SELF` child, in fanout
    /// mode: for a kind whose run is one call to another Worker (`service`), which
    /// is an invocation of its own already. Default: no.
    fn runs_in_drain(&self) -> bool {
        false
    }

    /// The limit keys an item of this kind holds besides its subject's or its
    /// own `limits` (`PUT /limits/{key}` limits them): e.g. `"github"` for a
    /// kind that calls GitHub, or a key per account read from the payload. Read
    /// once, when the subject is written or the item enqueued, and stored with
    /// it; each must be a key (`core::limits::is_key`), else the write is
    /// refused (400 `invalid_limits`). Default: none.
    fn limit_keys(&self, _payload: &Self::Payload) -> Vec<String> {
        Vec::new()
    }
}

/// A kind's own settings; `None` keeps the global setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// Attempts per item, as `MAX_ATTEMPTS` (1 to 100): its items get it when
    /// enqueued, and a replay grows their allowance by it
    /// (`Jobs::max_attempts_by_kind`, `Store::with_kind_attempts`).
    pub max_attempts: Option<i64>,
    /// How long one run may take, as `JOB_TIMEOUT_MS`. Leases and the drain's
    /// deadlines are sized from `JOB_TIMEOUT_MS`, so a longer one is clamped to it:
    /// a kind may only shorten its time.
    pub timeout_ms: Option<i64>,
    /// Backoff base and cap, as `RETRY_BASE_MS` and `RETRY_MAX_MS`: applied by
    /// the drain's commit (`Jobs::retry_policies`).
    pub retry_base_ms: Option<i64>,
    pub retry_max_ms: Option<i64>,
}

impl Policy {
    /// The ranges of the global settings, so a kind cannot ask for what a
    /// deployment could not be configured with.
    pub fn check(&self) -> Result<(), String> {
        let range = |name: &str, v: Option<i64>, lo: i64, hi: i64| match v {
            Some(v) if !(lo..=hi).contains(&v) => {
                Err(format!("{name} must be between {lo} and {hi}, got {v}"))
            }
            _ => Ok(()),
        };
        range("max_attempts", self.max_attempts, 1, 100)?;
        range("timeout_ms", self.timeout_ms, 1, 900_000)?;
        range("retry_base_ms", self.retry_base_ms, 0, 86_400_000)?;
        range("retry_max_ms", self.retry_max_ms, 0, 7 * 86_400_000)?;
        if let (Some(base), Some(max)) = (self.retry_base_ms, self.retry_max_ms) {
            if max < base {
                return Err(format!(
                    "retry_max_ms ({max}) must be at least retry_base_ms ({base})"
                ));
            }
        }
        Ok(())
    }

    /// The job timeout a run of this kind gets under the global `JOB_TIMEOUT_MS`.
    pub fn timeout_ms(&self, global_ms: i64) -> i64 {
        self.timeout_ms.map_or(global_ms, |t| t.min(global_ms))
    }

    /// The attempts an item of this kind gets when enqueued.
    pub fn max_attempts(&self, global: i64) -> i64 {
        self.max_attempts.unwrap_or(global)
    }

    /// The backoff of this kind's retries; a cap below the base caps the base.
    pub fn retry(&self, global: RetryPolicy) -> RetryPolicy {
        let max_ms = self.retry_max_ms.unwrap_or(global.max_ms);
        RetryPolicy {
            base_ms: self.retry_base_ms.unwrap_or(global.base_ms).min(max_ms),
            max_ms,
        }
    }
}

/// The Worker's settings and secrets a run may need (the built-in kinds sign
/// deliveries and check targets again). Its default is a deployment's with
/// every setting at its default (`JOB_TIMEOUT_MS` 10 s) and no secrets.
/// Built from [`RunConfig::default`], its public fields set after.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunConfig {
    /// The id of the invocation that dispatched the item (a tick's or a
    /// drainer's, `GET /invocations`): every request of the run carries it as
    /// `Fanout-Invocation` ([`Correlated`]). `None`: no header.
    pub invocation: Option<String>,
    /// `WEBHOOK_SECRET`.
    pub webhook_secret: String,
    /// `DISPATCH_SECRET` (and the previous one during a rotation): no subject's
    /// signing secret may equal one.
    pub dispatch_secrets: Vec<String>,
    /// `ALLOW_PRIVATE_TARGETS`, checked again at run time.
    pub allow_private_targets: bool,
    /// `OWN_HOSTNAMES`, checked again at run time: a URL written before the setting
    /// named its host fails then.
    pub own_hostnames: Vec<String>,
    /// `JOB_TIMEOUT_MS`, the global job timeout.
    pub job_timeout_ms: i64,
    /// `SERVICE_BINDINGS`, checked again at run time: a `service` item naming a
    /// binding no longer listed fails then.
    pub service_bindings: Vec<String>,
}

impl Default for RunConfig {
    fn default() -> RunConfig {
        let defaults = crate::core::settings::Settings::from_lookup(|_| None)
            .expect("the default settings parse");
        RunConfig {
            invocation: None,
            webhook_secret: String::new(),
            dispatch_secrets: Vec::new(),
            allow_private_targets: defaults.allow_private_targets,
            own_hostnames: defaults.own_hostnames,
            job_timeout_ms: defaults.job_timeout_ms,
            service_bindings: defaults.service_bindings,
        }
    }
}

impl RunConfig {
    /// The target policy a run checks its URLs against again: the settings' rules
    /// and `OWN_HOSTNAMES` (the host a request came in on is not known to a child).
    pub fn policy(&self) -> TargetPolicy<'_> {
        TargetPolicy {
            allow_private: self.allow_private_targets,
            own_host: None,
            own_hostnames: &self.own_hostnames,
            services: &self.service_bindings,
        }
    }

    pub fn dispatch_keys(&self) -> Vec<&str> {
        self.dispatch_secrets.iter().map(String::as_str).collect()
    }
}

/// What one run may use.
pub struct Context<'a> {
    /// The claimed item: `item_id`, `batch_id`, `subject_id`, `attempt` (1-based),
    /// `max_attempts`, `kind`, `payload` (as stored).
    pub item: &'a ClaimedItem,
    /// Aborted when the job's time is up; pass it to anything that outlives a
    /// dropped future ([`Context::fetch`] does).
    pub signal: Signal,
    pub config: &'a RunConfig,
    /// This run's time: `JOB_TIMEOUT_MS`, or the kind's shorter own.
    pub timeout_ms: i64,
    outbound: &'a dyn Outbound,
    host: Option<&'a dyn Any>,
    receipts: Receipts,
    channels: RefCell<ChannelResults>,
    retry_after_ms: std::cell::Cell<Option<i64>>,
    /// `retry_after_ms` is the item's own delay ([`Context::delay_retry`]).
    own_delay: std::cell::Cell<bool>,
    refused: RefCell<Option<RefusedBy>>,
    paced: std::cell::Cell<Option<crate::core::flow::pace::Paced>>,
    paced_keys: RefCell<Option<Vec<String>>>,
}

impl<'a> Context<'a> {
    /// A run's context. `host` is what [`Context::host`] gives back: the Worker's
    /// `worker::Env` on the Worker, anything (or nothing) in a host test.
    pub fn new(
        item: &'a ClaimedItem,
        config: &'a RunConfig,
        outbound: &'a dyn Outbound,
        host: Option<&'a dyn Any>,
    ) -> Context<'a> {
        Context {
            item,
            signal: Signal::new(),
            config,
            timeout_ms: config.job_timeout_ms,
            outbound,
            host,
            receipts: receipts::parse(item.receipts.as_deref()),
            channels: RefCell::new(ChannelResults::new()),
            retry_after_ms: std::cell::Cell::new(None),
            own_delay: std::cell::Cell::new(false),
            refused: RefCell::new(None),
            paced: std::cell::Cell::new(None),
            paced_keys: RefCell::new(None),
        }
    }

    /// Send `request`, aborted with the job's signal, if its URL is a target the
    /// deployment allows (`core::target`: public hosts unless
    /// `ALLOW_PRIVATE_TARGETS`, never `OWN_HOSTNAMES`); else nothing is sent and
    /// the error says why (`not sent: url host 10.0.0.1 is …`). An answer its
    /// receiver means as a refusal (`core::receiver`: a `429`, a `403` with a
    /// rate-limit signal, a `503` with a wait) is noted: should the run then
    /// return [`Outcome::Retry`], it spends no attempt, waits what the receiver
    /// asked (unless the kind says otherwise with [`Context::retry_after`]),
    /// and pauses the item's keys.
    pub async fn fetch(&self, request: Request) -> Result<Response, String> {
        if let Err(e) = target::validate(&request.url, &self.config.policy()) {
            return Err(format!("not sent: {e}"));
        }
        let response = self.outbound.fetch(request, &self.signal).await?;
        let now_ms = self.now_ms();
        let word = crate::core::flow::receiver::read(
            response.status,
            &response.headers,
            &response.body,
            now_ms,
            webhook::WAIT_CAP_MS,
        );
        if let Some(paced) = crate::core::flow::pace::paced(&word, now_ms) {
            self.note_paced(paced);
        }
        if word.refusal {
            self.note_refusal(RefusedBy::default());
            if let (None, Some(ms)) = (self.retry_after_ms.get(), word.wait_ms(now_ms)) {
                self.retry_after_ms.set(Some(ms));
            }
        }
        Ok(response)
    }

    /// The outbound seam itself (e.g. to fetch under a signal of one's own): no
    /// target rule applied, a kind checks its URLs itself.
    pub fn outbound(&self) -> &'a dyn Outbound {
        self.outbound
    }

    /// The real time, from the seam.
    pub fn now_ms(&self) -> i64 {
        self.outbound.now_ms()
    }

    /// A `[vars]` value of the Worker (`None` when unset): on the Worker from
    /// its `Env`, on the host what the test set ([`Bindings`]).
    pub fn var(&self, name: &str) -> Option<String> {
        self.outbound.bindings()?.var(name)
    }

    /// A secret of the Worker (`None` when unset), as [`Context::var`].
    pub fn secret(&self, name: &str) -> Option<String> {
        self.outbound.bindings()?.secret(name)
    }

    /// The KV namespace bound as `name`, as [`Context::var`]; an error names
    /// the missing binding.
    pub fn kv(&self, name: &str) -> Result<Box<dyn Kv + 'a>, String> {
        self.outbound
            .bindings()
            .and_then(|b| b.kv(name))
            .ok_or_else(|| format!("no KV namespace is bound as {name:?}"))
    }

    /// The runtime's environment, if it is a `T`: on the Worker, `worker::Env`
    /// (its secrets, KV, bindings). Host tests pass what they like.
    pub fn host<T: Any>(&self) -> Option<&'a T> {
        self.host.and_then(|h| h.downcast_ref::<T>())
    }

    /// Whether `channel` was delivered by an earlier run (do not send it again).
    pub fn is_delivered(&self, channel: &str) -> bool {
        receipts::is_delivered(&self.receipts, channel)
    }

    /// The channels earlier runs delivered, in name order.
    pub fn delivered_channels(&self) -> Vec<&str> {
        self.receipts
            .keys()
            .filter(|name| receipts::is_delivered(&self.receipts, name))
            .map(String::as_str)
            .collect()
    }

    /// The item's receipts as the claim read them, one per channel an earlier run
    /// reported.
    pub fn receipts(&self) -> &Receipts {
        &self.receipts
    }

    /// Report one channel's result of this run: committed with the outcome, so a
    /// retry sends only what is still missing.
    pub fn report_channel(&self, channel: &str, outcome: Outcome) {
        self.channels
            .borrow_mut()
            .insert(channel.into(), outcome.bounded());
    }

    /// Ask that a retry of this run wait `ms` (e.g. the answer's `Retry-After`)
    /// instead of the backoff; the drain caps it at the retry cap. Ignored unless
    /// the run returns [`Outcome::Retry`].
    pub fn retry_after(&self, ms: i64) {
        self.retry_after_ms.set(Some(ms));
        self.own_delay.set(false);
    }

    /// Delay this item's retry by `ms`, as its handler decided for it alone
    /// (a `service` handler's `after_seconds`): no key is paused or taught,
    /// and the retry spends its attempt. Not carried by a `SELF` child's
    /// answer: only kinds that run in the drain use it.
    pub(crate) fn delay_retry(&self, ms: i64) {
        self.retry_after_ms.set(Some(ms));
        self.own_delay.set(true);
    }

    /// Note what an answer's announced budget asks of the item's keys
    /// (`core::flow::pace`): the latest answer's word stands.
    pub(crate) fn note_paced(&self, paced: crate::core::flow::pace::Paced) {
        self.paced.set(Some(paced));
        self.paced_keys.replace(None);
    }

    /// [`Context::note_paced`] for `keys` alone (a `multi` channel's `host:`
    /// key), not every key the item holds.
    pub(crate) fn note_paced_keys(&self, paced: crate::core::flow::pace::Paced, keys: Vec<String>) {
        self.paced.set(Some(paced));
        self.paced_keys.replace(Some(keys));
    }

    /// Note that a receiver refused this run (`RefusedBy`): merged with any
    /// refusal noted before (a refusal of every key wins).
    pub(crate) fn note_refusal(&self, by: RefusedBy) {
        let mut noted = self.refused.borrow_mut();
        *noted = Some(match noted.take() {
            None => by,
            Some(before) => RefusedBy {
                keys: match (before.keys, by.keys) {
                    (Some(mut a), Some(b)) => {
                        for key in b {
                            if !a.contains(&key) {
                                a.push(key);
                            }
                        }
                        Some(a)
                    }
                    _ => None,
                },
                with_failure: before.with_failure || by.with_failure,
            },
        });
    }

    fn take_channels(&self) -> ChannelResults {
        std::mem::take(&mut self.channels.borrow_mut())
    }
}

/// A [`Job`] behind a pointer: what the registry holds.
pub(crate) trait Kind {
    fn name(&self) -> &'static str;
    /// The payload's check, then the limit keys the kind adds for it.
    fn check(&self, payload: &Value, targets: &TargetPolicy) -> Result<Vec<String>, String>;
    fn redact(&self, payload: &mut Value);
    fn subrequests_per_run(&self) -> i64;
    fn has_channels(&self) -> bool;
    fn policy(&self) -> Policy;
    fn runs_in_drain(&self) -> bool;
    fn run<'a>(&'a self, ctx: &'a Context<'a>) -> LocalBoxFuture<'a, Outcome>;
}

impl<J: Job> Kind for J {
    fn name(&self) -> &'static str {
        Job::name(self)
    }

    fn check(&self, payload: &Value, targets: &TargetPolicy) -> Result<Vec<String>, String> {
        let p = J::Payload::deserialize(payload)
            .map_err(|e| format!("{} payload: {e}", Job::name(self)))?;
        self.validate(&p, targets)?;
        Ok(self.limit_keys(&p))
    }

    fn redact(&self, payload: &mut Value) {
        Job::redact(self, payload)
    }

    fn subrequests_per_run(&self) -> i64 {
        Job::subrequests_per_run(self)
    }

    fn has_channels(&self) -> bool {
        Job::has_channels(self)
    }

    fn policy(&self) -> Policy {
        Job::policy(self)
    }

    fn runs_in_drain(&self) -> bool {
        Job::runs_in_drain(self)
    }

    fn run<'a>(&'a self, ctx: &'a Context<'a>) -> LocalBoxFuture<'a, Outcome> {
        Box::pin(async move {
            match serde_json::from_str::<J::Payload>(&ctx.item.payload) {
                Ok(payload) => Job::run(self, ctx, payload).await,
                Err(e) => Outcome::Fail(format!("not run: {} payload: {e}", Job::name(self))),
            }
        })
    }
}

/// Why a kind cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterError(pub String);

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The job kinds a Worker runs: the built-in ones and any registered with
/// [`Jobs::register`].
pub struct Jobs {
    public: Vec<Box<dyn Kind>>,
    internal: Vec<Box<dyn Kind>>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs")
            .field("kinds", &self.names())
            .finish()
    }
}

impl Default for Jobs {
    fn default() -> Jobs {
        Jobs::builtin()
    }
}

impl Jobs {
    /// `webhook`, `multi`, `service`, `noop`, and the internal `callback`.
    pub fn builtin() -> Jobs {
        Jobs {
            public: vec![
                Box::new(webhook::Webhook),
                Box::new(multi::Multi),
                Box::new(service::Service),
                Box::new(noop::Noop),
            ],
            internal: vec![Box::new(callback::Callback)],
        }
    }

    /// Add a kind subjects and items may name. Refused: a name already taken (a
    /// built-in or internal one included), a name that is not a valid id, a
    /// policy outside the global settings' ranges.
    pub fn register<J: Job>(&mut self, job: J) -> Result<&mut Jobs, RegisterError> {
        let name = Job::name(&job);
        crate::core::batch::requests::validate_id("kind", name)
            .map_err(|e| RegisterError(e.public_message()))?;
        if self.find(name).is_some() {
            return Err(RegisterError(format!(
                "job kind {name:?} is already registered"
            )));
        }
        Job::policy(&job)
            .check()
            .map_err(|e| RegisterError(format!("job kind {name:?}: {e}")))?;
        self.public.push(Box::new(job));
        Ok(self)
    }

    /// The builder form of [`Jobs::register`]; panics on a refused kind (a
    /// programming error, found on the first request).
    pub fn with<J: Job>(mut self, job: J) -> Jobs {
        if let Err(e) = self.register(job) {
            panic!("{e}");
        }
        self
    }

    fn find(&self, kind: &str) -> Option<&dyn Kind> {
        self.public
            .iter()
            .chain(&self.internal)
            .map(|k| &**k)
            .find(|k| k.name() == kind)
    }

    /// The public kinds' names, in registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.public.iter().map(|k| k.name()).collect()
    }

    /// Whether a claimed row of `kind` can run here (public or internal).
    pub fn knows(&self, kind: &str) -> bool {
        self.find(kind).is_some()
    }

    /// Whether every item of `kind` has channels (its listing shows `receipts`,
    /// `{}` before any).
    pub fn has_channels(&self, kind: &str) -> bool {
        self.find(kind).is_some_and(|k| k.has_channels())
    }

    /// Whether the drain runs items of `kind` itself in fanout mode
    /// ([`Job::runs_in_drain`]).
    pub fn runs_in_drain(&self, kind: &str) -> bool {
        self.find(kind).is_some_and(|k| k.runs_in_drain())
    }

    /// `kind`'s own policy (the default for an unknown kind).
    pub fn policy(&self, kind: &str) -> Policy {
        self.find(kind).map(|k| k.policy()).unwrap_or_default()
    }

    /// The attempts of each kind that declares its own (`Policy::max_attempts`):
    /// what the store gives its items when they are enqueued and when a replay
    /// grows their allowance; other kinds get the global `MAX_ATTEMPTS`.
    pub fn max_attempts_by_kind(&self) -> BTreeMap<String, i64> {
        self.public
            .iter()
            .chain(&self.internal)
            .filter_map(|k| Some((k.name().to_string(), k.policy().max_attempts?)))
            .collect()
    }

    /// The backoff of each kind with its own (`Policy::retry` under the global
    /// `RETRY_BASE_MS` and `RETRY_MAX_MS`), for the drain's commit.
    pub fn retry_policies(&self, global: RetryPolicy) -> Vec<(String, RetryPolicy)> {
        self.public
            .iter()
            .chain(&self.internal)
            .filter(|k| {
                let p = k.policy();
                p.retry_base_ms.is_some() || p.retry_max_ms.is_some()
            })
            .map(|k| (k.name().to_string(), k.policy().retry(global)))
            .collect()
    }

    /// The payload check used by request validation: public kinds only.
    pub fn check_payload(
        &self,
        kind: &str,
        payload: &Value,
        policy: &TargetPolicy,
    ) -> Result<(), String> {
        self.check_item(kind, payload, policy).map(|_| ())
    }

    /// [`Jobs::check_payload`], then the limit keys the kind adds for this
    /// payload ([`Job::limit_keys`], not checked yet: `core::limits::merge_keys`
    /// does). The payload is parsed once for both.
    pub fn check_item(
        &self,
        kind: &str,
        payload: &Value,
        policy: &TargetPolicy,
    ) -> Result<Vec<String>, String> {
        match self.public.iter().find(|k| k.name() == kind) {
            Some(job) => job.check(payload, policy),
            None => Err(format!(
                "unknown kind {kind:?}; known kinds: {}",
                self.names().join(", ")
            )),
        }
    }

    /// A stored payload as listings show it: the kind's [`Job::redact`] applied.
    pub fn public_payload(&self, kind: &str, mut payload: Value) -> Value {
        if let Some(job) = self.find(kind) {
            job.redact(&mut payload);
        }
        payload
    }

    /// The largest per-run subrequest cost of any kind (inline budget planning: a
    /// claim cannot know its items' kinds, so each is held at the worst).
    pub fn max_subrequests_per_run(&self) -> i64 {
        self.public
            .iter()
            .chain(&self.internal)
            .map(|k| k.subrequests_per_run())
            .max()
            .unwrap_or(1)
    }

    /// Run `item`'s job under its timeout (the kind's own, at most
    /// `JOB_TIMEOUT_MS`): its outcome and, for kinds with channels, each channel's
    /// result. On time out the signal is aborted, the run dropped, and the
    /// outcome is a retry with no channel results. `host`: see [`Context::host`].
    pub async fn run(
        &self,
        item: &ClaimedItem,
        config: &RunConfig,
        outbound: &dyn Outbound,
        host: Option<&dyn Any>,
    ) -> Ran {
        let Some(job) = self.find(&item.kind) else {
            return Outcome::Fail(format!("unknown job kind {:?}", item.kind)).into();
        };
        run_kind(job, item, config, outbound, host).await
    }
}

/// Run `item` as `job` under its timeout: what [`Jobs::run`] does once it found
/// the kind, and what `testing` runs one kind with.
pub(crate) async fn run_kind(
    job: &dyn Kind,
    item: &ClaimedItem,
    config: &RunConfig,
    outbound: &dyn Outbound,
    host: Option<&dyn Any>,
) -> Ran {
    // One place for every kind: all its requests go through this seam.
    let correlated = config
        .invocation
        .as_deref()
        .map(|id| Correlated::new(outbound, id));
    let outbound: &dyn Outbound = match &correlated {
        Some(c) => c,
        None => outbound,
    };
    let mut ctx = Context::new(item, config, outbound, host);
    ctx.timeout_ms = job.policy().timeout_ms(config.job_timeout_ms);
    let timeout_ms = ctx.timeout_ms;
    let outcome = {
        let mut run = std::pin::pin!(job.run(&ctx));
        // A job that finishes on its first poll cannot be late: it needs no
        // timer, and a timer per child is measurable CPU.
        match futures::FutureExt::now_or_never(run.as_mut()) {
            Some(outcome) => Some(outcome),
            None => match select(run, outbound.sleep(timeout_ms)).await {
                Either::Left((outcome, _)) => Some(outcome),
                Either::Right(_) => {
                    // Before the run is dropped: its fetches see the abort.
                    ctx.signal.abort();
                    None
                }
            },
        }
    };
    // Cut here, for every kind and path (a SELF child, inline, the drain):
    // the outcome waits in the drain's memory until its commit.
    let retried = matches!(outcome, Some(Outcome::Retry(_)));
    match outcome.map(Outcome::bounded) {
        Some(outcome) => Ran {
            refused: ctx.refused.take().filter(|_| retried),
            // Only what was sent: a run that sent nothing reports no channels.
            channels: Some(ctx.take_channels()).filter(|c| !c.is_empty()),
            retry_after_ms: ctx
                .retry_after_ms
                .get()
                .filter(|_| matches!(outcome, Outcome::Retry(_))),
            own_delay: ctx.own_delay.get() && retried,
            paced: ctx.paced.get(),
            // Set only beside `paced` (`note_paced_keys`).
            paced_keys: ctx.paced_keys.take(),
            outcome,
        },
        None => Outcome::Retry(format!("timed out after {timeout_ms} ms")).into(),
    }
}

#[cfg(test)]
mod tests;
