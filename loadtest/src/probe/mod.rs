//! The probe folder: `loadtest probe` (this module) and the pure analysis of
//! what it recorded (`analysis`). It uses the shared folders.
//!
//! `loadtest probe`: what only the platform can tell, measured through
//! `POST /probe` — locally (nothing is enforced there, and the output says so) or
//! against any deployment with `--url`. It climbs a ladder of SELF call counts
//! sequentially and concurrently (where is the first refusal, and its message),
//! starts children that fetch a slow URL at once (do they share 6 connections?)
//! and children that burn CPU (is a child's CPU its own?), then prints the
//! analysis (`analysis`) as a markdown table for docs/benchmarks.md.

pub mod analysis;

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::probe::analysis::{Pair, Recorded};
use crate::run::table::{num, Table};
use crate::runtime::api::{Api, ChildrenProbe, Probe};
use anyhow::{bail, ensure, Context, Result};
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::time::Duration;

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

/// A slow URL in this process (`GET /slow?ms=N` answers 200 after N ms), for the
/// connections probe against a local Worker. Stops when the handle is dropped.
pub struct SlowServer {
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SlowServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn slow_server(ms: u64) -> Result<SlowServer> {
    use axum::extract::Query;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::get(
            |Query(q): Query<std::collections::HashMap<String, u64>>| async move {
                tokio::time::sleep(Duration::from_millis(q.get("ms").copied().unwrap_or(0))).await;
                "slow"
            },
        ),
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(SlowServer {
        url: format!("http://{addr}/slow?ms={ms}"),
        task,
    })
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

/// Whether a children probe answered well-formed: every child listed once, in
/// order, ok, answered within the makespan.
fn well_formed(p: &ChildrenProbe, mode: &str, children: u64) -> Result<(), String> {
    let listed: Vec<u64> = p.results.iter().map(|c| c.child).collect();
    if p.mode != mode || p.children != children || listed != (0..children).collect::<Vec<_>>() {
        return Err(format!("{} with children {listed:?}", p.mode));
    }
    if let Some(c) = p.results.iter().find(|c| !c.ok) {
        return Err(format!("child {} failed: {:?}", c.child, c.error));
    }
    if p.failed != 0 || p.results.iter().any(|c| c.answered_ms > p.elapsed_ms) {
        return Err(format!("failed {}, elapsed {} ms", p.failed, p.elapsed_ms));
    }
    Ok(())
}

/// The e2e part: each mode answers on `wrangler dev` with a well-formed result,
/// and the child route refuses an unsigned call.
pub async fn e2e(target: &Target, checks: &mut Checks) -> Result<()> {
    checks
        .run(
            &mut &target.api,
            vec![
                check!(
                    "POST /probe self_calls, 40 calls one at a time: all ok, one run of results, no refusal",
                    self_calls_all_ok
                ),
                check!(
                    format!("POST /probe connections, 8 children fetching a {SLOW_MS} ms URL: each answers 200 after at least {SLOW_MS} ms"),
                    children_wait_for_a_slow_url
                ),
                check!(
                    "POST /probe cpu, 4 children burning 1,000,000 iterations: every child answers",
                    cpu_children_answer
                ),
                check!("unsigned POST /internal/probe: 401", unsigned_child_refused),
            ],
        )
        .await;
    Ok(())
}

/// How slowly the connections check's URL answers.
const SLOW_MS: u64 = 300;

async fn self_calls_all_ok(api: &mut &Api) -> Result<()> {
    let p = api.probe(40, 1).await?;
    ensure!(
        p.ok == 40 && p.first_refusal.is_none() && p.runs.len() == 1 && p.runs[0].count == 40,
        "{p:?}"
    );
    Ok(())
}

async fn children_wait_for_a_slow_url(api: &mut &Api) -> Result<()> {
    let slow = slow_server(SLOW_MS).await?;
    let c = api
        .probe_children(&json!({"mode": "connections", "children": 8, "url": slow.url}))
        .await?;
    well_formed(&c, "connections", 8).map_err(anyhow::Error::msg)?;
    match c
        .results
        .iter()
        .find(|r| r.status != Some(200) || r.answered_ms < SLOW_MS as f64)
    {
        Some(r) => bail!("{r:?}"),
        None => Ok(()),
    }
}

async fn cpu_children_answer(api: &mut &Api) -> Result<()> {
    let cpu = api
        .probe_children(&json!({"mode": "cpu", "children": 4, "iterations": 1_000_000}))
        .await?;
    well_formed(&cpu, "cpu", 4).map_err(anyhow::Error::msg)
}

async fn unsigned_child_refused(api: &mut &Api) -> Result<()> {
    let r = api
        .raw(
            Method::POST,
            "/internal/probe",
            None,
            Some(r#"{"task":"burn","iterations":1}"#.into()),
        )
        .await?;
    ensure!(
        r.status == StatusCode::UNAUTHORIZED,
        "{}: {}",
        r.status,
        r.body
    );
    Ok(())
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
