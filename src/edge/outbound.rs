//! The outbound seam (`jobs::outbound`) on the Workers runtime: `fetch` with an
//! abort signal, calls through the Worker's service bindings (looked up by name
//! in the `Env` it was made with), `Delay`, `Date.now()`. Each fetch gets its own
//! `AbortController`, aborted when the job's [`Signal`] fires or when the
//! fetch's future is dropped (a timed-out run, a late channel), so no request
//! outlives the run that sent it. An answer's body is streamed and read only as
//! far as `Request::body_read` says, then cancelled: a receiver's endless body
//! never reaches the isolate's memory.

use std::time::Duration;

use futures::future::{select, Either, LocalBoxFuture};
use worker::js_sys::{Reflect, Uint8Array};
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{
    web_sys, AbortController, Delay, Env, Fetch, Fetcher, Headers, Method, RequestInit,
    RequestRedirect, ResponseBody,
};

use crate::jobs::bindings::{Bindings, Kv};
use crate::jobs::outbound::{BodyReader, Outbound, Request, Response, ServiceError, Signal};

/// The runtime's outbound side; `env` holds the service bindings.
pub struct EdgeOutbound<'a> {
    pub env: &'a Env,
}

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

/// `request` as the runtime's request, carrying `signal` (a service binding's
/// `fetch` takes no signal of its own).
fn build_with_signal(
    request: &Request,
    signal: &worker::AbortSignal,
) -> Result<worker::Request, worker::wasm_bindgen::JsValue> {
    let headers = web_sys::Headers::new()?;
    for (name, value) in &request.headers {
        headers.set(name, value)?;
    }
    let init = web_sys::RequestInit::new();
    init.set_method(&request.method);
    init.set_headers(&headers);
    init.set_redirect(web_sys::RequestRedirect::Manual);
    init.set_signal(Some(&**signal));
    if let Some(body) = &request.body {
        init.set_body(&body.into());
    }
    web_sys::Request::new_with_str_and_init(&request.url, &init).map(worker::Request::from)
}

async fn send(request: Request, signal: &worker::AbortSignal) -> Result<Response, String> {
    let built = build(&request).map_err(|e| format!("cannot build request: {e}"))?;
    let response = Fetch::Request(built)
        .send_with_signal(signal)
        .await
        .map_err(|e| e.to_string())?;
    read(response, &request).await
}

/// One call through a service binding: the bound Worker's own invocation.
async fn send_service(
    service: Fetcher,
    request: Request,
    signal: &worker::AbortSignal,
) -> Result<Response, String> {
    let built =
        build_with_signal(&request, signal).map_err(|e| format!("cannot build request: {e:?}"))?;
    let response = service
        .fetch_request(built)
        .await
        .map_err(|e| e.to_string())?;
    read(response, &request).await
}

/// The answer with as much of its body as `request`'s rule reads
/// (`Request::body_read`); the rest is cancelled unread.
async fn read(response: worker::Response, request: &Request) -> Result<Response, String> {
    let status = response.status_code();
    let headers = response.headers().entries().collect();
    let mut reader = BodyReader::new(request.body_read(status), status);
    if let ResponseBody::Stream(stream) = response.body() {
        stream_into(stream, &mut reader)
            .await
            .map_err(|e| format!("HTTP {status}: reading the answer: {e:?}"))?;
    }
    reader.finish(headers)
}

/// Hand `reader` the body's chunks while it wants more, copying only what it
/// takes of each; then cancel the stream, so the runtime stops receiving it
/// (and frees its connection) instead of buffering the rest.
async fn stream_into(
    stream: &web_sys::ReadableStream,
    reader: &mut BodyReader,
) -> Result<(), JsValue> {
    if reader.wants() == 0 {
        let _ = JsFuture::from(stream.cancel()).await;
        return Ok(());
    }
    let chunks: web_sys::ReadableStreamDefaultReader = stream.get_reader().dyn_into()?;
    while reader.wants() > 0 {
        let chunk = JsFuture::from(chunks.read()).await?;
        if Reflect::get(&chunk, &JsValue::from_str("done"))?.is_truthy() {
            return Ok(());
        }
        let value: Uint8Array = Reflect::get(&chunk, &JsValue::from_str("value"))?.dyn_into()?;
        let take = (value.length() as usize).min(reader.wants());
        let mut bytes = vec![0; take];
        value.subarray(0, take as u32).copy_to(&mut bytes);
        reader.push(&bytes);
    }
    let _ = JsFuture::from(chunks.cancel()).await;
    Ok(())
}

/// Send a request under its own `AbortController`, aborted when `signal` fires
/// or the future is dropped.
async fn abortable(
    signal: &Signal,
    send: impl AsyncFnOnce(&worker::AbortSignal) -> Result<Response, String>,
) -> Result<Response, String> {
    if signal.is_aborted() {
        return Err("aborted".into());
    }
    let controller = AbortController::default();
    let abort_signal = controller.signal();
    let mut guard = AbortOnDrop(Some(controller));
    let sent = std::pin::pin!(send(&abort_signal));
    match select(sent, signal.aborted()).await {
        Either::Left((result, _)) => {
            guard.0 = None;
            result
        }
        // The guard aborts the request as it goes.
        Either::Right(_) => Err("aborted".into()),
    }
}

impl Outbound for EdgeOutbound<'_> {
    fn fetch<'a>(
        &'a self,
        request: Request,
        signal: &'a Signal,
    ) -> LocalBoxFuture<'a, Result<Response, String>> {
        Box::pin(abortable(signal, async move |s| send(request, s).await))
    }

    fn fetch_service<'a>(
        &'a self,
        binding: &'a str,
        request: Request,
        signal: &'a Signal,
    ) -> LocalBoxFuture<'a, Result<Response, ServiceError>> {
        Box::pin(async move {
            let service = self
                .env
                .service(binding)
                .map_err(|_| ServiceError::Unbound(binding.to_string()))?;
            abortable(signal, async move |s| {
                send_service(service, request, s).await
            })
            .await
            .map_err(ServiceError::Failed)
        })
    }

    fn sleep(&self, ms: i64) -> LocalBoxFuture<'static, ()> {
        Box::pin(Delay::from(Duration::from_millis(ms.max(0) as u64)))
    }

    fn now_ms(&self) -> i64 {
        super::clock::wall_ms()
    }

    fn bindings(&self) -> Option<&dyn Bindings> {
        Some(self)
    }
}

/// The kinds' bindings, from the Worker's `Env`.
impl Bindings for EdgeOutbound<'_> {
    fn var(&self, name: &str) -> Option<String> {
        self.env.var(name).ok().map(|v| v.to_string())
    }

    fn secret(&self, name: &str) -> Option<String> {
        self.env.secret(name).ok().map(|v| v.to_string())
    }

    fn kv(&self, name: &str) -> Option<Box<dyn Kv + '_>> {
        let store = self.env.kv(name).ok()?;
        Some(Box::new(EdgeKv(store)))
    }
}

struct EdgeKv(worker::kv::KvStore);

impl Kv for EdgeKv {
    fn get<'a>(&'a self, key: &'a str) -> LocalBoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async move {
            self.0
                .get(key)
                .text()
                .await
                .map_err(|e| format!("KV get: {e}"))
        })
    }

    fn put<'a>(&'a self, key: &'a str, value: &'a str) -> LocalBoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.0
                .put(key, value)
                .map_err(|e| format!("KV put: {e}"))?
                .execute()
                .await
                .map_err(|e| format!("KV put: {e}"))
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> LocalBoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.0
                .delete(key)
                .await
                .map_err(|e| format!("KV delete: {e}"))
        })
    }
}
