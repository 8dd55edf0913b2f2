//! The two ways a `service` item could reach the user's Worker, timed against
//! each other on one runtime with `POST /probe` mode `service`: straight from the
//! drain (the path cron-fanout takes: one invocation per item) and through a SELF
//! child (two). Rounds alternate the paths so both share the machine's drift.

use crate::run::metrics::median;
use crate::runtime::api::{Api, ServiceProbe};
use anyhow::Result;

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
