//! Host tests of a job kind, as a Worker crate of one's own writes them (on the
//! host only): [`item`] builds the claimed item with defaults, [`Harness`] runs
//! one kind (or a whole registry) the way the Worker does — under the default
//! `JOB_TIMEOUT_MS` or the kind's own, through [`MemoryOutbound`], which reads an
//! answer's body by the Worker's own rule (`Request::body_read`) on a virtual
//! clock, with the Worker's vars, secrets and KV namespaces in memory — and
//! [`check`] runs a kind's write-time validation.
//!
//! ```ignore
//! let h = testing::Harness::new();
//! h.bind_kv("FEEDS").answer(FEED, Answer::status(503));
//! let ran = h.run(&FeedCheck, testing::item(json!({"feed_url": FEED, "notify_url": NOTIFY})).attempt(2));
//! assert_eq!(ran.outcome, Outcome::Retry("feed: HTTP 503".into()));
//! ```
//!
//! docs/guides/own-kind.md ("Test your kind on the host") has the whole example.

use std::any::Any;

use serde::Serialize;

use crate::core::batch::model::ClaimedItem;
use crate::core::security::target::TargetPolicy;
pub use crate::jobs::memory::{Answer, Ended, MemoryOutbound, Reply, Sent};
use crate::jobs::{run_kind, Job, Jobs, Kind, RunConfig};
pub use crate::jobs::{Outcome, Ran};

/// 2026-01-01T00:00:00Z in ms: where a harness's virtual clock starts unless
/// told ([`Harness::at`]).
pub const START_MS: i64 = 1_767_225_600_000;

/// A claimed item of `payload` (any serialisable value, usually `json!`): item
/// 1 of batch `batch` for subject `subject`, attempt 1 of 5 (the default
/// `MAX_ATTEMPTS`), no receipts, of the kind it is run as unless
/// [`Item::kind`] says otherwise.
pub fn item(payload: impl Serialize) -> Item {
    let payload = serde_json::to_string(&payload).expect("a payload serialises to JSON");
    Item {
        claimed: ClaimedItem::new(1, "batch", "subject", "", &payload, 5, "lease"),
    }
}

/// A claimed item being built ([`item`]); a run takes it as it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    claimed: ClaimedItem,
}

impl Item {
    /// Which attempt this run is (1-based).
    pub fn attempt(mut self, attempt: i64) -> Item {
        self.claimed.attempt = attempt;
        self
    }

    pub fn max_attempts(mut self, max_attempts: i64) -> Item {
        self.claimed.max_attempts = max_attempts;
        self
    }

    pub fn item_id(mut self, item_id: i64) -> Item {
        self.claimed.item_id = item_id;
        self
    }

    pub fn subject(mut self, subject_id: &str) -> Item {
        self.claimed.subject_id = subject_id.into();
        self
    }

    pub fn batch(mut self, batch_id: &str) -> Item {
        self.claimed.batch_id = batch_id.into();
        self
    }

    /// The kind it names (default: the kind it is run as).
    pub fn kind(mut self, kind: &str) -> Item {
        self.claimed.kind = kind.into();
        self
    }

    /// The receipts an earlier run left (`core::receipts`' JSON, e.g.
    /// `json!({"discord": {"status": "delivered", …}})`).
    pub fn receipts(mut self, receipts: impl Serialize) -> Item {
        self.claimed.receipts =
            Some(serde_json::to_string(&receipts).expect("receipts serialise to JSON"));
        self
    }

    /// The payload as stored text, as it is (to test a payload that does not parse).
    pub fn payload_text(mut self, text: &str) -> Item {
        self.claimed.payload = text.into();
        self
    }

    /// The claimed item as the Worker would hand it to a run.
    pub fn claimed(&self) -> &ClaimedItem {
        &self.claimed
    }
}

impl From<Item> for ClaimedItem {
    fn from(item: Item) -> ClaimedItem {
        item.claimed
    }
}

impl From<ClaimedItem> for Item {
    fn from(claimed: ClaimedItem) -> Item {
        Item { claimed }
    }
}

/// A kind's write-time check ([`Job::validate`]) of `payload` as `PUT
/// /subjects` and `POST /batches` run it: parsed as the kind's payload, then
/// validated under a deployment's default target rules (public targets only).
/// `Ok` holds the limit keys the kind gives its item ([`Job::limit_keys`]).
pub fn check<J: Job>(job: &J, payload: impl Serialize) -> Result<Vec<String>, String> {
    let payload = serde_json::to_value(&payload).map_err(|e| e.to_string())?;
    Kind::check(job, &payload, &TargetPolicy::PUBLIC)
}

