//! HTTP routing and handlers. Every failure is an [`ApiError`] turned into a JSON
//! response in one place (`handle`); internal detail goes to the log only.

use serde::Serialize;
use serde_json::{json, Value};
use worker::js_sys::Uint8Array;
use worker::wasm_bindgen_futures::JsFuture;
use worker::{Env, Headers, Method, Request, Response};

use super::config::Config;
use super::{clock, log, probe, run};
use crate::core::dispatch;
use crate::core::error::ApiError;
use crate::core::model::{BatchProgress, ItemRow, Outcome, SubjectRow};
use crate::core::requests::{
    parse_json, parse_page_query, validate_create_batch, validate_id, validate_put_subjects,
    CreateBatch, CreateBatchBody, PutSubjects, MAX_BODY_BYTES,
};
use crate::core::signature::constant_time_eq;
use crate::core::time::rfc3339;
use crate::jobs;
use crate::store::d1::D1Db;
use crate::store::{BatchSource, Created, Store, StoreError};

type ApiResult = Result<(u16, Value), ApiError>;

/// What a route answers: JSON for the API, bare headers for a child's outcome.
enum Reply {
    Json(u16, Value),
    Outcome(Outcome),
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::Internal(e.0)
    }
}

pub async fn handle(mut req: Request, env: Env) -> worker::Result<Response> {
    let method = req.method();
    let path = req.path();
    let result = route(&mut req, &env).await;
    let (status, body) = match result {
        Ok(Reply::Json(status, body)) => (status, body),
        Ok(Reply::Outcome(outcome)) => return outcome_response(&outcome),
        Err(e) => {
            if let ApiError::Internal(detail) | ApiError::Misconfigured(detail) = &e {
                log::error(
                    "request_failed",
                    json!({ "method": method.to_string(), "path": path, "message": detail }),
                );
            }
            (e.status(), e.body())
        }
    };
    Ok(Response::from_json(&body)?.with_status(status))
}

/// Query string pairs, decoded.
type Query = Vec<(String, String)>;

/// Decoded path segments and query pairs of the request URL.
fn parse_url(req: &Request) -> Result<(Vec<String>, Query), ApiError> {
    let url = req.url().map_err(|e| ApiError::Internal(e.to_string()))?;
    let segments = url
        .path_segments()
        .map(|segs| {
            segs.filter(|s| !s.is_empty())
                .map(|s| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8_lossy()
                        .into_owned()
                })
                .collect()
        })
        .unwrap_or_default();
    let query = url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    Ok((segments, query))
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

async fn route(req: &mut Request, env: &Env) -> Result<Reply, ApiError> {
    let (segments, query) = parse_url(req)?;
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method();
    // Routes are matched before auth, so unknown paths are 404 for everyone.
    let allowed = match segs.as_slice() {
        ["health"] => "GET",
        ["internal", "run"] => "POST",
        ["subjects"] => "GET, PUT",
        ["subjects", _] => "DELETE",
        ["batches"] => "GET, POST",
        ["batches", _] => "GET",
        ["batches", _, "items"] => "GET",
        ["invocations"] => "GET",
        ["probe"] => "POST",
        _ => return Err(ApiError::NotFound(format!("route {}", req.path()))),
    };
    if !allowed.split(", ").any(|m| m == method.to_string()) {
        return Err(ApiError::MethodNotAllowed { allowed });
    }
    if segs == ["health"] {
        return Ok(Reply::Json(200, json!({ "ok": true })));
    }
    let cfg = Config::get(env).map_err(ApiError::Misconfigured)?;
    if segs == ["internal", "run"] {
        let item = match req.headers().get(dispatch::ITEM_HEADER).ok().flatten() {
            Some(value) => dispatch::item_from_header(&value),
            None => read_body(req).await?,
        };
        return Ok(Reply::Outcome(run::handle(&item, req, &cfg).await?));
    }
    authorize(req, &cfg)?;
    let store = Store::new(D1Db::new(
        env.d1("DB")
            .map_err(|e| ApiError::Internal(e.to_string()))?,
    ));
    let (status, body) = match (method, segs.as_slice()) {
        (Method::Put, ["subjects"]) => put_subjects(req, &store).await,
        (Method::Get, ["subjects"]) => list_subjects(&store, &query).await,
        (Method::Delete, ["subjects", id]) => delete_subject(&store, id).await,
        (Method::Post, ["batches"]) => create_batch(req, &store, &cfg, &query).await,
        (Method::Get, ["batches"]) => list_batches(&store, &query).await,
        (Method::Get, ["batches", id]) => get_batch(&store, id, &query).await,
        (Method::Get, ["batches", id, "items"]) => list_items(&store, id, &query).await,
        (Method::Get, ["invocations"]) => list_invocations(&store, &query).await,
        (Method::Post, ["probe"]) => {
            no_query(&query)?;
            let body: probe::ProbeRequest = parse_json(&json_body(req).await?)?;
            probe::validate(&body)?;
            Ok((200, probe::run(env, &body).await?))
        }
        _ => Err(ApiError::MethodNotAllowed { allowed }),
    }?;
    Ok(Reply::Json(status, body))
}

