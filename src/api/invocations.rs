//! `GET /invocations`: one summary per scheduled invocation, newest first.

use serde_json::json;

use super::{limit_only, ApiResult, App};
use crate::store::Db;

pub async fn list<D: Db>(app: &App<'_, D>, query: &[(String, String)]) -> ApiResult {
    let limit = limit_only(query, "invocations")?;
    // core::model::Invocation serializes as the API shows it (started_at RFC 3339).
    let rows = app.store.list_invocations(limit).await?;
    Ok((200, json!({ "invocations": rows })))
}