/// The Worker's side of a run, on the host: the outbound seam in memory
/// ([`MemoryOutbound`]: answers scripted per URL, every request recorded, a
/// virtual clock starting at [`START_MS`]), the run's settings (`config`:
/// the defaults, `JOB_TIMEOUT_MS` 10 s), and what `ctx.host` gives.
pub struct Harness {
    /// The seam: script answers on it, read what was sent from it.
    pub out: MemoryOutbound,
    /// The settings and secrets a run gets (`RunConfig::default()` unless changed).
    pub config: RunConfig,
    host: Option<Box<dyn Any>>,
}

impl Default for Harness {
    fn default() -> Harness {
        Harness::new()
    }
}

impl Harness {
    /// Nothing scripted, default settings, the clock at [`START_MS`].
    pub fn new() -> Harness {
        Harness::at(START_MS)
    }

    /// The same with the clock at `now_ms`.
    pub fn at(now_ms: i64) -> Harness {
        Harness {
            out: MemoryOutbound::new(now_ms),
            config: RunConfig::default(),
            host: None,
        }
    }

    /// Queue `answer` for the next request to `url` (answers to one URL are used
    /// in order; an unscripted URL fails like a network error).
    pub fn answer(&self, url: &str, answer: Answer) -> &Harness {
        self.out.answer(url, answer);
        self
    }

    /// Set the Worker's `[vars]` value `name` (`ctx.var`).
    pub fn var(&self, name: &str, value: &str) -> &Harness {
        self.out.set_var(name, value);
        self
    }

    /// Set the Worker's secret `name` (`ctx.secret`).
    pub fn secret(&self, name: &str, value: &str) -> &Harness {
        self.out.set_secret(name, value);
        self
    }

    /// Bind an empty KV namespace as `name` (`ctx.kv`).
    pub fn bind_kv(&self, name: &str) -> &Harness {
        self.out.bind_kv(name);
        self
    }

    /// Set `key` to `value` in the KV namespace `name` (binding it).
    pub fn kv_put(&self, name: &str, key: &str, value: &str) -> &Harness {
        self.out.kv_put(name, key, value);
        self
    }

    /// The value of `key` in the KV namespace `name`, as the runs left it.
    pub fn kv_value(&self, name: &str, key: &str) -> Option<String> {
        self.out.kv_value(name, key)
    }

    /// What `ctx.host::<T>()` gives the runs (on the Worker: its `worker::Env`).
    pub fn with_host<T: Any>(mut self, host: T) -> Harness {
        self.host = Some(Box::new(host));
        self
    }

    /// Run `item` as `job`, as the Worker runs it: under the kind's timeout, the
    /// outcome cut to 1,000 bytes, on the virtual clock (which moves only while
    /// the run waits on it).
    pub fn run<J: Job>(&self, job: &J, item: impl Into<Item>) -> Ran {
        let mut claimed: ClaimedItem = item.into().into();
        if claimed.kind.is_empty() {
            claimed.kind = Job::name(job).into();
        }
        let host = self.host.as_deref();
        self.out
            .block_on(run_kind(job, &claimed, &self.config, &self.out, host))
    }

    /// Run `item` with a whole registry (`fanout().jobs()`): its `kind` picks the
    /// kind, as on the Worker.
    pub fn run_in(&self, jobs: &Jobs, item: impl Into<Item>) -> Ran {
        let claimed: ClaimedItem = item.into().into();
        let host = self.host.as_deref();
        self.out
            .block_on(jobs.run(&claimed, &self.config, &self.out, host))
    }

