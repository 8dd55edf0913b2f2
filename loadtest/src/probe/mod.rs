//! The probe folder: `loadtest probe` (this module) and the pure analysis of
//! what it recorded (`analysis`). It uses the shared folders.
//!
//! `loadtest probe`: what only the platform can tell, measured through
//! `POST /probe` — locally (nothing is enforced there, and the output says so) or
//! against any deployment with `--url`. It climbs a ladder of SELF call counts
//! sequentially and concurrently (where is the first refusal, and its message),
//! starts children that fetch a slow URL at once (do they share 6 connections?)
//! and children that burn CPU (is a child's CPU its own?), then prints the
//! analysis (`analysis`) as a markdown table for docs/benchmarks/envelope.md.

pub mod analysis;

use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::probe::analysis::{Pair, Recorded};
use crate::run::table::{num, Table};
use crate::runtime::api::{Api, Probe};
use crate::sink::slow::slow_server;
use anyhow::{Context, Result};
use serde_json::json;

/// The growing call counts: these steps below `max`, then `max` itself.
const STEPS: [u64; 5] = [10, 50, 100, 1_000, 10_000];

#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Largest call count to try concurrently (the Worker accepts up to 100000).
    #[arg(long, default_value_t = 10_000)]
    pub calls: u64,
    /// Largest call count to try one at a time.
    #[arg(long, default_value_t = 1_000)]
    pub sequential_calls: u64,
    /// Calls in flight at once inside the invocation (the concurrent ladder).
    #[arg(long, default_value_t = 25)]
    pub concurrency: u64,
    /// A URL that answers slowly (a second or more), fetched by each child of the
    /// connections probe. Locally a server in this process answers after
    /// --slow-ms; against a deployment the probe is skipped without it.
    #[arg(long)]
    pub slow_url: Option<String>,
    /// How slowly the local slow URL answers.
    #[arg(long, default_value_t = 1_000)]
    pub slow_ms: u64,
    /// Children fetching the slow URL at once (at most 30).
    #[arg(long, default_value_t = 18)]
    pub children: u64,
    /// Children burning CPU at once (at most 30).
    #[arg(long, default_value_t = 8)]
    pub cpu_children: u64,
    /// Each burning child's iterations (about 2 ns each locally; the platform's CPU
    /// limit applies: 10 ms on Free).
    #[arg(long, default_value_t = 200_000_000)]
    pub burn_iterations: u64,
    /// Print the recorded answers, the findings and the table as JSON on stdout.
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

/// One child alone, then `children` at once, doing the task `body` describes.
async fn pair(api: &Api, body: serde_json::Value, children: u64) -> Result<Pair> {
    let with = |n: u64| {
        let mut b = body.clone();
        b["children"] = json!(n);
        b
    };
    eprintln!("probing {} with 1 child, then {children} ...", body["mode"]);
    let alone = api.probe_children(&with(1)).await?;
    let together = api.probe_children(&with(children)).await?;
    Ok(Pair { alone, together })
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
            // The local slow URL is on 127.0.0.1, a private target.
            let settings = [("ALLOW_PRIVATE_TARGETS", "true")];
            let target =
                Target::open(&args.target, "probe", &settings, Secrets::Random, true).await?;
            (target.api.clone(), Some(target))
        }
    };
    let is_local = local.is_some();
    let slow = match (&args.slow_url, is_local) {
        (None, true) => Some(slow_server(args.slow_ms).await?),
        _ => None,
    };
    let slow_url = args
        .slow_url
        .clone()
        .or(slow.as_ref().map(|s| s.url.clone()));
    let sequential = climb(&api, args.sequential_calls, 1).await?;
    let concurrent = climb(&api, args.calls, args.concurrency).await?;
    let connections = match &slow_url {
        Some(url) => Some(
            pair(
                &api,
                json!({"mode": "connections", "url": url}),
                args.children,
            )
            .await
            .context("the connections probe")?,
        ),
        None => None,
    };
    let cpu = pair(
        &api,
        json!({"mode": "cpu", "iterations": args.burn_iterations}),
        args.cpu_children,
    )
    .await
    .context("the cpu probe")?;
    let recorded = Recorded {
        local: is_local,
        sequential,
        concurrent,
        connections,
        cpu: Some(cpu),
    };
    let findings = analysis::findings(&recorded);
    let markdown = analysis::markdown(&findings);
    if args.json {
        let out = json!({"recorded": recorded, "findings": findings, "markdown": markdown});
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", table(&recorded.sequential));
        print!("{}", table(&recorded.concurrent));
        println!();
        if is_local {
            println!("Local run (wrangler dev): no platform limit is enforced here, so nothing below is verified.");
            println!("Run against a deployment: loadtest probe --url https://<worker> --admin-token … --slow-url <a URL answering in ≥ 1 s>");
            println!();
        }
        print!("{markdown}");
    }
    if let Some(runtime) = local.as_mut().and_then(|t| t.runtime.as_mut()) {
        runtime.stop().await?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_grows_to_the_max() {
        assert_eq!(ladder(10_000), [10, 50, 100, 1_000, 10_000]);
        assert_eq!(ladder(500), [10, 50, 100, 500]);
        assert_eq!(ladder(100_000), [10, 50, 100, 1_000, 10_000, 100_000]);
        assert_eq!(ladder(5), [5]);
        assert_eq!(ladder(0), [1]);
    }
}
