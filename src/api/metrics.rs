//! `GET /metrics`: the Prometheus text of `core::metrics`, read in one call
//! (`sql/metrics_snapshot.sql` and the limits' two statements).

use super::{App, Text};
use crate::core::error::ApiError;
use crate::core::metrics::{families, render, CONTENT_TYPE};
use crate::store::Db;

pub async fn get<D: Db>(app: &App<'_, D>) -> Result<Text, ApiError> {
    let mut snapshot = app.store.metrics_snapshot(app.now).await?;
    snapshot.subrequest_budget = app.settings.subrequest_budget;
    Ok(Text {
        status: 200,
        content_type: CONTENT_TYPE,
        headers: vec![("Cache-Control", "no-store")],
        body: render(&families(&snapshot, app.now)),
    })
}
