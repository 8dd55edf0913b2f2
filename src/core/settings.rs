//! Settings from `[vars]`, parsed and validated in one place. Invalid settings fail
//! loudly with a message naming the variable, never fall back silently.

use crate::core::drain::budget::MIN_SUBREQUEST_BUDGET;
use crate::core::drain::retry::RetryPolicy;
use crate::core::drain::timing::{
    call_rounds, min_deadline_ms, min_lease_ms, DISPATCH_GRACE_MS, WIND_DOWN_MS,
};

/// How the drain runs a claimed item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchMode {
    /// One `SELF` call per item: each item gets its own invocation and limits.
    Fanout,
    /// Run the job inside the draining invocation (for fast, I/O-light items).
    Inline,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Attempts per item, counted at claim (the first run is attempt 1).
    pub max_attempts: i64,
    /// How long a claim owns an item before the reaper may requeue it.
    pub lease_ms: i64,
    /// Time a job may take before it counts as a transient failure.
    pub job_timeout_ms: i64,
    /// Backoff after a transient failure.
    pub retry: RetryPolicy,
    /// Most items one claim statement takes; also the group-commit size.
    pub claim_chunk: i64,
    /// Calls kept in flight by one draining invocation.
    pub dispatch_concurrency: i64,
    /// Subrequests (D1 calls, SELF calls, fetches) one invocation may make.
    pub subrequest_budget: i64,
    /// Wall time after which an invocation stops claiming and winds down.
    pub invocation_deadline_ms: i64,
    /// Most SELF dispatches one invocation makes: the platform refuses a request's
    /// service-binding calls past 32 invocations, the tick itself included.
    pub max_child_invocations: i64,
    /// Who drains: the tick itself, a fixed number of `DRAIN_QUEUE` consumers
    /// per tick, or as many as the due work needs (`auto`).
    pub drainers: Drainers,
    /// `MAX_DRAINERS`: with `DRAINERS = "auto"`, most drainers live at once
    /// (the tick's and their continuations, counted by leased slots in D1).
    pub max_drainers: i64,
    pub dispatch_mode: DispatchMode,
    /// Webhooks may target private addresses and local names (local development
    /// only: `core::target`).
    pub allow_private_targets: bool,
    /// `OWN_HOSTNAMES`: the names the Worker answers at, lowercase without a
    /// trailing dot; no webhook or callback may target them (`core::target`).
    pub own_hostnames: Vec<String>,
    /// `SERVICE_BINDINGS`: the service bindings a `service` item may name
    /// (`jobs::service`); empty for none.
    pub service_bindings: Vec<String>,
    /// Added to the queue's clock (`edge::clock::now_ms`), so tests can run
    /// ticks "at" chosen times. 0 unless `ALLOW_TEST_CLOCK` is true: a test-only
    /// setting that no deployment may set (docs/reference/settings.md).
    pub test_clock_offset_ms: i64,
    /// Days an ended batch (its items) and an invocation summary are kept; 0 keeps
    /// them forever (`core::upkeep`).
    pub retention_days: i64,
    /// `LEARN_LIMITS`: a commit that carries a receiver's refusal stores a learned
    /// rate for the keys of the refused item (`core::learn`); `false` stores none.
    pub learn_limits: bool,
    /// `REFUSAL_GIVE_UP_SECONDS` in ms: an item its receivers refused
    /// continuously for longer fails (`core::retry::refused`); refusals spend no
    /// attempt, so this is what ends a receiver that never lets one through.
    pub refusal_give_up_ms: i64,
}

/// Most drainers a tick starts: the platform runs at most 250 concurrent
/// invocations of one queue's consumer (Queues limits).
pub const MOST_DRAINERS: i64 = 250;

/// `DRAINERS`: who drains the due items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drainers {
    /// `1` is the tick itself; more, the tick sends that many messages to
    /// `DRAIN_QUEUE` and each consumer invocation drains (`edge::queue`).
    Fixed(i64),
    /// `auto`: the tick counts the due work and sends as many messages as it
    /// needs (none when nothing is due), and a drainer that stops while work is
    /// due sends one continuation; at most `MAX_DRAINERS` live at once.
    Auto,
}

impl Drainers {
    /// Whether drains run as `DRAIN_QUEUE` consumers (the binding is needed).
    pub fn use_queue(self) -> bool {
        !matches!(self, Drainers::Fixed(1))
    }

