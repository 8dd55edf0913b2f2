//! The `Fanout-Signature` header the Worker puts on every webhook delivery.
//!
//! Format: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`. The
//! timestamp is part of the MAC so a captured delivery cannot be replayed later with
//! a fresh `t`; receivers also reject timestamps too far from their clock.
//!
//! Written independently of the Worker's `core::signature` on purpose: the sink
//! checks deliveries as a receiver would, so a bug in the Worker's signer cannot
//! hide behind shared code.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Header name, as sent by the Worker.
pub const HEADER: &str = "Fanout-Signature";

/// How far `t` may be from the receiver's clock. Deliveries are signed right before
/// they are sent, so minutes of skew already mean a replay or a broken clock.
pub const TOLERANCE_SECS: i64 = 300;

type HmacSha256 = Hmac<Sha256>;

/// Why a signature was not accepted. Serialised in the sink's records, so the
/// names are part of the `/stats` shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Valid,
    Missing,
    Malformed,
    Stale,
    Mismatch,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Missing => "missing",
            Verdict::Malformed => "malformed",
            Verdict::Stale => "stale",
            Verdict::Mismatch => "mismatch",
        }
    }
}

fn mac(secret: &[u8], t: i64, body: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The header value for `body` signed at unix time `t`.
pub fn sign(secret: &[u8], t: i64, body: &[u8]) -> String {
    let tag = mac(secret, t, body).finalize().into_bytes();
    format!("t={t},v1={}", hex::encode(tag))
}

/// Checks a header value (`None` when the header is absent) against `body` at
/// receiver time `now` (unix seconds). The tag comparison is constant-time
/// (`Mac::verify_slice`).
pub fn verify(secret: &[u8], header: Option<&str>, body: &[u8], now: i64) -> Verdict {
    let Some(header) = header else {
        return Verdict::Missing;
    };
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => t = value.parse::<i64>().ok(),
            Some(("v1", value)) => v1 = hex::decode(value).ok(),
            // Unknown schemes (a future v2) are ignored, as Stripe-style receivers do.
            _ => {}
        }
    }
    let (Some(t), Some(tag)) = (t, v1) else {
        return Verdict::Malformed;
    };
    if (now - t).abs() > TOLERANCE_SECS {
        return Verdict::Stale;
    }
    match mac(secret, t, body).verify_slice(&tag) {
        Ok(()) => Verdict::Valid,
        Err(_) => Verdict::Mismatch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"whsec";
    const BODY: &[u8] = br#"{"item_id":1}"#;

    #[test]
    fn round_trip_is_valid() {
        let header = sign(SECRET, 1_700_000_000, BODY);
        assert_eq!(
            verify(SECRET, Some(&header), BODY, 1_700_000_010),
            Verdict::Valid
        );
    }

    #[test]
    fn known_vector() {
        // Computed independently: printf '1.{}' | openssl dgst -sha256 -hmac key
        assert_eq!(
            sign(b"key", 1, b"{}"),
            "t=1,v1=1ba6b8171186efc613e8bcc0cbdab2748f24984d7c5a84faa2637afa0e40d224"
        );
    }

    #[test]
    fn tampering_is_detected() {
        let header = sign(SECRET, 100, BODY);
        assert_eq!(verify(SECRET, Some(&header), b"{}", 100), Verdict::Mismatch);
        assert_eq!(
            verify(b"other", Some(&header), BODY, 100),
            Verdict::Mismatch
        );
        // Same tag, different timestamp: the timestamp is inside the MAC.
        let forged = header.replacen("t=100", "t=101", 1);
        assert_eq!(verify(SECRET, Some(&forged), BODY, 100), Verdict::Mismatch);
    }

    #[test]
    fn bad_headers() {
        assert_eq!(verify(SECRET, None, BODY, 0), Verdict::Missing);
        assert_eq!(verify(SECRET, Some("garbage"), BODY, 0), Verdict::Malformed);
        assert_eq!(
            verify(SECRET, Some("t=1,v1=zz"), BODY, 1),
            Verdict::Malformed
        );
        assert_eq!(verify(SECRET, Some("v1=00"), BODY, 1), Verdict::Malformed);
        let old = sign(SECRET, 0, BODY);
        assert_eq!(
            verify(SECRET, Some(&old), BODY, TOLERANCE_SECS + 1),
            Verdict::Stale
        );
    }

    #[test]
    fn extra_schemes_and_spaces_are_tolerated() {
        let header = sign(SECRET, 5, BODY).replace(",", ", v0=abc, ");
        assert_eq!(verify(SECRET, Some(&header), BODY, 5), Verdict::Valid);
    }
}
