//! Who may call the admin routes: `Authorization: Bearer <ADMIN_TOKEN>`; on
//! `GET /metrics`, `Bearer <METRICS_TOKEN>` too.

use crate::core::error::ApiError;
use crate::core::security::signature::constant_time_eq;

/// Admit the caller if the header carries the admin token. The comparison takes the
/// same time wherever the tokens differ; an empty configured token admits nobody.
pub fn admin(authorization: Option<&str>, admin_token: &str) -> Result<(), ApiError> {
    let presented = authorization
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or("");
    if !admin_token.is_empty() && constant_time_eq(presented.as_bytes(), admin_token.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// Admit the caller of `GET /metrics`: the admin token, or the read-only metrics
/// token when one is set. Both are compared in full, whichever matches.
pub fn metrics(
    authorization: Option<&str>,
    admin_token: &str,
    metrics_token: Option<&str>,
) -> Result<(), ApiError> {
    let as_admin = admin(authorization, admin_token);
    let as_scraper = metrics_token.map_or(Err(ApiError::Unauthorized), |t| admin(authorization, t));
    as_admin.or(as_scraper)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "admin-token-0123456789";

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        assert_eq!(admin(Some(&format!("Bearer {TOKEN}")), TOKEN), Ok(()));
        for header in [
            None,
            Some(""),
            Some(TOKEN),
            Some("Bearer "),
            Some("bearer admin-token-0123456789"),
            Some("Bearer admin-token-012345678"),
            Some("Bearer admin-token-01234567890"),
            Some("Basic YWRtaW46cGFzcw=="),
        ] {
            assert_eq!(
                admin(header, TOKEN),
                Err(ApiError::Unauthorized),
                "{header:?}"
            );
        }
    }

    #[test]
    fn an_empty_configured_token_admits_nobody() {
        assert_eq!(admin(Some("Bearer "), ""), Err(ApiError::Unauthorized));
        assert_eq!(admin(None, ""), Err(ApiError::Unauthorized));
    }
}
