//! `loadtest probe`: how many SELF calls one invocation can make, how fast, and
//! what the platform answers when a limit bites — locally (nothing is enforced)
//! or against any deployment with `--url`.

use crate::api::{Api, Probe};
use crate::table::{num, Table};
use crate::target::{Secrets, Target, TargetArgs};
use anyhow::{Context, Result};

/// The growing call counts: these steps below `max`, then `max` itself.
const STEPS: [u64; 5] = [10, 50, 100, 1_000, 10_000];

#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Largest call count to try (the Worker accepts up to 100000).
    #[arg(long, default_value_t = 10_000)]
    pub calls: u64,
    /// Calls in flight at once inside the invocation.
    #[arg(long, default_value_t = 25)]
    pub concurrency: u64,
    /// Print the results as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The call counts to try, ascending: the fixed steps below `max`, then `max`.
pub fn ladder(max: u64) -> Vec<u64> {
    let mut steps: Vec<u64> = STEPS.iter().copied().filter(|&s| s < max).collect();
    steps.push(max.max(1));
    steps
}

/// Probes each step in turn, stopping at the first one with failures.
pub async fn climb(api: &Api, max: u64, concurrency: u64) -> Result<Vec<Probe>> {
    let mut results = Vec::new();
    for calls in ladder(max) {
        eprintln!("probing {calls} SELF calls at concurrency {concurrency} ...");
        let p = api
            .probe(calls, concurrency)
            .await
            .with_context(|| format!("POST /probe with {calls} calls"))?;
        let failed = p.failed > 0;
        results.push(p);
        if failed {
            break;
        }
    }
    Ok(results)
}

/// What the steps say, in one sentence.
pub fn conclusion(results: &[Probe]) -> String {
    let clean = results
        .iter()
        .filter(|p| p.failed == 0)
        .map(|p| p.calls)
        .max();
    match results.iter().find(|p| p.failed > 0) {
        None => format!(
            "no limit hit: one invocation made {} SELF calls without a failure",
            clean.unwrap_or(0)
        ),
        Some(p) => {
            let errors: Vec<String> = p.errors.iter().map(|(e, n)| format!("{n}× {e}")).collect();
            format!(
                "limit hit at {} calls: {} failed, the first at call #{}; errors: {}",
                p.calls,
                p.failed,
                p.first_failed_call.map_or("?".into(), |c| c.to_string()),
                errors.join("; ")
            )
        }
    }
}

pub fn table(results: &[Probe]) -> Table {
    let mut t = Table::default();
    t.section("SELF round trips from one invocation (POST /probe)");
    t.row(&[
        "calls",
        "concurrency",
        "ok",
        "failed",
        "elapsed ms",
        "calls/s",
    ]);
    for p in results {
        t.row(&[
            p.calls.to_string(),
            p.concurrency.to_string(),
            p.ok.to_string(),
            p.failed.to_string(),
            num(Some(p.elapsed_ms), 0),
            num(Some(p.calls_per_second), 0),
        ]);
    }
    t
}

pub async fn run(args: ProbeArgs) -> Result<bool> {
    // A deployment needs no sink and no runtime; a local run starts both.
    let (api, mut local) = match &args.target.url {
        Some(url) => {
            let token = args
                .target
                .admin_token
                .as_deref()
                .context("--url needs --admin-token")?;
            let api = Api::new(url, token)?;
            api.health()
                .await
                .with_context(|| format!("{url} is not healthy"))?;
            (api, None)
        }
        None => {
            let target = Target::open(&args.target, "probe", &[], Secrets::Random, true).await?;
            (target.api.clone(), Some(target))
        }
    };
    let results = climb(&api, args.calls, args.concurrency).await?;
    if args.json {
        let out = serde_json::json!({"steps": results, "conclusion": conclusion(&results)});
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", table(&results));
        println!("{}", conclusion(&results));
    }
    if let Some(runtime) = local.as_mut().and_then(|t| t.runtime.as_mut()) {
        runtime.stop().await?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn ladder_grows_to_the_max() {
        assert_eq!(ladder(10_000), [10, 50, 100, 1_000, 10_000]);
        assert_eq!(ladder(500), [10, 50, 100, 500]);
        assert_eq!(ladder(100_000), [10, 50, 100, 1_000, 10_000, 100_000]);
        assert_eq!(ladder(5), [5]);
        assert_eq!(ladder(0), [1]);
    }

    fn probe(calls: u64, failed: u64) -> Probe {
        Probe {
            calls,
            concurrency: 25,
            ok: calls - failed,
            failed,
            first_failed_call: (failed > 0).then_some(32),
            errors: if failed > 0 {
                BTreeMap::from([("Subrequest depth limit exceeded".to_string(), failed)])
            } else {
                BTreeMap::new()
            },
            elapsed_ms: 100.0,
            calls_per_second: calls as f64 * 10.0,
        }
    }

    #[test]
    fn conclusions() {
        assert_eq!(
            conclusion(&[probe(10, 0), probe(50, 0)]),
            "no limit hit: one invocation made 50 SELF calls without a failure"
        );
        let c = conclusion(&[probe(10, 0), probe(50, 18)]);
        assert!(
            c.starts_with("limit hit at 50 calls: 18 failed, the first at call #32"),
            "{c}"
        );
        assert!(c.contains("18× Subrequest depth limit exceeded"), "{c}");
        assert!(table(&[probe(10, 0)]).to_string().contains("calls/s"));
    }
}
