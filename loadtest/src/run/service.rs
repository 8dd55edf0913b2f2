//! cron-fanout beside the example TypeScript handler (`examples/service-handler`)
//! in one multi-worker `wrangler dev` ([`open`]), which the e2e `service` part and
//! the bench share, and the two ways a `service` item could reach the user's
//! Worker ([`measure`]), timed against each other on one runtime with `POST /probe`
//! mode `service`: straight from the drain (the path cron-fanout takes: one
//! invocation per item) and through a SELF child (two). Rounds alternate the paths so both share the machine's drift.

use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::run::metrics::median;
use crate::runtime::api::{Api, ServiceProbe};
use crate::runtime::wrangler::min_lease_seconds;
use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};

/// The binding cron-fanout has; `GONE` is listed in SERVICE_BINDINGS but not bound.
pub const BINDING: &str = "HANDLER";

/// Short timeouts; a backoff (5 s and more on attempt 1) far from the 2 s the
/// handler's `Retry-After` asks for, so the two cannot be mistaken.
const SETTINGS: &[(&str, &str)] = &[
    ("MAX_ATTEMPTS", "3"),
    ("JOB_TIMEOUT_MS", "2000"),
    ("RETRY_BASE_MS", "10000"),
    ("RETRY_MAX_MS", "20000"),
    ("CLAIM_CHUNK", "10"),
    ("DISPATCH_CONCURRENCY", "10"),
    ("SUBREQUEST_BUDGET", "200"),
    ("INVOCATION_DEADLINE_MS", "15000"),
    ("SERVICE_BINDINGS", "HANDLER,GONE"),
];

/// The repo's `wrangler.toml` with the `HANDLER` binding to the example added,
/// written under `.loadtest/` (its paths made absolute): a deployment's config
/// must not name a Worker that may not exist.
fn worker_config(repo: &Path) -> Result<PathBuf> {
    let own =
        std::fs::read_to_string(repo.join("wrangler.toml")).context("reading wrangler.toml")?;
    let mut config = own.clone();
    for (key, path) in [("main", "build/index.js"), ("migrations_dir", "migrations")] {
        let relative = format!("{key} = \"{path}\"");
        ensure!(
            config.contains(&relative),
            "wrangler.toml has no line {relative}"
        );
        let absolute = format!("{key} = \"{}\"", repo.join(path).display());
        config = config.replace(&relative, &absolute);
    }
    config.push_str(&format!(
        "\n# Added by the service e2e part: the example handler, run beside it.\n[[services]]\nbinding = \"{BINDING}\"\nservice = \"service-handler\"\n"
    ));
    let dir = repo.join(".loadtest");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("e2e-service-wrangler.toml");
    std::fs::write(&path, config)?;
    Ok(path)
}

/// cron-fanout (bound to the handler as [`BINDING`], with the part's settings)
/// and the example handler in one multi-worker `wrangler dev` named `name`.
pub async fn open(args: &TargetArgs, name: &str) -> Result<Target> {
    let repo = args.repo.canonicalize()?;
    let lease = min_lease_seconds(2_000, 10, 10) + 1;
    let lease = lease.to_string();
    let mut settings: Vec<(&str, &str)> = SETTINGS.to_vec();
    settings.push(("LEASE_SECONDS", &lease));
    let configs = vec![
        worker_config(&repo)?,
        repo.join("examples/service-handler/wrangler.toml"),
    ];
    Target::open_with_configs(args, name, &settings, Secrets::Random, true, configs)
        .await
        .context("starting cron-fanout and the service handler")
}

/// Every round of both paths, in the order they ran.
#[derive(Debug, Clone, Default)]
pub struct Paths {
    pub drain: Vec<ServiceProbe>,
    pub via_self: Vec<ServiceProbe>,
}

/// `rounds` rounds of `calls` calls to `binding` each way, `concurrency` in flight.
pub async fn measure(
    api: &Api,
    binding: &str,
    calls: u64,
    concurrency: u64,
    rounds: u64,
) -> Result<Paths> {
    let mut paths = Paths::default();
    for _ in 0..rounds {
        paths.drain.push(
            api.probe_service(binding, calls, concurrency, "drain")
                .await?,
        );
        paths.via_self.push(
            api.probe_service(binding, calls, concurrency, "self")
                .await?,
        );
    }
    Ok(paths)
}

impl Paths {
    /// Every call of every round done, each way; else the first path's errors.
    pub fn all_done(&self) -> Result<(), String> {
        for probe in self.drain.iter().chain(&self.via_self) {
            if probe.done != probe.calls {
                return Err(format!(
                    "via {}: {} of {} calls done, errors {:?}",
                    probe.via, probe.done, probe.calls, probe.errors
                ));
            }
        }
        if self.drain.is_empty() || self.via_self.is_empty() {
            return Err("no round ran".into());
        }
        Ok(())
    }

    /// Median calls/s straight from the drain, through SELF, and their ratio.
    pub fn medians(&self) -> (Option<f64>, Option<f64>, Option<f64>) {
        let rate =
            |p: &[ServiceProbe]| median(&p.iter().map(|r| r.calls_per_second).collect::<Vec<_>>());
        let (drain, via_self) = (rate(&self.drain), rate(&self.via_self));
        let ratio = drain.zip(via_self).map(|(d, s)| d / s);
        (drain, via_self, ratio)
    }

    /// `drain X calls/s, through SELF Y calls/s (X/Y = R)`.
    pub fn summary(&self) -> String {
        let (d, s, r) = self.medians();
        let n = |v: Option<f64>, p: usize| v.map_or("-".into(), |v| format!("{v:.p$}"));
        format!(
            "straight from the drain {} calls/s, through a SELF child {} calls/s (ratio {}), median of {} rounds",
            n(d, 1),
            n(s, 1),
            n(r, 2),
            self.drain.len().min(self.via_self.len())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(via: &str, done: u64, rate: f64) -> ServiceProbe {
        ServiceProbe {
            service: "HANDLER".into(),
            via: via.into(),
            calls: 10,
            concurrency: 5,
            done,
            failed: 10 - done,
            errors: Default::default(),
            elapsed_ms: 10_000.0 / rate,
            calls_per_second: rate,
        }
    }

    #[test]
    fn medians_and_ratio_of_the_rounds() {
        let paths = Paths {
            drain: vec![
                probe("drain", 10, 300.0),
                probe("drain", 10, 100.0),
                probe("drain", 10, 200.0),
            ],
            via_self: vec![
                probe("self", 10, 50.0),
                probe("self", 10, 100.0),
                probe("self", 10, 150.0),
            ],
        };
        assert_eq!(paths.medians(), (Some(200.0), Some(100.0), Some(2.0)));
        assert!(paths.all_done().is_ok());
        assert!(
            paths.summary().contains("(ratio 2.00), median of 3 rounds"),
            "{}",
            paths.summary()
        );
    }

    #[test]
    fn a_call_not_done_or_no_round_is_a_failure() {
        let paths = Paths {
            drain: vec![probe("drain", 10, 1.0)],
            via_self: vec![probe("self", 9, 1.0)],
        };
        assert!(paths.all_done().unwrap_err().contains("via self: 9 of 10"));
        assert!(Paths::default().all_done().is_err());
    }
}
