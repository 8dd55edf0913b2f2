//! `POST /probe`: measure, on whatever deployment this runs, how many SELF calls one
//! invocation can make and how fast, and what the platform answers when a limit
//! bites. It deliberately ignores SUBREQUEST_BUDGET: finding the real cap is the
//! point. Admin-only; each call is a cheap `GET /health` on a fresh invocation.
//! The request body is parsed and bounded by `api::probe`.

use std::collections::BTreeMap;

use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use worker::{Env, Fetcher};

use super::{clock, SELF_ORIGIN};
use crate::api::probe::ProbeRequest;
use crate::core::error::ApiError;

async fn call(service: &Fetcher) -> Result<(), String> {
    match service.fetch(format!("{SELF_ORIGIN}/health"), None).await {
        Ok(r) if r.status_code() == 200 => Ok(()),
        Ok(r) => Err(format!("HTTP {}", r.status_code())),
        Err(e) => Err(e.to_string()),
    }
}

pub async fn run(env: &Env, req: &ProbeRequest) -> Result<Value, ApiError> {
    let service = env
        .service("SELF")
        .map_err(|e| ApiError::Internal(format!("binding SELF: {e}")))?;
    let started = clock::now_ms();
    let results: Vec<(i64, Result<(), String>)> = stream::iter(0..req.calls)
        .map(|i| {
            let service = &service;
            async move { (i, call(service).await) }
        })
        .buffer_unordered(req.concurrency as usize)
        .collect()
        .await;
    let elapsed_ms = (clock::now_ms() - started).max(1);
    let mut errors: BTreeMap<String, i64> = BTreeMap::new();
    let mut first_error_at = None;
    let mut ok = 0;
    for (i, r) in results {
        match r {
            Ok(()) => ok += 1,
            Err(e) => {
                *errors.entry(e).or_default() += 1;
                first_error_at = Some(first_error_at.map_or(i, |f: i64| f.min(i)));
            }
        }
    }
    Ok(json!({
        "calls": req.calls,
        "concurrency": req.concurrency,
        "ok": ok,
        "failed": req.calls - ok,
        "first_failed_call": first_error_at,
        "errors": errors,
        "elapsed_ms": elapsed_ms,
        "calls_per_second": (req.calls as f64) * 1000.0 / (elapsed_ms as f64),
    }))
}
