//! Reading a request body under a size limit while it streams: the runtime's
//! `arrayBuffer()` would hold a chunked 90 MB POST in memory before anything could
//! look at its size, and take the isolate (and the drain sharing it) down with it.
//! Chunks are copied as they arrive; the first one past the limit cancels the
//! stream and answers 413, whatever `Content-Length` said or whether it was sent.

use worker::js_sys::{Reflect, Uint8Array};
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::web_sys::ReadableStreamDefaultReader;
use worker::Request;

use crate::api::BodySource;
use crate::core::error::ApiError;

/// The body of a runtime request, not read yet.
pub struct WorkerBody<'a>(pub &'a Request);

impl BodySource for WorkerBody<'_> {
    async fn read(self, limit: usize) -> Result<Vec<u8>, ApiError> {
        let declared = self
            .0
            .headers()
            .get("Content-Length")
            .ok()
            .flatten()
            .and_then(|v| v.parse::<usize>().ok());
        // Cheap early answer; the streamed count below is what enforces the limit.
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        let Some(stream) = self.0.inner().body() else {
            return Ok(Vec::new());
        };
        let reader: ReadableStreamDefaultReader = stream
            .get_reader()
            .dyn_into()
            .map_err(|e| internal("body reader", &e))?;
        let mut body = Vec::with_capacity(declared.unwrap_or(0));
        loop {
            let chunk = JsFuture::from(reader.read())
                .await
                .map_err(|e| internal("reading the body", &e))?;
            let done = Reflect::get(&chunk, &JsValue::from_str("done"))
                .map_err(|e| internal("reading the body", &e))?;
            if done.is_truthy() {
                return Ok(body);
            }
            let value: Uint8Array = Reflect::get(&chunk, &JsValue::from_str("value"))
                .and_then(|v| v.dyn_into())
                .map_err(|e| internal("reading the body", &e))?;
            let n = value.length() as usize;
            if body.len() + n > limit {
                // Stop the stream: the rest is never read.
                let _ = JsFuture::from(reader.cancel()).await;
                return Err(ApiError::PayloadTooLarge { limit });
            }
            let start = body.len();
            body.resize(start + n, 0);
            value.copy_to(&mut body[start..]);
        }
    }
}

fn internal(what: &str, e: &JsValue) -> ApiError {
    ApiError::Internal(format!("{what}: {e:?}"))
}

/// Cancel a refused request's body if it was not read. The runtime otherwise
/// drains it before the answer goes out (observed under `wrangler dev`: a 401 to
/// an unsigned dispatch with an endless body was held until the body ended).
/// Cancelling a body already read, cancelled or locked by a reader is a no-op.
pub async fn discard(req: &Request) {
    if let Some(stream) = req.inner().body() {
        if !stream.locked() {
            let _ = JsFuture::from(stream.cancel()).await;
        }
    }
}
