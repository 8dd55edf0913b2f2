//! The HTTP glue: `worker::Request` → [`api::Request`] → route → `Response`. Routing,
//! auth and the handlers live in `crate::api` (host-tested); this file keeps only
//! what needs the runtime: reading the body, the config and D1 binding, the child
//! side of `POST /internal/run` and the probe's SELF calls. Every failure is an
//! [`ApiError`] turned into a JSON response in one place (`handle`); internal detail
//! goes to the log only.

use serde_json::{json, Value};
use worker::js_sys::Uint8Array;
use worker::wasm_bindgen_futures::JsFuture;
use worker::{Env, Headers, Request, Response};

use super::config::Config;
use super::{clock, log, probe, run};
use crate::api::routes::{self, Route, Target};
use crate::api::{self, App, BodySource, Method, Served};
use crate::core::dispatch;
use crate::core::error::ApiError;
use crate::core::model::Outcome;
use crate::core::requests::MAX_BODY_BYTES;
use crate::store::d1::D1Db;
use crate::store::Store;

/// What a route answers: JSON for the API, bare headers for a child's outcome.
enum Reply {
    Json(u16, Value),
    Outcome(Outcome),
}

pub async fn handle(mut req: Request, env: Env) -> worker::Result<Response> {
    let result = respond(&mut req, &env).await;
    let (status, body) = match result {
        Ok(Reply::Json(status, body)) => (status, body),
        Ok(Reply::Outcome(outcome)) => return outcome_response(&outcome),
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
    Ok(Response::from_json(&body)?.with_status(status))
}

async fn respond(req: &mut Request, env: &Env) -> Result<Reply, ApiError> {
    let url = req.url().map_err(|e| ApiError::Internal(e.to_string()))?;
    let method = Method::parse(req.method().as_ref());
    let mut request = api::Request::new(method, url.path(), url.query().unwrap_or(""));
    let route = routes::find(method, &request.segments)?;
    match route.target {
        Target::Health => {
            let (status, body) = api::health();
            Ok(Reply::Json(status, body))
        }
        Target::Run => {
            let cfg = Config::get(env).map_err(ApiError::Misconfigured)?;
            let item = match header(req, dispatch::ITEM_HEADER) {
                Some(value) => dispatch::item_from_header(&value),
                None => WorkerBody(req).read(MAX_BODY_BYTES).await?,
            };
            Ok(Reply::Outcome(run::handle(&item, req, &cfg).await?))
        }
        Target::Admin(_) => {
            request.authorization = header(req, "Authorization");
            request.content_type = header(req, "Content-Type");
            admin(req, env, route, &request).await
        }
    }
}

/// An admin route: the shared `api::serve` against D1.
async fn admin(
    req: &mut Request,
    env: &Env,
    route: &Route,
    request: &api::Request,
) -> Result<Reply, ApiError> {
    let cfg = Config::get(env).map_err(ApiError::Misconfigured)?;
    let db = env
        .d1("DB")
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let store = Store::new(D1Db::new(db));
    let app = App {
        store: &store,
        settings: &cfg.settings,
        admin_token: &cfg.admin_token,
        now: clock::now_ms(),
        new_id: &clock::random_id,
        event: &log::event,
    };
    match api::serve(&app, route, request, WorkerBody(req)).await? {
        Served::Json(status, body) => Ok(Reply::Json(status, body)),
        Served::Probe(probe) => Ok(Reply::Json(200, probe::run(env, &probe).await?)),
    }
}

fn header(req: &Request, name: &str) -> Option<String> {
    req.headers().get(name).ok().flatten()
}

/// The body of a runtime request, refused early by Content-Length when it is over
/// the limit.
struct WorkerBody<'a>(&'a mut Request);

impl BodySource for WorkerBody<'_> {
    async fn read(self, limit: usize) -> Result<Vec<u8>, ApiError> {
        let declared = header(self.0, "Content-Length").and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        // The platform's own arrayBuffer(): worker's bytes() reads the stream chunk by
        // chunk through Rust, measurably slower on the dispatch hot path.
        let promise = self
            .0
            .inner()
            .array_buffer()
            .map_err(|e| ApiError::Internal(format!("{e:?}")))?;
        let buffer = JsFuture::from(promise)
            .await
            .map_err(|e| ApiError::Internal(format!("{e:?}")))?;
        let body = Uint8Array::new(&buffer).to_vec();
        if body.len() > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        Ok(body)
    }
}

/// A child's answer: status 204, the outcome in headers, no body (core::dispatch).
fn outcome_response(outcome: &Outcome) -> worker::Result<Response> {
    let (kind, reason) = dispatch::encode(outcome);
    let headers = Headers::new();
    headers.set(dispatch::OUTCOME_HEADER, kind)?;
    if let Some(reason) = reason {
        headers.set(dispatch::REASON_HEADER, &reason)?;
    }
    Ok(Response::empty()?
        .with_status(dispatch::OUTCOME_STATUS)
        .with_headers(headers))
}
