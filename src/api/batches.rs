//! `POST /batches`, `GET /batches`, `GET /batches/{id}`, `GET /batches/{id}/items`:
//! ad-hoc batches and progress.

use serde_json::{json, Value};

use super::{limit_only, next_after, to_json, ApiResult, App};
use crate::core::error::ApiError;
use crate::core::model::{BatchProgress, ItemRow};
use crate::core::requests::{
    parse_json, parse_page_query, validate_create_batch, CreateBatch, CreateBatchBody,
};
use crate::core::target::TargetPolicy;
use crate::core::time::rfc3339;
use crate::jobs;
use crate::store::{BatchSource, Created, Db};

/// Create a batch from active subjects or explicit items: 201 with the new batch,
/// or 200 with the existing batch of that key (nothing added).
pub async fn create<D: Db>(app: &App<'_, D>, body: &[u8], policy: &TargetPolicy<'_>) -> ApiResult {
    let body: CreateBatchBody = parse_json(body)?;
    let request = validate_create_batch(body, &|kind, payload| {
        jobs::check_payload(kind, payload, policy)
    })?;
    let id = (app.new_id)();
    let (key, source) = match &request {
        CreateBatch::FromSubjects { key } => (key.clone(), BatchSource::ActiveSubjects),
        CreateBatch::FromItems { key, items } => (key.clone(), BatchSource::Items(items)),
    };
    let key = key.unwrap_or_else(|| format!("adhoc:{id}"));
    let created = app
        .store
        .create_batch(&id, &key, app.now, app.settings.max_attempts, source)
        .await?;
    let (status, event, row) = match created {
        Created::New(row) => (201, "batch_created", row),
        Created::Existing(row) => (200, "batch_exists", row),
    };
    (app.event)(
        event,
        json!({ "batch_id": row.id, "key": row.key, "total": row.total }),
    );
    Ok((status, to_json(&BatchProgress::from_row(&row))))
}

/// Newest first, `limit` only: batches are few, so they are not paged.
pub async fn list<D: Db>(app: &App<'_, D>, query: &[(String, String)]) -> ApiResult {
    let limit = limit_only(query, "batches")?;
    let rows = app.store.list_batches(limit).await?;
    let batches: Vec<BatchProgress> = rows.iter().map(BatchProgress::from_row).collect();
    Ok((200, json!({ "batches": batches })))
}

pub async fn get<D: Db>(app: &App<'_, D>, id: &str) -> ApiResult {
    match app.store.get_batch(id).await? {
        Some(row) => Ok((200, to_json(&BatchProgress::from_row(&row)))),
        None => Err(ApiError::NotFound(format!("batch {id:?}"))),
    }
}

/// One page of a batch's items in subject_id order, optionally of one status.
pub async fn items<D: Db>(app: &App<'_, D>, id: &str, query: &[(String, String)]) -> ApiResult {
    let q = parse_page_query(query, true)?;
    if app.store.get_batch(id).await?.is_none() {
        return Err(ApiError::NotFound(format!("batch {id:?}")));
    }
    let rows = app
        .store
        .list_batch_items(id, &q.after, q.status, q.limit)
        .await?;
    let next = next_after(&rows, q.limit, |r| &r.subject_id);
    Ok((
        200,
        json!({ "items": rows.iter().map(item_json).collect::<Vec<_>>(), "next_after": next }),
    ))
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
