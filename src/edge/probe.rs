//! `POST /probe`: measure, on whatever deployment this runs, what the platform's
//! pages leave open. `self_calls`: how many SELF calls one invocation can make and
//! how fast, each call's result and the first refusal's exact message (each call is
//! a cheap `GET /health`). `connections` and `cpu`: children started at once through
//! SELF (`POST /internal/probe`, signed like a dispatch), each fetching a slow URL
//! or burning CPU, timed from here, so the caller can tell whether they shared the
//! 6 connections or one thread. `service`: a `service` item's run made `calls`
//! times, by this invocation as the drain makes it or through a SELF child, so
//! the two paths can be timed against each other (docs/architecture/jobs-and-http.md,
//! "Service items"). It deliberately ignores SUBREQUEST_BUDGET: finding
//! the real caps is the point. Admin-only; bodies are parsed and bounded by
//! `api::probe`.
//!
//! Times are read from here, around I/O: on the platform a Worker's clock only
//! moves between I/O events, so a child's own timing of a CPU burn reads 0 there.

use std::collections::BTreeMap;

use futures::future::join_all;
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use worker::{web_sys, Env, Fetcher, Request};

use super::config::Config;
use super::dispatch::Watchdog;
use super::run::{run_with_timeout, Runner};
use super::{clock, dispatch, SELF_ORIGIN};
use crate::api::probe::{self, ProbeRequest, ProbeTask, Via, FETCH_TIMEOUT_MS};
use crate::core::batch::model::Outcome;
use crate::core::drain::timing::call_ms;
use crate::core::drain::watchdog::Cohorts;
use crate::core::error::ApiError;
use crate::core::security::signature::SignatureHeader;
use crate::jobs::service;

/// One self call's result: answered 200, threw (no answer: the platform refused,
/// or the network failed), or answered another status.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Called {
    Ok,
    Threw(String),
    Status(u16),
}

impl Called {
    fn result(&self) -> &'static str {
        match self {
            Called::Ok => "ok",
            Called::Threw(_) => "threw",
            Called::Status(_) => "status",
        }
    }

    fn message(&self) -> Option<String> {
        match self {
            Called::Ok => None,
            Called::Threw(m) => Some(m.clone()),
            Called::Status(s) => Some(format!("HTTP {s}")),
        }
    }
}

async fn call(service: &Fetcher) -> Called {
    match service.fetch(format!("{SELF_ORIGIN}/health"), None).await {
        Ok(r) if r.status_code() == 200 => Called::Ok,
        Ok(r) => Called::Status(r.status_code()),
        Err(e) => Called::Threw(e.to_string()),
    }
}

fn self_binding(env: &Env) -> Result<Fetcher, ApiError> {
    env.service("SELF")
        .map_err(|e| ApiError::Internal(format!("binding SELF: {e}")))
}

pub async fn run(runner: Runner<'_>, cfg: &Config, req: &ProbeRequest) -> Result<Value, ApiError> {
    let service = self_binding(runner.env)?;
    match req {
        ProbeRequest::Service {
            service: binding,
            calls,
            concurrency,
            via,
        } => Ok(service_calls(&service, runner, cfg, binding, *calls, *concurrency, *via).await),
        ProbeRequest::SelfCalls { calls, concurrency } => {
            Ok(self_calls(&service, *calls, *concurrency).await)
        }
        ProbeRequest::Connections { children, url } => {
            let task = ProbeTask::Fetch { url: url.clone() };
            let mut out = spawn(&service, cfg, *children, &task).await?;
            out["mode"] = json!("connections");
            out["url"] = json!(url);
            Ok(out)
        }
        ProbeRequest::Cpu {
            children,
            iterations,
        } => {
            let task = ProbeTask::Burn {
                iterations: *iterations,
            };
            let mut out = spawn(&service, cfg, *children, &task).await?;
            out["mode"] = json!("cpu");
            out["iterations"] = json!(iterations);
            Ok(out)
        }
    }
}

