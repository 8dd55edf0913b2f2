//! The one error type of the HTTP API. Each variant maps to a status and a stable
//! code in one place; internal details are logged by the edge, never sent.

use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// 400: the request is malformed or fails validation; `code` is stable.
    BadRequest { code: &'static str, message: String },
    /// 401: missing or wrong credentials (admin token or dispatch signature).
    Unauthorized,
    /// 404: no such route or resource.
    NotFound(String),
    /// 405: the route exists, the method does not; `allowed` is e.g. `"GET, PUT"`.
    MethodNotAllowed { allowed: String },
    /// 409: the request is valid but the resource's state does not allow it
    /// (`invalid_transition`: resume a finished batch, replay into a cancelled one).
    Conflict { code: &'static str, message: String },
    /// 413: the body is over the size limit.
    PayloadTooLarge { limit: usize },
    /// 415: the body is not JSON.
    UnsupportedMediaType,
    /// 500: the Worker's settings or secrets are invalid. The message names the
    /// variable and the rule, never a secret's value, so it is safe to show.
    Misconfigured(String),
    /// 500: the detail is for the log only.
    Internal(String),
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            code,
            message: message.into(),
        }
    }

    /// 409 `invalid_transition`.
    pub fn invalid_transition(message: impl Into<String>) -> ApiError {
        ApiError::Conflict {
            code: "invalid_transition",
            message: message.into(),
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadRequest { .. } => 400,
            ApiError::Unauthorized => 401,
            ApiError::NotFound(_) => 404,
            ApiError::MethodNotAllowed { .. } => 405,
            ApiError::Conflict { .. } => 409,
            ApiError::PayloadTooLarge { .. } => 413,
            ApiError::UnsupportedMediaType => 415,
            ApiError::Misconfigured(_) | ApiError::Internal(_) => 500,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest { code, .. } | ApiError::Conflict { code, .. } => code,
            ApiError::Unauthorized => "unauthorized",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::UnsupportedMediaType => "unsupported_media_type",
            ApiError::Misconfigured(_) => "misconfigured",
            ApiError::Internal(_) => "internal",
        }
    }

    /// What the client sees. `Internal` hides its detail (SQL text, binding names).
    pub fn public_message(&self) -> String {
        match self {
            ApiError::BadRequest { message, .. } | ApiError::Conflict { message, .. } => {
                message.clone()
            }
            ApiError::Unauthorized => "missing or invalid credentials".into(),
            ApiError::NotFound(what) => format!("{what} not found"),
            ApiError::MethodNotAllowed { allowed } => {
                format!("method not allowed; allowed: {allowed}")
            }
            ApiError::PayloadTooLarge { limit } => format!("body is larger than {limit} bytes"),
            ApiError::UnsupportedMediaType => {
                "body must be JSON (Content-Type: application/json)".into()
            }
            ApiError::Misconfigured(message) => format!("the Worker is misconfigured: {message}"),
            ApiError::Internal(_) => "internal error; see the Worker logs".into(),
        }
    }

    pub fn body(&self) -> Value {
        json!({ "error": { "code": self.code(), "message": self.public_message() } })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_details_never_reach_the_body() {
        let e = ApiError::Internal("D1_ERROR: no such table: cron_queue".into());
        assert_eq!(e.status(), 500);
        assert!(!e.body().to_string().contains("cron_queue"));
    }

    #[test]
    fn misconfiguration_names_the_setting() {
        let e = ApiError::Misconfigured("secret ADMIN_TOKEN is not set".into());
        assert_eq!((e.status(), e.code()), (500, "misconfigured"));
        assert!(e.public_message().contains("ADMIN_TOKEN"));
    }

    #[test]
    fn body_has_code_and_message() {
        let e = ApiError::bad_request("invalid_id", "id must not be empty");
        assert_eq!(
            e.body(),
            json!({"error": {"code": "invalid_id", "message": "id must not be empty"}})
        );
        assert_eq!(ApiError::Unauthorized.status(), 401);
        let e = ApiError::invalid_transition("batch \"b\" is finished");
        assert_eq!((e.status(), e.code()), (409, "invalid_transition"));
        assert_eq!(ApiError::PayloadTooLarge { limit: 10 }.status(), 413);
    }
}
