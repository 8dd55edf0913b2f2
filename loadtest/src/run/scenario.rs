//! What each `loadtest run` scenario seeds, and the Worker settings it runs with.

use crate::driver::drive::Pace;
use crate::driver::plan::{self, Planned};
use crate::runtime::wrangler::min_lease_seconds;
use crate::sink::faults::Faults;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Every webhook answers 200 at once (or `--job noop`: no sink at all).
    Happy,
    /// Every webhook sleeps `--latency-ms` first.
    Latency,
    /// Each delivery fails with 500 with probability `--error-rate`.
    Flaky,
    /// `--poison-share` of the subjects always answer 500: failed after MAX_ATTEMPTS.
    Poison,
    /// The runtime is SIGKILLed mid-batch and restarted; leases are reaped.
    Crash,
    /// The batch's occurrence fires again after it finished (its one-off schedule
    /// saved again, ticks and the old daily expression fired): nothing new.
    Refire,
    /// Slow webhooks (`--latency-ms`); the batch is cancelled once 30 % of it
    /// completed: it ends cancelled, only items in flight are delivered after.
    Cancel,
    /// `--poison-share` of the subjects answer 500 until they fail; their receivers
    /// are then fixed and the failures replayed: each is delivered once more.
    Replay,
    /// Multi-channel items (email, push, sms); push answers 500 with probability
    /// `--error-rate` per delivery. Each channel is sent until delivered, never
    /// after; the batch's completion callback is refused once, then received.
    Multi,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Happy => "happy",
            Scenario::Latency => "latency",
            Scenario::Flaky => "flaky",
            Scenario::Poison => "poison",
            Scenario::Crash => "crash",
            Scenario::Refire => "refire",
            Scenario::Cancel => "cancel",
            Scenario::Replay => "replay",
            Scenario::Multi => "multi",
        }
    }
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Job {
    /// Signed webhook to the in-process sink.
    Webhook,
    /// The `noop` kind: succeeds at once without any I/O.
    Noop,
}

/// What a scenario of its own (`cancel`, `replay`, `multi`) starts from: the
/// spec, the subjects seeded (`plan`), the invocations that ran before
/// (`known`), and how ticks are fired.
#[derive(Clone, Copy)]
pub struct Seeded<'a> {
    pub spec: &'a Spec,
    pub plan: &'a [Planned],
    pub known: &'a HashSet<i64>,
    pub pace: Pace,
}

/// One run's workload.
#[derive(Debug, Clone, Serialize)]
pub struct Spec {
    pub scenario: Scenario,
    pub items: usize,
    pub job: Job,
    pub latency_ms: u64,
    pub error_rate: f64,
    pub poison_share: f64,
    /// Every item holds the limit key [`RUN_KEY`], limited to this many in
    /// flight (`None`: items hold no key).
    pub key_concurrency: Option<u32>,
}

/// The limit key of a run with `key_concurrency`.
pub const RUN_KEY: &str = "run";

/// The Worker's own default of a setting: the load test measures what users get.
fn worker_default(name: &str) -> &'static str {
    cron_fanout::core::settings::DEFAULTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("{name} has no default"))
}

impl Spec {
    /// The job kind of the run's items, as reports name it: `multi` for the multi
    /// scenario (its items are multi-channel whatever `--job` says), else `--job`'s.
    pub fn kind(&self) -> &'static str {
        match (self.scenario, self.job) {
            (Scenario::Multi, _) => "multi",
            (_, Job::Webhook) => "webhook",
            (_, Job::Noop) => "noop",
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.items == 0 {
            return Err("-n must be at least 1".into());
        }
        if self.job == Job::Noop && !matches!(self.scenario, Scenario::Happy | Scenario::Refire) {
            return Err(format!(
                "--job noop has no webhook to slow down, fail or kill mid-flight: use it with happy or refire, not {}",
                self.scenario.name()
            ));
        }
        if !(0.0..=1.0).contains(&self.error_rate) || !(0.0..=1.0).contains(&self.poison_share) {
            return Err("--error-rate and --poison-share must be within 0..1".into());
        }
        Ok(())
    }

