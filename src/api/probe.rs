//! `POST /probe`'s body: parsed and bounded here; the calls themselves need the
//! runtime (`edge::probe`).

use serde::Deserialize;

use crate::core::error::ApiError;
use crate::core::requests::parse_json;

/// Upper bounds that keep a probe from becoming a load test by accident.
pub const MAX_CALLS: i64 = 100_000;
pub const MAX_CONCURRENCY: i64 = 1_000;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeRequest {
    pub calls: i64,
    #[serde(default = "default_concurrency")]
    pub concurrency: i64,
}

fn default_concurrency() -> i64 {
    25
}

/// The probe a body asks for: strict JSON, then bounds (400 `invalid_probe`).
pub fn parse(body: &[u8]) -> Result<ProbeRequest, ApiError> {
    let req: ProbeRequest = parse_json(body)?;
    if !(1..=MAX_CALLS).contains(&req.calls) {
        return Err(ApiError::bad_request(
            "invalid_probe",
            format!("calls must be 1 to {MAX_CALLS}"),
        ));
    }
    if !(1..=MAX_CONCURRENCY).contains(&req.concurrency) {
        return Err(ApiError::bad_request(
            "invalid_probe",
            format!("concurrency must be 1 to {MAX_CONCURRENCY}"),
        ));
    }
    Ok(req)
}