fn authorize(req: &Request, cfg: &Config) -> Result<(), ApiError> {
    let header = req
        .headers()
        .get("Authorization")
        .ok()
        .flatten()
        .unwrap_or_default();
    let token = header.strip_prefix("Bearer ").unwrap_or("");
    if constant_time_eq(token.as_bytes(), cfg.admin_token.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// The raw body, refused early by Content-Length when it is over the limit.
async fn read_body(req: &mut Request) -> Result<Vec<u8>, ApiError> {
    let declared = req
        .headers()
        .get("Content-Length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(ApiError::PayloadTooLarge {
            limit: MAX_BODY_BYTES,
        });
    }
    // The platform's own arrayBuffer(): worker's bytes() reads the stream chunk by
    // chunk through Rust, measurably slower on the dispatch hot path.
    let promise = req
        .inner()
        .array_buffer()
        .map_err(|e| ApiError::Internal(format!("{e:?}")))?;
    let buffer = JsFuture::from(promise)
        .await
        .map_err(|e| ApiError::Internal(format!("{e:?}")))?;
    let body = Uint8Array::new(&buffer).to_vec();
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::PayloadTooLarge {
            limit: MAX_BODY_BYTES,
        });
    }
    Ok(body)
}

/// A JSON request body; the Content-Type must say JSON.
async fn json_body(req: &mut Request) -> Result<Vec<u8>, ApiError> {
    let content_type = req
        .headers()
        .get("Content-Type")
        .ok()
        .flatten()
        .unwrap_or_default();
    if !content_type.to_ascii_lowercase().contains("json") {
        return Err(ApiError::UnsupportedMediaType);
    }
    read_body(req).await
}

fn no_query(query: &[(String, String)]) -> Result<(), ApiError> {
    match query.first() {
        Some((name, _)) => Err(ApiError::bad_request(
            "invalid_query",
            format!("unknown query parameter {name:?}"),
        )),
        None => Ok(()),
    }
}

fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

async fn put_subjects(req: &mut Request, store: &Store<D1Db>) -> ApiResult {
    let body: PutSubjects = parse_json(&json_body(req).await?)?;
    validate_put_subjects(&body, &jobs::check_payload)?;
    let n = store
        .upsert_subjects(&body.subjects, clock::now_ms())
        .await?;
    Ok((200, json!({ "upserted": n })))
}

fn subject_json(s: &SubjectRow) -> Value {
    json!({
        "id": s.id,
        "kind": s.kind,
        "payload": serde_json::from_str::<Value>(&s.payload).unwrap_or(Value::Null),
        "active": s.active == 1,
        "created_at": rfc3339(s.created_at),
        "updated_at": rfc3339(s.updated_at),
    })
}

async fn list_subjects(store: &Store<D1Db>, query: &[(String, String)]) -> ApiResult {
    let q = parse_page_query(query, false)?;
    let rows = store.list_subjects(&q.after, q.limit).await?;
    let next = (rows.len() as i64 == q.limit)
        .then(|| rows.last().map(|r| r.id.clone()))
        .flatten();
    Ok((
        200,
        json!({ "subjects": rows.iter().map(subject_json).collect::<Vec<_>>(), "next_after": next }),
    ))
}