    /// The Worker settings: one invocation may drain the whole batch (large
    /// subrequest budget, two-minute deadline, which stays under the API
    /// client's three-minute wait for a scheduled run), retries back off in
    /// tenths of a second, and the crash scenario gets short leases so the
    /// reaper recovers within seconds. `overrides` (`--var`) win; LEASE_SECONDS
    /// follows an overridden JOB_TIMEOUT_MS unless it is overridden too.
    pub fn settings(&self, overrides: &[(String, String)]) -> BTreeMap<String, String> {
        let floor = if self.scenario == Scenario::Crash {
            1_000
        } else {
            10_000
        };
        let job_timeout = floor.max(4 * self.latency_ms);
        let mut s: BTreeMap<String, String> = [
            ("MAX_ATTEMPTS", "3"),
            ("RETRY_BASE_MS", "100"),
            ("RETRY_MAX_MS", "400"),
            ("CLAIM_CHUNK", worker_default("CLAIM_CHUNK")),
            (
                "DISPATCH_CONCURRENCY",
                worker_default("DISPATCH_CONCURRENCY"),
            ),
            ("SUBREQUEST_BUDGET", "100000"),
            // Throughput runs drain thousands of items per invocation: wrangler dev
            // enforces no cap on a request's service-binding calls, and the
            // Worker's own (31 by default) would measure the cap, not the drain.
            ("MAX_CHILD_INVOCATIONS", "1000000"),
            ("INVOCATION_DEADLINE_MS", "120000"),
            ("DISPATCH_MODE", "fanout"),
            // The sink listens on 127.0.0.1, a private target the Worker refuses
            // by default.
            ("ALLOW_PRIVATE_TARGETS", "true"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        s.insert("JOB_TIMEOUT_MS".into(), job_timeout.to_string());
        s.extend(overrides.iter().cloned());
        if !overrides.iter().any(|(k, _)| k == "LEASE_SECONDS") {
            let get = |k: &str, default: u64| s[k].parse().unwrap_or(default);
            let lease = min_lease_seconds(
                get("JOB_TIMEOUT_MS", job_timeout),
                get("CLAIM_CHUNK", 100),
                get("DISPATCH_CONCURRENCY", 25),
            );
            s.insert("LEASE_SECONDS".into(), lease.to_string());
        }
        s
    }

    /// The subjects, `<scenario>-000000`…, with the faults of the scenario.
    pub fn plan(&self) -> Vec<Planned> {
        let slow = Faults {
            latency_ms: self.latency_ms,
            ..Faults::default()
        };
        let (faults, odd) = match self.scenario {
            // Multi's channels carry their faults (`delivery::scenario_channels`).
            Scenario::Happy | Scenario::Refire | Scenario::Multi => (Faults::default(), None),
            Scenario::Latency | Scenario::Crash | Scenario::Cancel => (slow, None),
            Scenario::Flaky => (
                Faults {
                    error_rate: self.error_rate,
                    ..Faults::default()
                },
                None,
            ),
            Scenario::Poison | Scenario::Replay => (
                Faults::default(),
                Some((
                    self.poison_share,
                    Faults {
                        status: Some(500),
                        ..Faults::default()
                    },
                )),
            ),
        };
        plan::uniform(self.scenario.name(), self.items, faults, odd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(scenario: Scenario) -> Spec {
        Spec {
            scenario,
            items: 100,
            job: Job::Webhook,
            latency_ms: 200,
            error_rate: 0.2,
            poison_share: 0.1,
            key_concurrency: None,
        }
    }

    #[test]
    fn settings_follow_scenario_and_overrides() {
        let crash = spec(Scenario::Crash).settings(&[]);
        assert_eq!(crash["JOB_TIMEOUT_MS"], "1000");
        // Chunk 100 behind 25 slots: 5 calls of 1 s + 2 s grace, 2 s commit, 1 s slack.
        assert_eq!(crash["CLAIM_CHUNK"], "100");
        assert_eq!(crash["LEASE_SECONDS"], "18");
        let mut slow = spec(Scenario::Latency);
        slow.latency_ms = 5_000;
        assert_eq!(slow.settings(&[])["JOB_TIMEOUT_MS"], "20000");
        let o = |k: &str, v: &str| (k.to_string(), v.to_string());
        let s = spec(Scenario::Happy)
            .settings(&[o("JOB_TIMEOUT_MS", "3000"), o("DISPATCH_MODE", "inline")]);
        assert_eq!(
            (s["LEASE_SECONDS"].as_str(), s["DISPATCH_MODE"].as_str()),
            ("28", "inline")
        );
        let s = spec(Scenario::Happy).settings(&[o("LEASE_SECONDS", "300")]);
        assert_eq!(s["LEASE_SECONDS"], "300");
        // One invocation may dispatch every item: the runs measure the drain.
        assert_eq!(s["MAX_CHILD_INVOCATIONS"], "1000000");
    }

    #[test]
    fn plans_carry_the_scenario_faults() {
        let poison = spec(Scenario::Poison).plan();
        assert_eq!(
            poison
                .iter()
                .filter(|p| p.faults.status == Some(500))
                .count(),
            10
        );
        assert!(spec(Scenario::Flaky)
            .plan()
            .iter()
            .all(|p| p.faults.error_rate == 0.2));
        assert!(spec(Scenario::Crash)
            .plan()
            .iter()
            .all(|p| p.faults.latency_ms == 200));
        assert_eq!(spec(Scenario::Refire).plan()[0].id, "refire-000000");
    }

    #[test]
    fn validation() {
        assert!(spec(Scenario::Happy).validate().is_ok());
        let mut s = spec(Scenario::Crash);
        s.job = Job::Noop;
        assert!(s.validate().is_err());
        let mut s = spec(Scenario::Flaky);
        s.error_rate = 2.0;
        assert!(s.validate().is_err());
        s.error_rate = 0.5;
        s.items = 0;
        assert!(s.validate().is_err());
    }
}
