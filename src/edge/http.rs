//! The HTTP glue: `worker::Request` → [`api::Request`] → route → `Response`. Routing,
//! auth and the handlers live in `crate::api` (host-tested); this file keeps only
//! what needs the runtime: the config and D1 binding, the child side of
//! `POST /internal/run`, the probe's SELF calls and children, and the body (`body.rs`). Every
//! failure is an [`ApiError`] turned into a JSON response in one place (`handle`);
//! internal detail goes to the log only.

use std::rc::Rc;

use serde_json::{json, Value};
use worker::{Env, Headers, Request, Response};

use super::body::{self, WorkerBody};
use super::config::Config;
use super::{clock, log, probe, run};
use crate::api::routes::{self, Route, Target};
use crate::api::{self, App, Method, Served};
use crate::core::batch::model::Ran;
use crate::core::batch::receipts;
use crate::core::batch::requests::MAX_BODY_BYTES;
use crate::core::drain::dispatch;
use crate::core::error::ApiError;
use crate::jobs::Jobs;
use crate::store::d1::D1Db;
use crate::store::Store;

/// Rows D1 reported reading for an admin request (`meta.rows_read`, summed over its
/// statements): what the request cost, measured by `loadtest bench`.
pub const ROWS_READ_HEADER: &str = "Fanout-D1-Rows-Read";

/// What a route answers: JSON for the API, text for the dashboard and metrics,
/// bare headers for a child's outcome.
enum Reply {
    Json(u16, Value),
    Text(api::Text),
    Outcome(Ran),
}

pub async fn handle(req: Request, env: Env, jobs: &Jobs) -> worker::Result<Response> {
    let mut rows_read = None;
    let result = respond(&req, &env, jobs, &mut rows_read).await;
    if result.is_err() {
        body::discard(&req).await;
    }
    let (status, body) = match result {
        Ok(Reply::Json(status, body)) => (status, body),
        Ok(Reply::Outcome(outcome)) => return outcome_response(&outcome),
        Ok(Reply::Text(text)) => return text_response(text, rows_read),
        Err(e) => {
            if let ApiError::Internal(detail) | ApiError::Misconfigured(detail) = &e {
                log::error(
                    "request_failed",
                    json!({ "method": req.method().to_string(), "path": req.path(), "message": detail }),
                );
            }
            (e.status(), e.body())
        }
    };
    let mut response = Response::from_json(&body)?.with_status(status);
    // Added to from_json's headers: `with_headers` would replace its Content-Type.
    if let Some(n) = rows_read {
        response
            .headers_mut()
            .set(ROWS_READ_HEADER, &n.to_string())?;
    }
    Ok(response)
}

async fn respond(
    req: &Request,
    env: &Env,
    jobs: &Jobs,
    rows_read: &mut Option<i64>,
) -> Result<Reply, ApiError> {
    let url = req.url().map_err(|e| ApiError::Internal(e.to_string()))?;
    let method = Method::parse(req.method().as_ref());
    let mut request = api::Request::new(method, url.path(), url.query().unwrap_or(""));
    let route = routes::find(method, &request.segments)?;
    request.authorization = header(req, "Authorization");
    match route.target {
        Target::Health => {
            let (status, body) = api::health();
            Ok(Reply::Json(status, body))
        }
        Target::Page(asset) => Ok(Reply::Text(api::page::serve(asset))),
        Target::OpenApi => Ok(Reply::Text(api::openapi::serve())),
        Target::Run => {
            let cfg = config(env, route, &request)?;
            // The signature's shape and age first, from the body's first line: no
            // more of a request that cannot be valid is read.
            let (signature, item) =
                body::read_dispatch(req, MAX_BODY_BYTES, |line| run::admit(line, &cfg)).await?;
            let runner = run::Runner { jobs, env };
            Ok(Reply::Outcome(
                run::handle(&item, &signature, &cfg, runner).await?,
            ))
        }
        Target::ProbeTask => {
            let cfg = config(env, route, &request)?;
            let (signature, task) =
                body::read_dispatch(req, MAX_BODY_BYTES, |line| run::admit(line, &cfg)).await?;
            Ok(Reply::Json(
                200,
                probe::task(&task, &signature, &cfg).await?,
            ))
        }
        Target::Admin(_) => {
            let cfg = config(env, route, &request)?;
            request.content_type = header(req, "Content-Type");
            request.host = url
                .host_str()
                .map(|h| format!("{h}:{}", url.port_or_known_default().unwrap_or(0)));
            admin(req, env, jobs, &cfg, route, &request, rows_read).await
        }
    }
}

