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
use crate::core::drain::dispatch::{self, SignatureLine};
use crate::core::error::ApiError;

/// The body of a runtime request, not read yet.
pub struct WorkerBody<'a>(pub &'a Request);

impl BodySource for WorkerBody<'_> {
    async fn read(self, limit: usize) -> Result<Vec<u8>, ApiError> {
        stream(self.0, limit, |_| Ok(())).await
    }
}

/// The body of `POST /internal/run`: its first line is the dispatch signature
/// (`core::dispatch`), handed to `admit` as soon as it has arrived, so a request
/// that cannot be valid is refused before any byte past the chunk carrying that
/// line is read. The admitted signature and the item's bytes.
pub async fn read_dispatch<T>(
    req: &Request,
    limit: usize,
    admit: impl Fn(Option<&str>) -> Result<T, ApiError>,
) -> Result<(T, Vec<u8>), ApiError> {
    let mut admitted = None;
    let body = stream(req, limit, |so_far| {
        if admitted.is_none() {
            match dispatch::signature_line(so_far) {
                SignatureLine::Incomplete => {}
                SignatureLine::Found { signature, item_at } => {
                    admitted = Some((admit(Some(signature))?, item_at))
                }
                SignatureLine::Malformed => return admit(Some("")).map(|_| ()),
            }
        }
        Ok(())
    })
    .await?;
    match admitted {
        Some((signature, item_at)) => Ok((signature, body[item_at..].to_vec())),
        // The body ended before its first line did.
        None => Err(admit(None).err().unwrap_or(ApiError::Unauthorized)),
    }
}

/// Read `req`'s body under `limit`, showing `inspect` what has arrived after each
/// chunk; an error from it stops the stream there.
async fn stream(
    req: &Request,
    limit: usize,
    mut inspect: impl FnMut(&[u8]) -> Result<(), ApiError>,
) -> Result<Vec<u8>, ApiError> {
    let declared = req
        .headers()
        .get("Content-Length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<usize>().ok());
    // Cheap early answer; the streamed count below is what enforces the limit.
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let Some(stream) = req.inner().body() else {
        return Ok(Vec::new());
    };
    let reader: ReadableStreamDefaultReader = stream
        .get_reader()
        .dyn_into()
        .map_err(|e| internal("body reader", &e))?;
    let mut body = Vec::with_capacity(declared.unwrap_or(0).min(limit));
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
        if let Err(e) = inspect(&body) {
            let _ = JsFuture::from(reader.cancel()).await;
            return Err(e);
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
