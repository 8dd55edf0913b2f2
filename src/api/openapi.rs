//! `GET /openapi.json`: the API's OpenAPI 3.1 description, a checked-in document
//! embedded with `include_str!`. Checked in rather than generated from the Rust
//! types: the handlers build their answers as JSON values, so there are few types
//! to derive from, and a generator would add compile time and wasm for a file
//! that changes with the routes only. Kept true by `tests/openapi.rs` (both ways
//! against [`super::routes::ROUTES`]), a validator in `scripts/test.sh`, and the
//! e2e suite, which validates every JSON answer it gets against it.

use super::page::CSP;
use super::Text;

/// The document as served, byte for byte.
pub const DOCUMENT: &str = include_str!("openapi.json");

/// No auth: it holds no data, only the shape of the routes.
pub fn serve() -> Text {
    Text {
        status: 200,
        content_type: "application/json",
        headers: vec![
            ("Content-Security-Policy", CSP),
            ("X-Content-Type-Options", "nosniff"),
            ("Cache-Control", "no-cache"),
        ],
        body: DOCUMENT.to_string(),
    }
}
