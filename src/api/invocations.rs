//! `GET /invocations`: one summary per scheduled invocation, newest first.

use serde_json::{json, Value};

use super::{ApiResult, App};
use crate::core::error::ApiError;
use crate::core::requests::parse_page_query;
use crate::core::time::rfc3339;
use crate::store::Db;

pub async fn list<D: Db>(app: &App<'_, D>, query: &[(String, String)]) -> ApiResult {
    let q = parse_page_query(query, false)?;
    if !q.after.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_query",
            "invocations are not paged by \"after\"; use limit",
        ));
    }
    let mut rows = app.store.list_invocations(q.limit).await?;
    for row in &mut rows {
        if let Some(ms) = row.get("started_at").and_then(Value::as_i64) {
            row["started_at"] = json!(rfc3339(ms));
        }
    }
    Ok((200, json!({ "invocations": rows })))
}
