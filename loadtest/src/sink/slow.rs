//! A slow URL in this process, for the probe's children to fetch: what a
//! connection held open by a slow receiver looks like.

use anyhow::Result;
use std::time::Duration;

/// A slow URL in this process (`GET /slow?ms=N` answers 200 after N ms), for the
/// connections probe against a local Worker. Stops when the handle is dropped.
pub struct SlowServer {
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SlowServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn slow_server(ms: u64) -> Result<SlowServer> {
    use axum::extract::Query;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::get(
            |Query(q): Query<std::collections::HashMap<String, u64>>| async move {
                tokio::time::sleep(Duration::from_millis(q.get("ms").copied().unwrap_or(0))).await;
                "slow"
            },
        ),
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(SlowServer {
        url: format!("http://{addr}/slow?ms={ms}"),
        task,
    })
}
