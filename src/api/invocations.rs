//! `GET /invocations`: one summary per scheduled invocation, newest first.

use serde_json::{json, Value};

use super::{limit_only, ApiResult, App};
use crate::core::time::rfc3339;
use crate::store::Db;

pub async fn list<D: Db>(app: &App<'_, D>, query: &[(String, String)]) -> ApiResult {
    let limit = limit_only(query, "invocations")?;
    let mut rows = app.store.list_invocations(limit).await?;
    for row in &mut rows {
        if let Some(ms) = row.get("started_at").and_then(Value::as_i64) {
            row["started_at"] = json!(rfc3339(ms));
        }
    }
    Ok((200, json!({ "invocations": rows })))
}