async fn delete_subject(store: &Store<D1Db>, id: &str) -> ApiResult {
    validate_id("id", id)?;
    if store.delete_subject(id).await? {
        Ok((200, json!({ "deleted": id })))
    } else {
        Err(ApiError::NotFound(format!("subject {id:?}")))
    }
}

async fn create_batch(
    req: &mut Request,
    store: &Store<D1Db>,
    cfg: &Config,
    query: &[(String, String)],
) -> ApiResult {
    no_query(query)?;
    let body: CreateBatchBody = parse_json(&json_body(req).await?)?;
    let request = validate_create_batch(body, &jobs::check_payload)?;
    let id = clock::random_id();
    let (key, source) = match &request {
        CreateBatch::FromSubjects { key } => (key.clone(), BatchSource::ActiveSubjects),
        CreateBatch::FromItems { key, items } => (key.clone(), BatchSource::Items(items)),
    };
    let key = key.unwrap_or_else(|| format!("adhoc:{id}"));
    let created = store
        .create_batch(
            &id,
            &key,
            clock::now_ms(),
            cfg.settings.max_attempts,
            source,
        )
        .await?;
    let (status, row) = match created {
        Created::New(row) => (201, row),
        Created::Existing(row) => (200, row),
    };
    log::event(
        if status == 201 {
            "batch_created"
        } else {
            "batch_exists"
        },
        json!({ "batch_id": row.id, "key": row.key, "total": row.total }),
    );
    Ok((status, to_json(&BatchProgress::from_row(&row))))
}

async fn list_batches(store: &Store<D1Db>, query: &[(String, String)]) -> ApiResult {
    let q = parse_page_query(query, false)?;
    if !q.after.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_query",
            "batches are not paged by \"after\"; use limit",
        ));
    }
    let rows = store.list_batches(q.limit).await?;
    let batches: Vec<BatchProgress> = rows.iter().map(BatchProgress::from_row).collect();
    Ok((200, json!({ "batches": batches })))
}

async fn get_batch(store: &Store<D1Db>, id: &str, query: &[(String, String)]) -> ApiResult {
    no_query(query)?;
    match store.get_batch(id).await? {
        Some(row) => Ok((200, to_json(&BatchProgress::from_row(&row)))),
        None => Err(ApiError::NotFound(format!("batch {id:?}"))),
    }
}

fn item_json(i: &ItemRow) -> Value {
    json!({
        "id": i.id,
        "subject_id": i.subject_id,
        "kind": i.kind,
        "status": i.status,
        "attempt": i.attempt,
        "max_attempts": i.max_attempts,
        "last_error": i.last_error,
        "run_after": rfc3339(i.run_after),
        "started_at": i.started_at.map(rfc3339),
        "completed_at": i.completed_at.map(rfc3339),
    })
}

async fn list_items(store: &Store<D1Db>, id: &str, query: &[(String, String)]) -> ApiResult {
    let q = parse_page_query(query, true)?;
    if store.get_batch(id).await?.is_none() {
        return Err(ApiError::NotFound(format!("batch {id:?}")));
    }
    let rows = store
        .list_batch_items(id, &q.after, q.status, q.limit)
        .await?;
    let next = (rows.len() as i64 == q.limit)
        .then(|| rows.last().map(|r| r.subject_id.clone()))
        .flatten();
    Ok((
        200,
        json!({ "items": rows.iter().map(item_json).collect::<Vec<_>>(), "next_after": next }),
    ))
}

async fn list_invocations(store: &Store<D1Db>, query: &[(String, String)]) -> ApiResult {
    let q = parse_page_query(query, false)?;
    if !q.after.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_query",
            "invocations are not paged by \"after\"; use limit",
        ));
    }
    let mut rows = store.list_invocations(q.limit).await?;
    for row in &mut rows {
        if let Some(ms) = row.get("started_at").and_then(Value::as_i64) {
            row["started_at"] = json!(rfc3339(ms));
        }
    }
    Ok((200, json!({ "invocations": rows })))
}
