//! `PUT /limits/{key}`, `GET /limits`, `GET /limits/{key}`, `DELETE /limits/{key}`:
//! rate and concurrency limits per key (`core::limits`), each answered with its
//! live state (`core::limit_view`). The claim applies them (`sql/claim_selection.sql`).

use serde_json::{json, Value};

use super::{next_after, to_json, ApiResult, App};
use crate::core::batch::requests::{parse_json, parse_page_query};
use crate::core::error::ApiError;
use crate::core::flow::limit_view::{view, LimitSpec, LimitView};
use crate::core::flow::limits::{is_limit_key, Limit, MAX_KEY_LEN};
use crate::core::metrics::DUE_CAP;
use crate::store::Db;

/// A limit's key: an item's key, or a partition (`prefix:*`). 400 `invalid_limit`
/// naming `key` otherwise.
fn check_key(key: &str) -> Result<(), ApiError> {
    if is_limit_key(key) {
        return Ok(());
    }
    Err(ApiError::bad_request(
        "invalid_limit",
        format!(
            "key {key:?} is not a limit key: 1 to {MAX_KEY_LEN} ASCII letters, digits and . _ : - @, \
             or a partition ending in \":*\" (tenant:*)"
        ),
    ))
}

/// Create or replace a limit: 200 with it. The key and the body are checked
/// before anything is written. A changed rate needs no reset: the key's state was
/// counted under the old rate (`basis`), which the claim reads as a full burst.
pub async fn put<D: Db>(app: &App<'_, D>, key: &str, body: &[u8]) -> ApiResult {
    check_key(key)?;
    let body: Value = parse_json(body)?;
    let limit = Limit::parse(&body)?;
    let row = app.store.upsert_limit(key, &limit, app.now).await?;
    Ok((200, to_json(&LimitSpec::from_row(&row))))
}

/// One page in key order, each limit with its live state; `next_after` is set
/// when the page is full. `paused`: the keys paused now (by their receiver's
/// answers), with a limit or without, whatever the page. `learned`: the keys
/// with a learned rate in force (their receiver refused within the hour), with
/// a limit or without, whatever the page.
pub async fn list<D: Db>(app: &App<'_, D>, query: &[(String, String)]) -> ApiResult {
    let q = parse_page_query(query, false)?;
    let (rows, usage, paused, learned) = app.store.list_limits(&q.after, q.limit, app.now).await?;
    let learned: Vec<Value> = learned.iter().filter_map(|l| l.shown(app.now)).collect();
    let next = next_after(&rows, q.limit, |r| &r.key);
    let limits: Vec<LimitView> = rows
        .iter()
        .map(|r| view(r, &usage, app.now, DUE_CAP))
        .collect();
    let paused: Vec<Value> = paused.iter().map(|p| p.shown()).collect();
    Ok((
        200,
        json!({ "limits": limits, "next_after": next, "paused": paused, "learned": learned }),
    ))
}

/// A limit with its live state; for a key without a limit of its own, its
/// learned rate in force (as `GET /limits` lists it under `learned`); 404 when
/// it has neither.
pub async fn get<D: Db>(app: &App<'_, D>, key: &str) -> ApiResult {
    check_key(key)?;
    if let Some((row, usage)) = app.store.get_limit(key, app.now).await? {
        return Ok((200, to_json(&view(&row, &usage, app.now, DUE_CAP))));
    }
    let learned = app.store.get_learned_key(key, app.now).await?;
    match learned.and_then(|l| l.shown(app.now)) {
        Some(shown) => Ok((200, shown)),
        None => Err(ApiError::NotFound(format!("limit {key:?}"))),
    }
}

/// Lift a key's pause now (a receiver's delay that should not stand): 200, or
/// 404 when the key is not paused now. Its learned rate, if any, stays.
pub async fn lift_pause<D: Db>(app: &App<'_, D>, key: &str) -> ApiResult {
    check_key(key)?;
    if app.store.lift_pause(key, app.now).await? {
        Ok((200, json!({ "lifted": key })))
    } else {
        Err(ApiError::NotFound(format!("pause of {key:?}")))
    }
}

/// Delete a limit and its rate state; items keep their keys, and a key no limit
/// governs holds nothing back.
pub async fn delete<D: Db>(app: &App<'_, D>, key: &str) -> ApiResult {
    check_key(key)?;
    if app.store.delete_limit(key, app.now).await? {
        Ok((200, json!({ "deleted": key })))
    } else {
        Err(ApiError::NotFound(format!("limit {key:?}")))
    }
}