    /// The setting's value, as the error that names it shows it.
    pub fn value(self) -> String {
        match self {
            Drainers::Fixed(n) => n.to_string(),
            Drainers::Auto => "auto".into(),
        }
    }
}

/// The farthest a test clock may be moved either way: ten years.
pub const MAX_TEST_CLOCK_OFFSET_MS: i64 = 10 * 366 * 86_400_000;

/// Defaults, documented in docs/reference/settings.md. SUBREQUEST_BUDGET 45 stays under the
/// Free plan's 50 subrequests per invocation.
pub const DEFAULTS: &[(&str, &str)] = &[
    ("MAX_ATTEMPTS", "5"),
    ("LEASE_SECONDS", "120"),
    ("JOB_TIMEOUT_MS", "10000"),
    ("RETRY_BASE_MS", "60000"),
    ("RETRY_MAX_MS", "1800000"),
    ("CLAIM_CHUNK", "100"),
    ("DISPATCH_CONCURRENCY", "25"),
    ("SUBREQUEST_BUDGET", "45"),
    ("INVOCATION_DEADLINE_MS", "50000"),
    ("MAX_CHILD_INVOCATIONS", "31"),
    ("DRAINERS", "1"),
    ("MAX_DRAINERS", "50"),
    ("DISPATCH_MODE", "fanout"),
    ("ALLOW_PRIVATE_TARGETS", "false"),
    ("OWN_HOSTNAMES", ""),
    ("SERVICE_BINDINGS", ""),
    ("TEST_CLOCK_OFFSET_MS", "0"),
    ("ALLOW_TEST_CLOCK", "false"),
    ("RETENTION_DAYS", "30"),
    ("LEARN_LIMITS", "true"),
    ("REFUSAL_GIVE_UP_SECONDS", "86400"),
];

/// Most names `OWN_HOSTNAMES` may list (every target check walks them).
pub const MAX_OWN_HOSTNAMES: usize = 32;

/// `OWN_HOSTNAMES`: comma-separated host names (`fanout.example.com`,
/// `cron-fanout.acct.workers.dev`), no scheme, port or path; empty for none. Each
/// is normalised as the URL parser normalises a target's host, so the two compare.
fn parse_hostnames(raw: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || {
            format!("OWN_HOSTNAMES must list host names separated by commas (no scheme, port or path), got {entry:?}")
        };
        if entry
            .contains(|c: char| matches!(c, '/' | ':' | '@' | '?' | '#' | '*') || c.is_whitespace())
        {
            return Err(bad());
        }
        let url = url::Url::parse(&format!("http://{entry}/")).map_err(|_| bad())?;
        let host = url.host_str().ok_or_else(bad)?;
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        if !names.contains(&host) {
            names.push(host);
        }
    }
    if names.len() > MAX_OWN_HOSTNAMES {
        return Err(format!(
            "OWN_HOSTNAMES may list at most {MAX_OWN_HOSTNAMES} names, got {}",
            names.len()
        ));
    }
    Ok(names)
}

/// Most names `SERVICE_BINDINGS` may list.
pub const MAX_SERVICE_BINDINGS: usize = 32;

/// `SERVICE_BINDINGS`: comma-separated binding names as `wrangler.toml` declares
/// them (`[[services]] binding = "..."`: a JavaScript identifier, letters, digits
/// and `_`, not starting with a digit); empty for none. `SELF` is the Worker itself
/// and never listed: an item must not dispatch into the orchestrator.
fn parse_service_bindings(raw: &str) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if !is_binding_name(entry) {
            return Err(format!("SERVICE_BINDINGS must list binding names (letters, digits and _, not starting with a digit) separated by commas, got {entry:?}"));
        }
        if entry == "SELF" {
            return Err("SERVICE_BINDINGS must not list SELF, the Worker's own binding".into());
        }
        if !names.iter().any(|n| n == entry) {
            names.push(entry.to_string());
        }
    }
    if names.len() > MAX_SERVICE_BINDINGS {
        return Err(format!(
            "SERVICE_BINDINGS may list at most {MAX_SERVICE_BINDINGS} names, got {}",
            names.len()
        ));
    }
    Ok(names)
}

