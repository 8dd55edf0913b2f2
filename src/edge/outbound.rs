//! The outbound seam (`jobs::outbound`) on the Workers runtime: `fetch` with an
//! abort signal, `Delay`, `Date.now()`. Each fetch gets its own
//! `AbortController`, aborted when the job's [`Signal`] fires or when the
//! fetch's future is dropped (a timed-out run, a late channel), so no request
//! outlives the run that sent it.

use std::time::Duration;

use futures::future::{select, Either, LocalBoxFuture};
use worker::{AbortController, Delay, Fetch, Headers, Method, RequestInit, RequestRedirect};

use crate::jobs::outbound::{Outbound, Request, Response, Signal};

pub struct EdgeOutbound;

/// Aborts its controller when dropped, unless the fetch ended first.
struct AbortOnDrop(Option<AbortController>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(controller) = self.0.take() {
            controller.abort();
        }
    }
}

fn build(request: &Request) -> worker::Result<worker::Request> {
    let headers = Headers::new();
    for (name, value) in &request.headers {
        headers.set(name, value)?;
    }
    let mut init = RequestInit::new();
    init.with_method(Method::from(request.method.clone()))
        .with_headers(headers)
        // A redirect is answered as it is; following it would send the
        // request (and its signature) wherever `Location` points.
        .with_redirect(RequestRedirect::Manual);
    if let Some(body) = &request.body {
        init.with_body(Some(body.clone().into()));
    }
    worker::Request::new_with_init(&request.url, &init)
}

async fn send(request: Request, signal: &worker::AbortSignal) -> Result<Response, String> {
    let built = build(&request).map_err(|e| format!("cannot build request: {e}"))?;
    let mut response = Fetch::Request(built)
        .send_with_signal(signal)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status_code();
    let headers = response.headers().entries().collect();
    // Failures' text goes into their reason; a success's body is read only when
    // asked for (reading costs CPU).
    let body = if request.read_body || !(200..300).contains(&status) {
        response.text().await.unwrap_or_default()
    } else {
        String::new()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

impl Outbound for EdgeOutbound {
    fn fetch<'a>(
        &'a self,
        request: Request,
        signal: &'a Signal,
    ) -> LocalBoxFuture<'a, Result<Response, String>> {
        Box::pin(async move {
            if signal.is_aborted() {
                return Err("aborted".into());
            }
            let controller = AbortController::default();
            let abort_signal = controller.signal();
            let mut guard = AbortOnDrop(Some(controller));
            let sent = std::pin::pin!(send(request, &abort_signal));
            match select(sent, signal.aborted()).await {
                Either::Left((result, _)) => {
                    guard.0 = None;
                    result
                }
                // The guard aborts the request as it goes.
                Either::Right(_) => Err("aborted".into()),
            }
        })
    }

    fn sleep(&self, ms: i64) -> LocalBoxFuture<'static, ()> {
        Box::pin(Delay::from(Duration::from_millis(ms.max(0) as u64)))
    }

    fn now_ms(&self) -> i64 {
        super::clock::wall_ms()
    }
}
