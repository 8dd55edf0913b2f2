//! `PUT /subjects`, `GET /subjects`, `GET /subjects/{id}`, `DELETE /subjects/{id}`:
//! what schedules (and `POST /batches {"source": "subjects"}`) cover.

use serde_json::{json, Value};

use super::{keys_view, next_after, ApiResult, App};
use crate::core::batch::requests::{
    parse_json, parse_page_query, validate_id, validate_put_subjects, PutSubjects,
};
use crate::core::batch::rows::SubjectRow;
use crate::core::error::ApiError;
use crate::core::security::target::TargetPolicy;
use crate::core::time::rfc3339;
use crate::jobs::Jobs;
use crate::store::Db;

/// Upsert up to 1,000 subjects in one statement, all validated first; webhook
/// targets under `policy`. Each stores the limit keys it holds: its `limits` and
/// its kind's for its payload (`Job::limit_keys`), read now since the payload is
/// fixed until the next PUT; its items copy them when enqueued.
pub async fn put<D: Db>(app: &App<'_, D>, body: &[u8], policy: &TargetPolicy<'_>) -> ApiResult {
    let mut body: PutSubjects = parse_json(body)?;
    validate_put_subjects(&mut body, &|kind, payload| {
        app.jobs.check_item(kind, payload, policy)
    })?;
    let n = app.store.upsert_subjects(&body.subjects, app.now).await?;
    Ok((200, json!({ "upserted": n })))
}

/// One page in id order; `next_after` is set when the page is full.
pub async fn list<D: Db>(app: &App<'_, D>, query: &[(String, String)]) -> ApiResult {
    let q = parse_page_query(query, false)?;
    let rows = app.store.list_subjects(&q.after, q.limit).await?;
    let next = next_after(&rows, q.limit, |r| &r.id);
    Ok((
        200,
        json!({ "subjects": rows.iter().map(|s| subject_json(app.jobs, s)).collect::<Vec<_>>(), "next_after": next }),
    ))
}

pub async fn get<D: Db>(app: &App<'_, D>, id: &str) -> ApiResult {
    validate_id("id", id)?;
    match app.store.get_subject(id).await? {
        Some(row) => Ok((200, subject_json(app.jobs, &row))),
        None => Err(ApiError::NotFound(format!("subject {id:?}"))),
    }
}

pub async fn delete<D: Db>(app: &App<'_, D>, id: &str) -> ApiResult {
    validate_id("id", id)?;
    if app.store.delete_subject(id).await? {
        Ok((200, json!({ "deleted": id })))
    } else {
        Err(ApiError::NotFound(format!("subject {id:?}")))
    }
}

fn subject_json(jobs: &Jobs, s: &SubjectRow) -> Value {
    json!({
        "id": s.id,
        "kind": s.kind,
        "payload": jobs.public_payload(
            &s.kind,
            serde_json::from_str::<Value>(&s.payload).unwrap_or(Value::Null),
        ),
        "active": s.active == 1,
        "group": s.group_name,
        "timezone": s.timezone,
        "limits": keys_view(s.limits.as_deref()),
        "created_at": rfc3339(s.created_at),
        "updated_at": rfc3339(s.updated_at),
    })
}