/// A binding name as `wrangler.toml` accepts one (a JavaScript identifier, ASCII).
pub fn is_binding_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

impl Settings {
    /// Parse from a variable lookup (the Worker's env, or a map in tests). Missing
    /// variables take their default; present but invalid ones are an error.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let get = |name: &str| -> String {
            lookup(name).unwrap_or_else(|| {
                DEFAULTS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_default()
            })
        };
        let int = |name: &str, min: i64, max: i64| -> Result<i64, String> {
            let raw = get(name);
            let value: i64 = raw
                .trim()
                .parse()
                .map_err(|_| format!("{name} must be an integer, got {raw:?}"))?;
            if value < min || value > max {
                return Err(format!(
                    "{name} must be between {min} and {max}, got {value}"
                ));
            }
            Ok(value)
        };
        let dispatch_mode = match get("DISPATCH_MODE").trim() {
            "fanout" => DispatchMode::Fanout,
            "inline" => DispatchMode::Inline,
            other => {
                return Err(format!(
                    "DISPATCH_MODE must be \"fanout\" or \"inline\", got {other:?}"
                ))
            }
        };
        let allow_private_targets = match get("ALLOW_PRIVATE_TARGETS").trim() {
            "true" => true,
            "false" => false,
            other => {
                return Err(format!(
                    "ALLOW_PRIVATE_TARGETS must be \"true\" or \"false\", got {other:?}"
                ))
            }
        };
        let learn_limits = match get("LEARN_LIMITS").trim() {
            "true" => true,
            "false" => false,
            other => {
                return Err(format!(
                    "LEARN_LIMITS must be \"true\" or \"false\", got {other:?}"
                ))
            }
        };
        let own_hostnames = parse_hostnames(&get("OWN_HOSTNAMES"))?;
        let service_bindings = parse_service_bindings(&get("SERVICE_BINDINGS"))?;
        let allow_test_clock = match get("ALLOW_TEST_CLOCK").trim() {
            "true" => true,
            "false" => false,
            other => {
                return Err(format!(
                    "ALLOW_TEST_CLOCK must be \"true\" or \"false\", got {other:?}"
                ))
            }
        };
        let test_clock_offset_ms = int(
            "TEST_CLOCK_OFFSET_MS",
            -MAX_TEST_CLOCK_OFFSET_MS,
            MAX_TEST_CLOCK_OFFSET_MS,
        )?;
        if test_clock_offset_ms != 0 && !allow_test_clock {
            // A shifted clock fires schedules and expires leases at the wrong time:
            // only a test runtime that asks for it explicitly gets one.
            return Err(format!(
                "TEST_CLOCK_OFFSET_MS ({test_clock_offset_ms}) is a test-only setting, refused unless ALLOW_TEST_CLOCK is \"true\" (local test runtimes only; never set either in a deployment)"
            ));
        }
        let settings = Settings {
            max_attempts: int("MAX_ATTEMPTS", 1, 100)?,
            lease_ms: int("LEASE_SECONDS", 1, 86_400)? * 1_000,
            job_timeout_ms: int("JOB_TIMEOUT_MS", 1, 900_000)?,
            retry: RetryPolicy {
                base_ms: int("RETRY_BASE_MS", 0, 86_400_000)?,
                max_ms: int("RETRY_MAX_MS", 0, 7 * 86_400_000)?,
            },
            claim_chunk: int("CLAIM_CHUNK", 1, 1_000)?,
            dispatch_concurrency: int("DISPATCH_CONCURRENCY", 1, 1_000)?,
            subrequest_budget: int("SUBREQUEST_BUDGET", MIN_SUBREQUEST_BUDGET, 1_000_000)?,
            invocation_deadline_ms: int("INVOCATION_DEADLINE_MS", 1_000, 900_000)?,
            max_child_invocations: int("MAX_CHILD_INVOCATIONS", 1, 1_000_000)?,
            drainers: match get("DRAINERS").trim() {
                "auto" => Drainers::Auto,
                _ => Drainers::Fixed(
                    int("DRAINERS", 1, MOST_DRAINERS).map_err(|e| format!("{e} (or \"auto\")"))?,
                ),
            },
            max_drainers: int("MAX_DRAINERS", 1, MOST_DRAINERS)?,
            dispatch_mode,
            allow_private_targets,
            own_hostnames,
            service_bindings,
            test_clock_offset_ms,
            retention_days: int("RETENTION_DAYS", 0, 36_500)?,
            learn_limits,
            refusal_give_up_ms: int("REFUSAL_GIVE_UP_SECONDS", 1, 365 * 86_400)? * 1_000,
        };
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), String> {
        // A lease that can expire while its job may still legitimately run would let
        // the reaper hand the item to a second runner. A claimed item may wait for a
        // slot, run, and wait for its group commit (timing::call_rounds).
        let min_lease = min_lease_ms(
            self.job_timeout_ms,
            self.claim_chunk,
            self.dispatch_concurrency,
        );
        if self.lease_ms < min_lease {
            return Err(format!(
                "LEASE_SECONDS ({}s) must cover {} calls of JOB_TIMEOUT_MS ({} ms) + {} ms dispatch grace (CLAIM_CHUNK {} queued behind DISPATCH_CONCURRENCY {}), plus {} ms to commit: at least {} ms",
                self.lease_ms / 1_000,
                call_rounds(self.claim_chunk, self.dispatch_concurrency),
                self.job_timeout_ms,
                DISPATCH_GRACE_MS,
                self.claim_chunk,
                self.dispatch_concurrency,
                WIND_DOWN_MS,
                min_lease
            ));
        }
        if self.retry.max_ms < self.retry.base_ms {
            return Err(format!(
                "RETRY_MAX_MS ({}) must be at least RETRY_BASE_MS ({})",
                self.retry.max_ms, self.retry.base_ms
            ));
        }
        // The deadline must leave room for one claim: items that start at once need
        // one call time; later claims shrink as it nears (budget::next_claim).
        let min_deadline = min_deadline_ms(self.job_timeout_ms);
        if self.invocation_deadline_ms < min_deadline {
            return Err(format!(
                "INVOCATION_DEADLINE_MS ({}) must leave time for one call of JOB_TIMEOUT_MS ({} ms) + {} ms dispatch grace, plus {} ms to commit: at least {} ms",
                self.invocation_deadline_ms,
                self.job_timeout_ms,
                DISPATCH_GRACE_MS,
                WIND_DOWN_MS,
                min_deadline
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.max_attempts, 5);
        assert_eq!(s.lease_ms, 120_000);
        assert_eq!(s.job_timeout_ms, 10_000);
        assert_eq!(
            s.retry,
            RetryPolicy {
                base_ms: 60_000,
                max_ms: 1_800_000
            }
        );
        assert_eq!((s.claim_chunk, s.dispatch_concurrency), (100, 25));
        assert_eq!(s.subrequest_budget, 45);
        assert_eq!(s.invocation_deadline_ms, 50_000);
        assert_eq!(s.max_child_invocations, 31);
        assert_eq!(
            s.drainers,
            Drainers::Fixed(1),
            "the tick drains itself by default"
        );
        assert!(!s.drainers.use_queue());
        assert_eq!(
            parse(&[("DRAINERS", "4")]).unwrap().drainers,
            Drainers::Fixed(4)
        );
        let auto = parse(&[("DRAINERS", " auto ")]).unwrap();
        assert_eq!((auto.drainers, auto.max_drainers), (Drainers::Auto, 50));
        assert!(auto.drainers.use_queue() && Drainers::Fixed(2).use_queue());
        for bad in ["0", "251", "many", "Auto"] {
            let err = parse(&[("DRAINERS", bad)]).unwrap_err();
            assert!(err.starts_with("DRAINERS"), "{err}");
            assert!(err.ends_with("(or \"auto\")"), "{err}");
        }
        assert_eq!(parse(&[("MAX_DRAINERS", "250")]).unwrap().max_drainers, 250);
        for bad in ["0", "251", "auto"] {
            let err = parse(&[("MAX_DRAINERS", bad)]).unwrap_err();
            assert!(err.starts_with("MAX_DRAINERS"), "{err}");
        }
        assert!(parse(&[("MAX_CHILD_INVOCATIONS", "0")]).is_err());
        assert_eq!(s.dispatch_mode, DispatchMode::Fanout);
        assert_eq!(s.test_clock_offset_ms, 0, "the real clock by default");
        assert!(
            !s.allow_private_targets,
            "private targets are refused by default"
        );
        assert_eq!(s.retention_days, 30);
        assert_eq!(parse(&[("RETENTION_DAYS", "0")]).unwrap().retention_days, 0);
        assert!(parse(&[("RETENTION_DAYS", "-1")]).is_err());
    }

    #[test]
    fn the_test_clock_needs_the_explicit_flag() {
        let err = parse(&[("TEST_CLOCK_OFFSET_MS", "3600000")]).unwrap_err();
        assert!(err.starts_with("TEST_CLOCK_OFFSET_MS"), "{err}");
        assert!(err.contains("ALLOW_TEST_CLOCK"), "{err}");
        let err = parse(&[
            ("TEST_CLOCK_OFFSET_MS", "3600000"),
            ("ALLOW_TEST_CLOCK", "false"),
        ])
        .unwrap_err();
        assert!(err.starts_with("TEST_CLOCK_OFFSET_MS"), "{err}");
        let s = parse(&[
            ("TEST_CLOCK_OFFSET_MS", "-3600000"),
            ("ALLOW_TEST_CLOCK", "true"),
        ])
        .unwrap();
        assert_eq!(s.test_clock_offset_ms, -3_600_000);
        // The flag alone changes nothing; other spellings are refused.
        assert_eq!(
            parse(&[("ALLOW_TEST_CLOCK", "true")])
                .unwrap()
                .test_clock_offset_ms,
            0
        );
        for bad in ["1", "yes", "TRUE", ""] {
            let err = parse(&[("ALLOW_TEST_CLOCK", bad)]).unwrap_err();
            assert!(err.starts_with("ALLOW_TEST_CLOCK"), "{err}");
        }
        let too_far = (MAX_TEST_CLOCK_OFFSET_MS + 1).to_string();
        let err = parse(&[
            ("TEST_CLOCK_OFFSET_MS", too_far.as_str()),
            ("ALLOW_TEST_CLOCK", "true"),
        ])
        .unwrap_err();
        assert!(
            err.starts_with("TEST_CLOCK_OFFSET_MS must be between"),
            "{err}"
        );
    }

    #[test]
    fn the_deployed_configuration_never_sets_the_test_clock() {
        // wrangler.toml is what a deployment uses; test runtimes pass these two
        // with `wrangler dev --var` instead.
        let tomls = [
            ("wrangler.toml", include_str!("../../wrangler.toml")),
            (
                "wrangler.drainers.toml",
                include_str!("../../wrangler.drainers.toml"),
            ),
        ];
        for (file, toml) in tomls {
            for name in ["TEST_CLOCK_OFFSET_MS", "ALLOW_TEST_CLOCK"] {
                assert!(
                    !toml.lines().any(|l| l.trim_start().starts_with(name)),
                    "{file} sets {name}"
                );
            }
        }
    }

    #[test]
    fn the_drainers_configuration_is_the_default_one_plus_the_queue() {
        // The default deploys without a queue (DRAINERS 1); the drainers one is
        // the same Worker with DRAIN_QUEUE produced and consumed by itself.
        let base = include_str!("../../wrangler.toml");
        let drainers = include_str!("../../wrangler.drainers.toml");
        let lines: Vec<&str> = drainers.lines().collect();
        for line in base.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                lines.contains(&line),
                "wrangler.drainers.toml lacks {line:?}"
            );
        }
        assert!(!base.contains("DRAIN_QUEUE") && !base.contains("DRAINERS"));
        let queue = |section: &str| {
            let at = drainers
                .find(section)
                .unwrap_or_else(|| panic!("{section}"));
            drainers[at..]
                .lines()
                .take(6)
                .collect::<Vec<_>>()
                .join("\n")
        };
        let producer = queue("[[queues.producers]]");
        assert!(producer.contains("binding = \"DRAIN_QUEUE\""), "{producer}");
        assert!(
            producer.contains("queue = \"cron-fanout-drain\""),
            "{producer}"
        );
        let consumer = queue("[[queues.consumers]]");
        assert!(
            consumer.contains("queue = \"cron-fanout-drain\""),
            "{consumer}"
        );
        assert!(consumer.contains("max_batch_size = 1"), "{consumer}");
        let value = drainers
            .lines()
            .find_map(|l| l.strip_prefix("DRAINERS = "))
            .expect("DRAINERS is set");
        let drainers = parse(&[("DRAINERS", value.trim_matches('"'))])
            .unwrap()
            .drainers;
        assert_eq!(drainers, Drainers::Auto, "drainers sized to the work");
    }

    #[test]
    fn service_bindings_are_binding_names_listed_once() {
        assert!(parse(&[]).unwrap().service_bindings.is_empty());
        let s = parse(&[("SERVICE_BINDINGS", " HANDLER, streak_2 ,,HANDLER")]).unwrap();
        assert_eq!(s.service_bindings, vec!["HANDLER", "streak_2"]);
        for bad in ["2X", "a-b", "a.b", "SELF", "HANDLER, x y"] {
            let err = parse(&[("SERVICE_BINDINGS", bad)]).unwrap_err();
            assert!(err.contains("SERVICE_BINDINGS"), "{bad}: {err}");
        }
        let many: Vec<String> = (0..=MAX_SERVICE_BINDINGS)
            .map(|i| format!("S{i}"))
            .collect();
        assert!(parse(&[("SERVICE_BINDINGS", &many.join(","))]).is_err());
    }

    #[test]
    fn own_hostnames_are_host_names_normalised_like_a_target_host() {
        assert!(parse(&[]).unwrap().own_hostnames.is_empty());
        let s = parse(&[(
            "OWN_HOSTNAMES",
            " Fanout.Example.COM., cron-fanout.acct.workers.dev ,,fanout.example.com",
        )])
        .unwrap();
        assert_eq!(
            s.own_hostnames,
            ["fanout.example.com", "cron-fanout.acct.workers.dev"]
        );
        for bad in [
            "https://fanout.example.com",
            "fanout.example.com:443",
            "fanout.example.com/x",
            "*.example.com",
            "a b.example.com",
        ] {
            let err = parse(&[("OWN_HOSTNAMES", bad)]).unwrap_err();
            assert!(err.starts_with("OWN_HOSTNAMES"), "{bad}: {err}");
        }
        let many: Vec<String> = (0..=MAX_OWN_HOSTNAMES)
            .map(|i| format!("h{i}.example.com"))
            .collect();
        assert!(parse(&[("OWN_HOSTNAMES", &many.join(","))]).is_err());
    }

    #[test]
    fn learn_limits_is_on_by_default_true_or_false_and_nothing_else() {
        assert!(parse(&[]).unwrap().learn_limits);
        assert!(!parse(&[("LEARN_LIMITS", "false")]).unwrap().learn_limits);
        for bad in ["", "yes", "1", "TRUE"] {
            let err = parse(&[("LEARN_LIMITS", bad)]).unwrap_err();
            assert!(err.starts_with("LEARN_LIMITS must be"), "{err}");
        }
    }

    #[test]
    fn refusal_give_up_is_a_day_by_default_in_seconds_within_a_year() {
        assert_eq!(parse(&[]).unwrap().refusal_give_up_ms, 86_400_000);
        let hour = parse(&[("REFUSAL_GIVE_UP_SECONDS", "3600")]).unwrap();
        assert_eq!(hour.refusal_give_up_ms, 3_600_000);
        for bad in ["0", "-1", "31536001", "1.5", "a day"] {
            let err = parse(&[("REFUSAL_GIVE_UP_SECONDS", bad)]).unwrap_err();
            assert!(err.starts_with("REFUSAL_GIVE_UP_SECONDS"), "{bad}: {err}");
        }
    }

    #[test]
    fn allow_private_targets_is_true_or_false_and_nothing_else() {
        assert!(
            parse(&[("ALLOW_PRIVATE_TARGETS", "true")])
                .unwrap()
                .allow_private_targets
        );
        assert!(
            !parse(&[("ALLOW_PRIVATE_TARGETS", "false")])
                .unwrap()
                .allow_private_targets
        );
        for bad in ["1", "yes", "TRUE", ""] {
            let err = parse(&[("ALLOW_PRIVATE_TARGETS", bad)]).unwrap_err();
            assert!(err.starts_with("ALLOW_PRIVATE_TARGETS"), "{err}");
        }
    }

    #[test]
    fn overrides_are_applied() {
        let s = parse(&[
            ("DISPATCH_MODE", "inline"),
            ("LEASE_SECONDS", "17"),
            ("JOB_TIMEOUT_MS", "1000"),
        ])
        .unwrap();
        assert_eq!(s.dispatch_mode, DispatchMode::Inline);
        assert_eq!(s.lease_ms, 17_000);
    }

    #[test]
    fn lease_shorter_than_job_timeout_is_rejected() {
        let err = parse(&[("LEASE_SECONDS", "10"), ("JOB_TIMEOUT_MS", "10000")]).unwrap_err();
        assert!(err.starts_with("LEASE_SECONDS"), "{err}");
        // Five call times (chunk 100 behind 25 slots, then the run) and the commit:
        // 5 × (10 s + 2 s grace) + 2 s = 62 s.
        assert!(parse(&[("LEASE_SECONDS", "61")]).is_err());
        assert!(parse(&[("LEASE_SECONDS", "62")]).is_ok());
        // A smaller chunk queues less: 2 × 12 s + 2 s = 26 s.
        assert!(parse(&[("LEASE_SECONDS", "25"), ("CLAIM_CHUNK", "25")]).is_err());
        assert!(parse(&[("LEASE_SECONDS", "26"), ("CLAIM_CHUNK", "25")]).is_ok());
    }

    #[test]
    fn garbage_and_out_of_range_values_name_the_variable() {
        let err = parse(&[("CLAIM_CHUNK", "lots")]).unwrap_err();
        assert_eq!(err, "CLAIM_CHUNK must be an integer, got \"lots\"");
        let err = parse(&[("MAX_ATTEMPTS", "0")]).unwrap_err();
        assert_eq!(err, "MAX_ATTEMPTS must be between 1 and 100, got 0");
        let err = parse(&[("DISPATCH_MODE", "parallel")]).unwrap_err();
        assert!(err.starts_with("DISPATCH_MODE"), "{err}");
        let err = parse(&[("RETRY_BASE_MS", "5000"), ("RETRY_MAX_MS", "10")]).unwrap_err();
        assert!(err.starts_with("RETRY_MAX_MS"), "{err}");
    }

    #[test]
    fn every_setting_is_read_and_changes_the_result() {
        // The lookup sees exactly the names of the defaults table...
        let asked = std::cell::RefCell::new(std::collections::BTreeSet::new());
        let defaults = Settings::from_lookup(|name| {
            asked.borrow_mut().insert(name.to_string());
            None
        })
        .unwrap();
        let names: std::collections::BTreeSet<String> =
            DEFAULTS.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(asked.into_inner(), names);
        // ...and each one counts: a value that is not its default is either refused
        // naming it, or gives other settings.
        for (name, _) in DEFAULTS {
            match parse(&[(name, "not-a-setting")]) {
                Err(e) => assert!(e.starts_with(name), "{name}: {e}"),
                Ok(s) => assert_ne!(s, defaults, "{name} is read but not used"),
            }
        }
    }

    #[test]
    fn every_setting_is_documented_with_its_default() {
        let doc = include_str!("../../docs/reference/settings.md");
        for (name, default) in DEFAULTS {
            let row = doc
                .lines()
                .find(|l| l.starts_with(&format!("| `{name}` |")))
                .unwrap_or_else(|| panic!("docs/reference/settings.md has no row for {name}"));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert_eq!(
                cells[2].trim_matches('`'),
                *default,
                "{name}'s documented default"
            );
            assert!(!cells[3].is_empty(), "{name} needs a meaning");
        }
    }

    #[test]
    fn the_budget_must_leave_a_firing_tick_room_to_drain() {
        let err = parse(&[("SUBREQUEST_BUDGET", "14")]).unwrap_err();
        assert_eq!(
            err,
            "SUBREQUEST_BUDGET must be between 15 and 1000000, got 14"
        );
        assert_eq!(
            parse(&[("SUBREQUEST_BUDGET", "15")])
                .unwrap()
                .subrequest_budget,
            15
        );
    }

    #[test]
    fn deadline_must_leave_room_for_one_claim() {
        // One call time of 10 s + 2 s grace, plus 2 s to commit.
        let err = parse(&[("INVOCATION_DEADLINE_MS", "13999")]).unwrap_err();
        assert!(err.starts_with("INVOCATION_DEADLINE_MS"), "{err}");
        assert!(err.ends_with("at least 14000 ms"), "{err}");
        assert!(parse(&[("INVOCATION_DEADLINE_MS", "14000")]).is_ok());
    }
}