    /// Every request sent so far, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.out.sent()
    }

    /// The virtual time now.
    pub fn now_ms(&self) -> i64 {
        self.out.now()
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::jobs::{Context, Policy, Request};

    /// A kind that posts to its payload's URL and waits `wait_ms` first.
    struct Ping;

    #[derive(Deserialize)]
    struct PingPayload {
        url: String,
        #[serde(default)]
        wait_ms: i64,
    }

    impl Job for Ping {
        type Payload = PingPayload;

        fn name(&self) -> &'static str {
            "ping"
        }

        fn validate(&self, p: &PingPayload, targets: &TargetPolicy) -> Result<(), String> {
            crate::core::security::target::validate(&p.url, targets)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }

        async fn run(&self, ctx: &Context<'_>, p: PingPayload) -> Outcome {
            ctx.outbound().sleep(p.wait_ms).await;
            let label = ctx.host::<&str>().copied().unwrap_or("no host");
            match ctx.fetch(Request::post_json(&p.url, "{}".into())).await {
                Ok(r) => Outcome::Retry(format!(
                    "{label}: attempt {} of {}, HTTP {}",
                    ctx.item.attempt, ctx.item.max_attempts, r.status
                )),
                Err(e) => Outcome::Retry(e),
            }
        }
    }

    #[test]
    fn an_item_has_defaults_and_takes_the_kind_it_is_run_as() {
        let built = item(json!({"url": "https://a.test/"}));
        let c = built.claimed();
        assert_eq!((c.item_id, c.attempt, c.max_attempts), (1, 1, 5));
        assert_eq!(c.kind, "");
        assert_eq!(c.payload, r#"{"url":"https://a.test/"}"#);
        let h = Harness::new();
        h.answer("https://a.test/", Answer::status(503));
        let ran = h.run(&Ping, built.attempt(2).max_attempts(3));
        assert_eq!(
            ran.outcome,
            Outcome::Retry("no host: attempt 2 of 3, HTTP 503".into())
        );
        assert_eq!(h.sent().len(), 1);
        assert_eq!(h.sent()[0].at_ms, START_MS);
    }

    #[test]
    fn a_run_gets_the_default_job_timeout_not_zero() {
        assert_eq!(RunConfig::default().job_timeout_ms, 10_000);
        let h = Harness::new();
        h.answer("https://a.test/", Answer::status(200).after(9_000));
        let ran = h.run(
            &Ping,
            item(json!({"url": "https://a.test/", "wait_ms": 500})),
        );
        assert_eq!(
            ran.outcome,
            Outcome::Retry("no host: attempt 1 of 5, HTTP 200".into())
        );
        h.answer("https://a.test/", Answer::hang());
        let ran = h.run(&Ping, item(json!({"url": "https://a.test/"})));
        assert_eq!(
            ran.outcome,
            Outcome::Retry("timed out after 10000 ms".into())
        );
    }

    #[test]
    fn a_kinds_own_shorter_timeout_applies() {
        struct Quick;
        impl Job for Quick {
            type Payload = serde_json::Value;
            fn name(&self) -> &'static str {
                "quick"
            }
            async fn run(&self, ctx: &Context<'_>, _: serde_json::Value) -> Outcome {
                ctx.outbound().sleep(60_000).await;
                Outcome::Done
            }
            fn policy(&self) -> Policy {
                Policy {
                    timeout_ms: Some(250),
                    ..Policy::default()
                }
            }
        }
        let h = Harness::new();
        assert_eq!(
            h.run(&Quick, item(json!({}))).outcome,
            Outcome::Retry("timed out after 250 ms".into())
        );
        assert_eq!(h.now_ms(), START_MS + 250);
    }

    #[test]
    fn ctx_fetch_sends_nothing_to_a_target_the_deployment_refuses() {
        let mut h = Harness::new();
        let private = || item(json!({"url": "http://10.0.0.1/hook"}));
        let ran = h.run(&Ping, private());
        assert!(
            matches!(&ran.outcome, Outcome::Retry(why) if why.starts_with("not sent: url host 10.0.0.1 is ")),
            "{:?}",
            ran.outcome
        );
        assert!(h.sent().is_empty());
        h.config.own_hostnames = vec!["fanout.example.com".into()];
        let own = h.run(&Ping, item(json!({"url": "https://fanout.example.com/x"})));
        assert!(
            matches!(&own.outcome, Outcome::Retry(why) if why.starts_with("not sent: url host fanout.example.com is one of this Worker's own hostnames")),
            "{:?}",
            own.outcome
        );
        assert!(h.sent().is_empty());
        // ALLOW_PRIVATE_TARGETS=true: sent (and unscripted here).
        h.config.allow_private_targets = true;
        assert_eq!(
            h.run(&Ping, private()).outcome,
            Outcome::Retry("no answer scripted for http://10.0.0.1/hook".into())
        );
        assert_eq!(h.sent().len(), 1);
    }

    #[test]
    fn the_host_value_reaches_the_run() {
        let h = Harness::new().with_host("on the host");
        h.answer("https://a.test/", Answer::status(204));
        assert_eq!(
            h.run(&Ping, item(json!({"url": "https://a.test/"})))
                .outcome,
            Outcome::Retry("on the host: attempt 1 of 5, HTTP 204".into())
        );
    }

    #[test]
    fn a_payload_that_does_not_parse_fails_the_run_and_the_check() {
        let h = Harness::new();
        assert_eq!(
            h.run(&Ping, item(json!({})).payload_text("{")).outcome,
            Outcome::Fail(
                "not run: ping payload: EOF while parsing an object at line 1 column 1".into()
            )
        );
        assert!(check(&Ping, json!({"url": "https://a.test/"})).is_ok());
        assert!(check(&Ping, json!({"url": "http://10.0.0.1/"})).is_err());
        assert_eq!(
            check(&Ping, json!({})).unwrap_err(),
            "ping payload: missing field `url`"
        );
    }

    /// Counts its runs per subject in KV `COUNTS`, says hello with var
    /// `GREETING` and needs secret `TOKEN`.
    struct Count;

    impl Job for Count {
        type Payload = serde_json::Value;

        fn name(&self) -> &'static str {
            "count"
        }

        async fn run(&self, ctx: &Context<'_>, _: serde_json::Value) -> Outcome {
            let Some(token) = ctx.secret("TOKEN") else {
                return Outcome::Fail("TOKEN is not set".into());
            };
            let greeting = ctx.var("GREETING").unwrap_or_else(|| "hi".into());
            let kv = match ctx.kv("COUNTS") {
                Ok(kv) => kv,
                Err(e) => return Outcome::Fail(e),
            };
            let key = &ctx.item.subject_id;
            let n = match kv.get(key).await {
                Ok(v) => v.and_then(|v| v.parse::<i64>().ok()).unwrap_or(0) + 1,
                Err(e) => return Outcome::Retry(e),
            };
            if let Err(e) = kv.put(key, &n.to_string()).await {
                return Outcome::Retry(e);
            }
            Outcome::Retry(format!(
                "{greeting} {key} #{n} ({} bytes of token)",
                token.len()
            ))
        }
    }

    #[test]
    fn a_kind_reads_vars_secrets_and_kv_the_harness_set() {
        let h = Harness::new();
        let ada = || item(json!({})).subject("ada");
        assert_eq!(
            h.run(&Count, ada()).outcome,
            Outcome::Fail("TOKEN is not set".into())
        );
        h.secret("TOKEN", "s3cret");
        assert_eq!(
            h.run(&Count, ada()).outcome,
            Outcome::Fail("no KV namespace is bound as \"COUNTS\"".into())
        );
        h.var("GREETING", "hello").kv_put("COUNTS", "ada", "41");
        assert_eq!(
            h.run(&Count, ada()).outcome,
            Outcome::Retry("hello ada #42 (6 bytes of token)".into())
        );
        assert_eq!(h.kv_value("COUNTS", "ada").as_deref(), Some("42"));
        h.bind_kv("COUNTS");
        h.run(&Count, item(json!({})).subject("bob"));
        assert_eq!(h.kv_value("COUNTS", "bob").as_deref(), Some("1"));
        assert_eq!(h.kv_value("COUNTS", "ada").as_deref(), Some("42"));
    }

    #[test]
    fn bindings_reach_a_run_whose_requests_name_their_invocation() {
        let mut h = Harness::new();
        h.config.invocation = Some("inv-1".into());
        h.secret("TOKEN", "t").bind_kv("COUNTS");
        assert_eq!(
            h.run(&Count, item(json!({}))).outcome,
            Outcome::Retry("hi subject #1 (1 bytes of token)".into())
        );
    }

    #[test]
    fn a_registry_runs_the_kind_the_item_names() {
        let jobs = Jobs::builtin().with(Ping);
        let h = Harness::new();
        h.answer("https://a.test/", Answer::status(500));
        let ping = item(json!({"url": "https://a.test/"})).kind("ping");
        assert_eq!(
            h.run_in(&jobs, ping).outcome,
            Outcome::Retry("no host: attempt 1 of 5, HTTP 500".into())
        );
        assert_eq!(
            h.run_in(&jobs, item(json!({})).kind("noop")).outcome,
            Outcome::Done
        );
    }
}