/// The isolate's configuration; when it is invalid, only an admin learns why.
fn config(env: &Env, route: &Route, request: &api::Request) -> Result<Rc<Config>, ApiError> {
    Config::get(env).map_err(|e| {
        api::misconfigured(
            route,
            request.authorization.as_deref(),
            e.admin_token.as_deref(),
            e.message,
        )
    })
}

/// An admin route: the shared `api::serve` against D1.
async fn admin(
    req: &Request,
    env: &Env,
    jobs: &Jobs,
    cfg: &Config,
    route: &Route,
    request: &api::Request,
    rows_read: &mut Option<i64>,
) -> Result<Reply, ApiError> {
    let db = env
        .d1("DB")
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let store = Store::new(D1Db::new(db))
        .with_kind_attempts(jobs.max_attempts_by_kind())
        .with_learning(cfg.settings.learn_limits);
    // A `service` item may name a binding SERVICE_BINDINGS lists and the Worker has.
    let services: Vec<String> = cfg
        .settings
        .service_bindings
        .iter()
        .filter(|name| env.service(name).is_ok())
        .cloned()
        .collect();
    let app = App {
        store: &store,
        settings: &cfg.settings,
        admin_token: &cfg.secrets.admin_token,
        metrics_token: cfg.secrets.metrics_token.as_deref(),
        now: clock::now_ms(),
        new_id: &clock::short_id,
        event: &log::event,
        jobs,
        services: &services,
    };
    let served = api::serve(&app, route, request, WorkerBody(req)).await;
    *rows_read = Some(store.usage().rows_read);
    match served? {
        Served::Json(status, body) => Ok(Reply::Json(status, body)),
        Served::Text(text) => Ok(Reply::Text(text)),
        Served::Probe(probe) => {
            let runner = run::Runner { jobs, env };
            Ok(Reply::Json(200, probe::run(runner, cfg, &probe).await?))
        }
    }
}

fn header(req: &Request, name: &str) -> Option<String> {
    req.headers().get(name).ok().flatten()
}

/// A child's answer: status 204, the outcome in headers (and its channels'
/// results, for kinds with channels), no body (core::dispatch, core::receipts).
fn outcome_response(ran: &Ran) -> worker::Result<Response> {
    let (kind, reason) = dispatch::encode(&ran.outcome);
    let headers = Headers::new();
    headers.set(dispatch::OUTCOME_HEADER, kind)?;
    if let Some(reason) = reason {
        headers.set(dispatch::REASON_HEADER, &reason)?;
    }
    if let Some(channels) = &ran.channels {
        headers.set(receipts::HEADER, &receipts::encode_header(channels))?;
    }
    if let Some(ms) = ran.retry_after_ms {
        headers.set(dispatch::RETRY_AFTER_HEADER, &ms.to_string())?;
    }
    if let Some(refused) = &ran.refused {
        headers.set(dispatch::REFUSED_HEADER, &dispatch::encode_refused(refused))?;
    }
    if let Some(paced) = &ran.paced {
        headers.set(dispatch::PACED_HEADER, &dispatch::encode_paced(paced))?;
    }
    if let Some(keys) = &ran.paced_keys {
        headers.set(
            dispatch::PACED_KEYS_HEADER,
            &dispatch::encode_paced_keys(keys),
        )?;
    }
    Ok(Response::empty()?
        .with_status(dispatch::OUTCOME_STATUS)
        .with_headers(headers))
}

/// A non-JSON answer with its content type and extra headers (and, for an admin
/// route such as `/metrics`, the rows it read).
fn text_response(text: api::Text, rows_read: Option<i64>) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("Content-Type", text.content_type)?;
    for (name, value) in text.headers {
        headers.set(name, value)?;
    }
    if let Some(n) = rows_read {
        headers.set(ROWS_READ_HEADER, &n.to_string())?;
    }
    Ok(Response::ok(text.body)?
        .with_status(text.status)
        .with_headers(headers))
}
