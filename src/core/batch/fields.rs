//! The checks every request's fields share, whichever request carries them (a
//! batch, a schedule's body, a subject, a receipt's channel): a JSON body's size
//! and shape, ids, priorities.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::core::error::ApiError;

pub const MAX_BODY_BYTES: usize = 256 * 1024;
pub const MAX_ID_CHARS: usize = 200;
/// A batch's or schedule's `priority`: higher is claimed first, equal ones take
/// turns; 0 unless given.
pub const MIN_PRIORITY: i64 = -10;
pub const MAX_PRIORITY: i64 = 10;

/// Parse a JSON body strictly. Size is checked first so a huge body costs nothing.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::PayloadTooLarge {
            limit: MAX_BODY_BYTES,
        });
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("invalid request body: {e}")))
}

pub fn validate_id(field: &str, id: &str) -> Result<(), ApiError> {
    let chars = id.chars().count();
    if chars == 0 || chars > MAX_ID_CHARS {
        return Err(ApiError::bad_request(
            "invalid_id",
            format!("{field} must be 1 to {MAX_ID_CHARS} characters, got {chars}"),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "invalid_id",
            format!("{field} must not contain control characters"),
        ));
    }
    // A URL path segment "." or ".." is resolved away by every URL parser, so such
    // an id could never be addressed (`DELETE /subjects/..`).
    if id == "." || id == ".." {
        return Err(ApiError::bad_request(
            "invalid_id",
            format!("{field} must not be \".\" or \"..\""),
        ));
    }
    Ok(())
}

/// A `priority` as sent: an integer from [`MIN_PRIORITY`] to [`MAX_PRIORITY`],
/// 0 when absent or null; anything else is 400 `invalid_priority`.
pub fn parse_priority(value: Option<&Value>) -> Result<i64, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v
            .as_i64()
            .filter(|p| (MIN_PRIORITY..=MAX_PRIORITY).contains(p))
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_priority",
                    format!("priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}, not {v}"),
                )
            }),
    }
}
