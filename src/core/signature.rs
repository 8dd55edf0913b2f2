//! HMAC-SHA256 signatures of the form `t=<unix seconds>,v1=<hex>` over
//! `"<t>.<raw body>"`: used for dispatch to `/internal/run` (`DISPATCH_SECRET`) and
//! for webhook deliveries (`WEBHOOK_SECRET`). The timestamp bounds replays.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// How old (or how far in the future) a signature may be.
pub const MAX_SKEW_SECS: i64 = 300;

/// Why a signature was refused; the reason is logged, never sent to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureError {
    Missing,
    Malformed,
    Stale,
    Mismatch,
}

fn mac(secret: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC accepts any key");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The header value signing `body` at `now_secs`.
pub fn sign(secret: &str, now_secs: i64, body: &[u8]) -> String {
    let tag = mac(secret, now_secs, body).finalize().into_bytes();
    format!("t={now_secs},v1={}", hex::encode(tag))
}

/// Check a header value against `body` at `now_secs` (constant-time compare).
pub fn verify(
    secret: &str,
    header: Option<&str>,
    now_secs: i64,
    body: &[u8],
) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let mut timestamp = None;
    let mut tag = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => timestamp = v.parse::<i64>().ok(),
            Some(("v1", v)) => tag = hex::decode(v).ok(),
            _ => {}
        }
    }
    let (timestamp, tag) = match (timestamp, tag) {
        (Some(t), Some(tag)) => (t, tag),
        _ => return Err(SignatureError::Malformed),
    };
    if (now_secs - timestamp).abs() > MAX_SKEW_SECS {
        return Err(SignatureError::Stale);
    }
    mac(secret, timestamp, body)
        .verify_slice(&tag)
        .map_err(|_| SignatureError::Mismatch)
}

/// Compare a presented credential with the expected one in constant time (for
/// bearer tokens). Only the length can leak, which says nothing about a random token.
pub fn constant_time_eq(presented: &[u8], expected: &[u8]) -> bool {
    presented.len() == expected.len()
        && presented
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"token-123", b"token-123"));
        assert!(!constant_time_eq(b"token-124", b"token-123"));
        assert!(!constant_time_eq(b"token-12", b"token-123"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn signs_the_documented_string() {
        // Independently computed: printf '1700000000.{}' | openssl dgst -sha256 -hmac secret
        assert_eq!(
            sign("secret", 1_700_000_000, b"{}"),
            "t=1700000000,v1=b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
        );
    }

    #[test]
    fn accepts_its_own_signature() {
        let header = sign("k", 1_000, b"body");
        assert_eq!(
            verify("k", Some(&header), 1_000 + MAX_SKEW_SECS, b"body"),
            Ok(())
        );
    }

    #[test]
    fn rejects_wrong_secret_body_or_tampered_tag() {
        let header = sign("k", 1_000, b"body");
        assert_eq!(
            verify("other", Some(&header), 1_000, b"body"),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify("k", Some(&header), 1_000, b"bodY"),
            Err(SignatureError::Mismatch)
        );
        let tampered = header.replace("v1=", "v1=00");
        assert_eq!(
            verify("k", Some(&tampered), 1_000, b"body"),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn rejects_stale_and_future_timestamps() {
        let header = sign("k", 1_000, b"body");
        let late = 1_000 + MAX_SKEW_SECS + 1;
        assert_eq!(
            verify("k", Some(&header), late, b"body"),
            Err(SignatureError::Stale)
        );
        let early = 1_000 - MAX_SKEW_SECS - 1;
        assert_eq!(
            verify("k", Some(&header), early, b"body"),
            Err(SignatureError::Stale)
        );
    }

    #[test]
    fn extreme_timestamps_are_stale_not_an_overflow() {
        // `now - t` overflowed i64 for these (a panic in debug builds).
        let tag = "0".repeat(64);
        for t in [i64::MIN, i64::MIN + 1, i64::MAX] {
            let header = format!("t={t},v1={tag}");
            for now in [0, 1_700_000_000, i64::MAX, -1] {
                let fresh = (i128::from(now) - i128::from(t)).abs() <= i128::from(MAX_SKEW_SECS);
                let want = if fresh {
                    SignatureError::Mismatch
                } else {
                    SignatureError::Stale
                };
                assert_eq!(
                    verify("k", Some(&header), now, b""),
                    Err(want),
                    "t={t} now={now}"
                );
            }
        }
    }

    #[test]
    fn rejects_missing_and_malformed_headers() {
        assert_eq!(verify("k", None, 0, b""), Err(SignatureError::Missing));
        for bad in ["", "t=1", "v1=abcd", "t=x,v1=abcd", "t=1,v1=zz"] {
            assert_eq!(
                verify("k", Some(bad), 1, b""),
                Err(SignatureError::Malformed),
                "{bad}"
            );
        }
    }
}