/// `calls` `GET /health` calls, `concurrency` in flight, issued in index order.
/// Every call's result is kept as runs of equal results, in index order.
async fn self_calls(service: &Fetcher, calls: i64, concurrency: i64) -> Value {
    let started = clock::now_ms();
    let mut results: Vec<(i64, Called)> = stream::iter(0..calls)
        .map(|i| async move { (i, call(service).await) })
        .buffer_unordered(concurrency as usize)
        .collect()
        .await;
    let elapsed_ms = (clock::now_ms() - started).max(1);
    results.sort_by_key(|(i, _)| *i);
    let mut errors: BTreeMap<String, i64> = BTreeMap::new();
    let mut runs: Vec<Value> = Vec::new();
    let mut last: Option<&Called> = None;
    for (i, called) in &results {
        if let Some(message) = called.message() {
            *errors.entry(message).or_default() += 1;
        }
        if last == Some(called) {
            let run = runs.last_mut().expect("a run is open");
            run["count"] = json!(run["count"].as_i64().unwrap_or(0) + 1);
        } else {
            runs.push(json!({"from": i, "count": 1, "result": called.result(), "message": called.message()}));
        }
        last = Some(called);
    }
    let ok = results.iter().filter(|(_, c)| *c == Called::Ok).count() as i64;
    let first_failed_call = results
        .iter()
        .find(|(_, c)| *c != Called::Ok)
        .map(|(i, _)| i);
    let first_refusal = results.iter().find_map(|(i, c)| match c {
        Called::Threw(m) => Some(json!({"call": i, "message": m})),
        _ => None,
    });
    json!({
        "mode": "self_calls",
        "calls": calls,
        "concurrency": concurrency,
        "ok": ok,
        "failed": calls - ok,
        "first_failed_call": first_failed_call,
        "first_refusal": first_refusal,
        "errors": errors,
        "runs": runs,
        "elapsed_ms": elapsed_ms,
        "calls_per_second": (calls as f64) * 1000.0 / (elapsed_ms as f64),
    })
}

/// `calls` runs of a `service` item calling `binding` (path `/probe`, `data`
/// null; `jobs::service::probe_call`: ids below 1, keys `probe:<n>`),
/// `concurrency` in flight, made `via` one path with the drain's own code
/// (`run_with_timeout`, or `dispatch::dispatch` under the drain's watchdog and
/// the child's run): counted by outcome, timed from here.
async fn service_calls(
    self_service: &Fetcher,
    runner: Runner<'_>,
    cfg: &Config,
    binding: &str,
    calls: i64,
    concurrency: i64,
    via: Via,
) -> Value {
    // A child call is abandoned after the drain's own limit for a dispatch, by
    // the drain's watchdog: a timer outlives its call, so one per call would pass
    // the runtime's cap of live timers after 10,000 calls in one limit.
    let mut watchdog = Watchdog::new(call_ms(cfg.settings.job_timeout_ms));
    let mut cohorts = Cohorts::default();
    let started = clock::now_ms();
    let outcomes: Vec<String> = stream::iter(1..=calls)
        .map(|n| {
            // Called as each call starts (`buffer_unordered` pulls it then).
            let item = service::probe_call(binding, n);
            let signal =
                (via == Via::SelfChild).then(|| watchdog.signal(cohorts.start(clock::now_ms())));
            async move {
                let ran = match signal {
                    None => Ok(run_with_timeout(&item, cfg, runner, Some("probe")).await),
                    Some(signal) => {
                        dispatch::dispatch(
                            self_service,
                            &cfg.secrets.dispatch,
                            &item,
                            "probe",
                            &signal,
                        )
                        .await
                    }
                };
                match ran {
                    Ok(ran) => match ran.outcome {
                        Outcome::Done => "done".to_string(),
                        Outcome::Retry(why) => format!("retry: {why}"),
                        Outcome::Fail(why) => format!("fail: {why}"),
                    },
                    Err(refused) => format!("refused: {}", refused.0),
                }
            }
        })
        .buffer_unordered(concurrency as usize)
        .collect()
        .await;
    let elapsed_ms = (clock::now_ms() - started).max(1);
    let mut errors: BTreeMap<String, i64> = BTreeMap::new();
    for outcome in outcomes.iter().filter(|o| *o != "done") {
        *errors.entry(outcome.clone()).or_default() += 1;
    }
    let done = calls - errors.values().sum::<i64>();
    json!({
        "mode": "service",
        "service": binding,
        "via": via,
        "calls": calls,
        "concurrency": concurrency,
        "done": done,
        "failed": calls - done,
        "errors": errors,
        "elapsed_ms": elapsed_ms,
        "calls_per_second": (calls as f64) * 1000.0 / (elapsed_ms as f64),
    })
}

