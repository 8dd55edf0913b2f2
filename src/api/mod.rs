//! The HTTP API without the runtime: the route table, admin auth, and handlers
//! generic over the store, so every route runs on the host against SQLite
//! (`tests/api_*.rs`) exactly as on the Worker against D1.
//!
//! The edge (`edge::http`) turns a `worker::Request` into a [`Request`], finds its
//! route ([`routes::find`]), answers `Health` and `Run` itself, and hands admin
//! routes to [`serve`] with an [`App`] (store, settings, clock and id source) and a
//! [`BodySource`] it reads only once the caller is admitted.

pub mod auth;
pub mod batches;
pub mod control;
pub mod invocations;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod page;
pub mod probe;
pub mod request;
pub mod routes;
pub mod schedules;
pub mod subjects;

use serde::Serialize;
use serde_json::{json, Value};

use crate::core::batch::control::Control;
use crate::core::batch::requests::{parse_page_query, MAX_BODY_BYTES};
use crate::core::error::ApiError;
use crate::core::security::target::TargetPolicy;
use crate::core::settings::Settings;
use crate::jobs::Jobs;
use crate::store::{Db, Store, StoreError};
pub use request::{Method, Request};
use routes::{Body, Handler, Query, Route, Target};

/// A handler's answer: status and JSON body.
pub type ApiResult = Result<(u16, Value), ApiError>;

/// What a handler may use besides the request: everything the edge would otherwise
/// read from the runtime is an argument, so host tests choose time and ids.
pub struct App<'a, D: Db> {
    pub store: &'a Store<D>,
    pub settings: &'a Settings,
    /// `ADMIN_TOKEN`, compared in constant time by [`auth::admin`].
    pub admin_token: &'a str,
    /// `METRICS_TOKEN`, if set: admitted on `GET /metrics` only ([`auth::metrics`]).
    pub metrics_token: Option<&'a str>,
    /// Milliseconds since the epoch, read once per request.
    pub now: i64,
    /// A fresh random id (batch ids).
    pub new_id: &'a dyn Fn() -> String,
    /// A structured log line (`edge::log::event` on the Worker): name and fields.
    pub event: &'a dyn Fn(&str, Value),
    /// The job kinds subjects and items may name (payload validation, listings).
    pub jobs: &'a Jobs,
    /// The service bindings a `service` item may name: those of `SERVICE_BINDINGS`
    /// that are bound to this Worker (the edge looks them up).
    pub services: &'a [String],
}

/// What [`serve`] (and [`page::serve`]) answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Served {
    Json(u16, Value),
    /// Anything but JSON: the dashboard's files, the metrics text.
    Text(Text),
    /// `POST /probe`, admitted and validated; its SELF calls need the runtime, so
    /// the edge runs them (`edge::probe`).
    Probe(probe::ProbeRequest),
}

/// A non-JSON answer: status, content type, extra headers (e.g. the page's
/// Content-Security-Policy) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, &'static str)>,
    pub body: String,
}

impl From<(u16, Value)> for Served {
    fn from((status, body): (u16, Value)) -> Served {
        Served::Json(status, body)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::Internal(e.to_string())
    }
}

/// A request body not read yet: the runtime's stream on the Worker, bytes in
/// memory on the host.
#[allow(async_fn_in_trait)]
pub trait BodySource {
    /// The whole body, or 413 `payload_too_large` when it is over `limit` bytes.
    async fn read(self, limit: usize) -> Result<Vec<u8>, ApiError>;
}

impl BodySource for &[u8] {
    async fn read(self, limit: usize) -> Result<Vec<u8>, ApiError> {
        if self.len() > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        Ok(self.to_vec())
    }
}

/// `GET /health`.
pub fn health() -> (u16, Value) {
    (200, json!({ "ok": true }))
}

