//! `PUT /schedules/{id}`, `GET /schedules`, `GET /schedules/{id}`,
//! `DELETE /schedules/{id}`: cron, interval and one-off schedules, fired by the
//! minute tick (`Store::fire_due`).

use serde_json::json;

use super::{next_after, to_json, ApiResult, App};
use crate::core::batch::requests::{parse_json, parse_page_query, validate_id};
use crate::core::error::ApiError;
use crate::core::schedule::body::{validate_schedule, validate_schedule_id, ScheduleBody};
use crate::core::schedule::plan::{next_fire_at, zones_for};
use crate::core::schedule::{ScheduleView, Zone};
use crate::core::security::target::TargetPolicy;
use crate::store::{Db, StoreError};

/// Create (201) or replace (200) a schedule, answering it with its `next_fire_at`.
/// Everything is validated before anything is written, `on_finish` under the
/// webhook target `policy`. A new schedule may not take an id that batches it did
/// not make already use as their key prefix: its keys (`<id>:<date or instant>`)
/// could collide with theirs.
pub async fn put<D: Db>(
    app: &App<'_, D>,
    id: &str,
    body: &[u8],
    policy: &TargetPolicy<'_>,
) -> ApiResult {
    validate_schedule_id(id)?;
    let mut body: ScheduleBody = parse_json(body)?;
    let on_finish = body.on_finish.take();
    let spec = validate_schedule(body, app.now)?;
    let on_finish = on_finish.map(|o| o.validate(policy)).transpose()?;
    let exists = app.store.get_schedule(id).await?.is_some();
    if !exists && app.store.key_prefix_used_by_others(id).await? {
        return Err(ApiError::bad_request(
            "reserved_id",
            format!("batches not made by a schedule already use the key prefix \"{id}:\"; choose another schedule id"),
        ));
    }
    // On each subject's time, the first fire is the earliest across the zones of
    // the subjects it covers.
    let zones = match spec.zone {
        Zone::Subject => {
            let in_use = app.store.zones_in_use(spec.group.as_deref()).await?;
            zones_for(spec.group.as_deref(), &in_use)
        }
        Zone::Named(_) => Vec::new(),
    };
    let next = next_fire_at(&spec, app.now, &zones);
    let row = app
        .store
        .upsert_schedule(id, &spec, next, app.now, on_finish.as_deref())
        .await?
        .ok_or_else(|| StoreError::Missing(format!("schedule {id:?}, right after writing it,")))?;
    Ok((
        if exists { 200 } else { 201 },
        to_json(&ScheduleView::from_row(&row)),
    ))
}

/// One page in id order; `next_after` is set when the page is full.
pub async fn list<D: Db>(app: &App<'_, D>, query: &[(String, String)]) -> ApiResult {
    let q = parse_page_query(query, false)?;
    let rows = app.store.list_schedules(&q.after, q.limit).await?;
    let next = next_after(&rows, q.limit, |r| &r.id);
    let schedules: Vec<ScheduleView> = rows.iter().map(ScheduleView::from_row).collect();
    Ok((200, json!({ "schedules": schedules, "next_after": next })))
}

pub async fn get<D: Db>(app: &App<'_, D>, id: &str) -> ApiResult {
    validate_id("id", id)?;
    match app.store.get_schedule(id).await? {
        Some(row) => Ok((200, to_json(&ScheduleView::from_row(&row)))),
        None => Err(ApiError::NotFound(format!("schedule {id:?}"))),
    }
}

/// Delete a schedule; the batches it made keep running.
pub async fn delete<D: Db>(app: &App<'_, D>, id: &str) -> ApiResult {
    validate_id("id", id)?;
    if app.store.delete_schedule(id).await? {
        Ok((200, json!({ "deleted": id })))
    } else {
        Err(ApiError::NotFound(format!("schedule {id:?}")))
    }
}