/// `children` signed `POST /internal/probe` calls at once, each timed from here.
async fn spawn(
    service: &Fetcher,
    cfg: &Config,
    children: i64,
    task: &ProbeTask,
) -> Result<Value, ApiError> {
    let body = serde_json::to_string(task).map_err(|e| ApiError::Internal(e.to_string()))?;
    let started = clock::now_ms();
    let results = join_all((0..children).map(|child| {
        let body = body.clone();
        async move {
            let answer = child_call(service, &cfg.secrets.dispatch, body).await;
            let answered_ms = clock::now_ms() - started;
            let mut out = json!({"child": child, "answered_ms": answered_ms});
            match answer {
                Ok(report) => {
                    out["ok"] = json!(report.get("error").is_none_or(Value::is_null));
                    for (k, v) in report.as_object().into_iter().flatten() {
                        out[k] = v.clone();
                    }
                }
                Err(message) => {
                    out["ok"] = json!(false);
                    out["error"] = json!(message);
                }
            }
            out
        }
    }))
    .await;
    let elapsed_ms = (clock::now_ms() - started).max(1);
    let failed = results.iter().filter(|r| r["ok"] != json!(true)).count();
    Ok(json!({
        "children": children,
        "failed": failed,
        "elapsed_ms": elapsed_ms,
        "results": results,
    }))
}

/// One child call: its JSON report, or why there is none.
async fn child_call(service: &Fetcher, secret: &str, body: String) -> Result<Value, String> {
    // Signed like a dispatch: the signature on the body's first line.
    let request = super::dispatch::signed_self_request(secret, "/internal/probe", &body, None)
        .map_err(|e| format!("cannot build the child request: {e:?}"))?;
    let mut response = service
        .fetch_request(request)
        .await
        .map_err(|e| e.to_string())?;
    if response.status_code() != 200 {
        return Err(format!("HTTP {}", response.status_code()));
    }
    response.json().await.map_err(|e| e.to_string())
}

/// `POST /internal/probe`, once admitted (`run::admit`): check the tag over the
/// body, run the task, report what this child saw.
pub async fn task(body: &[u8], header: &SignatureHeader, cfg: &Config) -> Result<Value, ApiError> {
    header
        .check_tag(cfg.secrets.dispatch_keys(), body)
        .map_err(|_| ApiError::Unauthorized)?;
    let task = probe::parse_task(body)?;
    let started = clock::now_ms();
    Ok(match task {
        ProbeTask::Burn { iterations } => {
            let checksum = probe::burn(iterations);
            json!({"own_ms": clock::now_ms() - started, "checksum": checksum.to_string()})
        }
        ProbeTask::Fetch { url } => match fetch(&url).await {
            Ok(status) => json!({"own_ms": clock::now_ms() - started, "status": status}),
            Err(e) => json!({"own_ms": clock::now_ms() - started, "error": e}),
        },
    })
}

/// `GET url` once, redirects not followed, given up after `FETCH_TIMEOUT_MS`.
async fn fetch(url: &str) -> Result<u16, String> {
    let signal = web_sys::AbortSignal::timeout_with_u32(FETCH_TIMEOUT_MS);
    let init = web_sys::RequestInit::new();
    init.set_method("GET");
    init.set_redirect(web_sys::RequestRedirect::Manual);
    init.set_signal(Some(&signal));
    let request = web_sys::Request::new_with_str_and_init(url, &init)
        .map_err(|e| format!("cannot build the request: {e:?}"))?;
    let mut response = worker::Fetch::Request(Request::from(request))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    // Read to the end: the connection is held until the body is consumed.
    let _ = response.bytes().await;
    Ok(response.status_code())
}
