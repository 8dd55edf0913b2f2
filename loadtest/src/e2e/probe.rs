//! The e2e part of `POST /probe`: each mode answers on `wrangler dev` with a
//! well-formed result, and the child route refuses an unsigned call. What the
//! probe measures on a deployment is `loadtest probe` (the `probe` folder).

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::target::Target;
use crate::runtime::api::{Api, ChildrenProbe};
use crate::sink::slow::slow_server;
use anyhow::{bail, ensure, Result};
use reqwest::{Method, StatusCode};
use serde_json::json;

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

/// The part: each mode answers with a well-formed result, the child route
/// refuses an unsigned call.
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