/// Answer an admin route: admin token (401), query policy (400), JSON body
/// (415, then read under the limit: 413), then the handler. Nothing is read or
/// written before the caller is admitted; handlers validate everything before
/// they write.
pub async fn serve<D: Db>(
    app: &App<'_, D>,
    route: &Route,
    req: &Request,
    body: impl BodySource,
) -> Result<Served, ApiError> {
    let Target::Admin(admin) = route.target else {
        // Health, Run, Page and OpenApi are answered by the edge, which needs no App for them.
        return Err(ApiError::Internal(format!(
            "{} {} is not an admin route",
            route.method.as_str(),
            route.path
        )));
    };
    match admin.handler {
        Handler::Metrics => auth::metrics(
            req.authorization.as_deref(),
            app.admin_token,
            app.metrics_token,
        )?,
        _ => auth::admin(req.authorization.as_deref(), app.admin_token)?,
    }
    if admin.query == Query::Refused {
        refuse_query(&req.query)?;
    }
    let body = match admin.body {
        Body::Json => {
            require_json(req.content_type.as_deref())?;
            body.read(MAX_BODY_BYTES).await?
        }
        Body::Unread => Vec::new(),
    };
    let params = route.params(&req.segments);
    let query = &req.query;
    // Where webhooks written by this request may point.
    let policy = TargetPolicy {
        allow_private: app.settings.allow_private_targets,
        own_host: req.host.as_deref(),
        own_hostnames: &app.settings.own_hostnames,
        services: app.services,
    };
    Ok(match admin.handler {
        Handler::PutSubjects => subjects::put(app, &body, &policy).await?.into(),
        Handler::ListSubjects => subjects::list(app, query).await?.into(),
        Handler::GetSubject => subjects::get(app, params[0]).await?.into(),
        Handler::DeleteSubject => subjects::delete(app, params[0]).await?.into(),
        Handler::CreateBatch => batches::create(app, &body, &policy).await?.into(),
        Handler::ListBatches => batches::list(app, query).await?.into(),
        Handler::GetBatch => batches::get(app, params[0]).await?.into(),
        Handler::ListItems => batches::items(app, params[0], query).await?.into(),
        Handler::PauseBatch => control::control(app, params[0], Control::Pause)
            .await?
            .into(),
        Handler::ResumeBatch => control::control(app, params[0], Control::Resume)
            .await?
            .into(),
        Handler::CancelBatch => control::control(app, params[0], Control::Cancel)
            .await?
            .into(),
        Handler::RetryBatch => control::retry_batch(app, params[0], &body).await?.into(),
        Handler::RetryItem => control::retry_item(app, params[0]).await?.into(),
        Handler::ListInvocations => invocations::list(app, query).await?.into(),
        Handler::Timeline => batches::timeline(app, params[0], query).await?.into(),
        Handler::Metrics => Served::Text(metrics::get(app).await?),
        Handler::PutSchedule => schedules::put(app, params[0], &body, &policy).await?.into(),
        Handler::ListSchedules => schedules::list(app, query).await?.into(),
        Handler::GetSchedule => schedules::get(app, params[0]).await?.into(),
        Handler::DeleteSchedule => schedules::delete(app, params[0]).await?.into(),
        Handler::PutLimit => limits::put(app, params[0], &body).await?.into(),
        Handler::ListLimits => limits::list(app, query).await?.into(),
        Handler::GetLimit => limits::get(app, params[0]).await?.into(),
        Handler::DeleteLimit => limits::delete(app, params[0]).await?.into(),
        Handler::LiftPause => limits::lift_pause(app, params[0]).await?.into(),
        Handler::Probe => Served::Probe(probe::parse(&body, &policy)?),
    })
}

/// The error a caller gets when the Worker's settings or secrets are invalid
/// (`detail` names the variable and the rule). Only the admin learns the detail:
/// an admin route with a usable `admin_token` checks the caller first (401), and
/// everyone else gets a generic 500 `internal`. The edge logs the detail either way.
pub fn misconfigured(
    route: &Route,
    authorization: Option<&str>,
    admin_token: Option<&str>,
    detail: String,
) -> ApiError {
    match (route.target, admin_token) {
        (Target::Admin(_), Some(token)) => match auth::admin(authorization, token) {
            Ok(()) => ApiError::Misconfigured(detail),
            Err(e) => e,
        },
        _ => ApiError::Internal(detail),
    }
}

/// A JSON body must say so; checked before the body is read.
fn require_json(content_type: Option<&str>) -> Result<(), ApiError> {
    match content_type {
        Some(ct) if ct.to_ascii_lowercase().contains("json") => Ok(()),
        _ => Err(ApiError::UnsupportedMediaType),
    }
}

fn refuse_query(query: &[(String, String)]) -> Result<(), ApiError> {
    match query.first() {
        Some((name, _)) => Err(ApiError::bad_request(
            "invalid_query",
            format!("unknown query parameter {name:?}"),
        )),
        None => Ok(()),
    }
}

/// The `limit` of a listing that is not paged by `after` (newest first, few rows).
fn limit_only(query: &[(String, String)], what: &str) -> Result<i64, ApiError> {
    let q = parse_page_query(query, false)?;
    if !q.after.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("{what} are not paged by \"after\"; use limit"),
        ));
    }
    Ok(q.limit)
}

/// A listing's `next_after`: the last row's key when the page is full (there may be
/// more), else none.
fn next_after<T>(rows: &[T], limit: i64, key: impl Fn(&T) -> &str) -> Option<String> {
    (rows.len() as i64 == limit)
        .then(|| rows.last().map(|r| key(r).to_string()))
        .flatten()
}

fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A subject's or item's limit keys as listings show them: always an array
/// (`[]` for none, as stored NULL).
fn keys_view(stored: Option<&str>) -> Value {
    stored
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .filter(Value::is_array)
        .unwrap_or_else(|| json!([]))
}
