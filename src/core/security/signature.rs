//! HMAC-SHA256 signatures of the form `t=<unix seconds>,v1=<hex>` over
//! `"<t>.<raw body>"`: used for dispatch to `/internal/run` (`DISPATCH_SECRET`) and
//! for webhook deliveries (`WEBHOOK_SECRET`). The timestamp bounds replays.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// How old (or how far in the future) a signature may be.
pub const MAX_SKEW_SECS: u64 = 300;

/// A header longer than this is malformed: `t=` plus 20 digits, `,v1=` and 64 hex
/// digits need 92 bytes; the rest is room for fields added later.
pub const MAX_HEADER_BYTES: usize = 256;

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

/// A signature header of the right shape: `t=<unix seconds>,v1=<64 hex digits>`
/// (other fields are ignored, a repeated one is malformed). Parsed, and checked for
/// freshness, before the body it signs is read: a request that cannot be valid costs
/// no body read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeader {
    pub timestamp: i64,
    tag: [u8; 32],
}

impl SignatureHeader {
    pub fn parse(header: Option<&str>) -> Result<SignatureHeader, SignatureError> {
        let header = header.ok_or(SignatureError::Missing)?;
        if header.len() > MAX_HEADER_BYTES {
            return Err(SignatureError::Malformed);
        }
        let mut timestamp = None;
        let mut tag = None;
        for part in header.split(',') {
            let (field, seen) = match part.trim().split_once('=') {
                Some(("t", v)) => (v.parse::<i64>().ok(), timestamp.is_some()),
                Some(("v1", v)) => {
                    let mut bytes = [0u8; 32];
                    let ok = v.len() == 64 && hex::decode_to_slice(v, &mut bytes).is_ok();
                    if tag.is_some() || !ok {
                        return Err(SignatureError::Malformed);
                    }
                    tag = Some(bytes);
                    continue;
                }
                _ => continue,
            };
            if seen || field.is_none() {
                return Err(SignatureError::Malformed);
            }
            timestamp = field;
        }
        match (timestamp, tag) {
            (Some(timestamp), Some(tag)) => Ok(SignatureHeader { timestamp, tag }),
            _ => Err(SignatureError::Malformed),
        }
    }

    /// Whether the timestamp is within `max_age_secs` of `now_secs`, either way.
    /// `abs_diff`: a subtraction overflows on extreme timestamps.
    pub fn check_fresh(&self, now_secs: i64, max_age_secs: u64) -> Result<(), SignatureError> {
        if now_secs.abs_diff(self.timestamp) > max_age_secs {
            return Err(SignatureError::Stale);
        }
        Ok(())
    }

    /// Whether one of `secrets` (during a rotation, the current and the previous
    /// one) signed `body`. Each comparison is constant-time; every secret is tried.
    pub fn check_tag<'s>(
        &self,
        secrets: impl IntoIterator<Item = &'s str>,
        body: &[u8],
    ) -> Result<(), SignatureError> {
        let mut matched = false;
        for secret in secrets {
            matched |= mac(secret, self.timestamp, body)
                .verify_slice(&self.tag)
                .is_ok();
        }
        if matched {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }
}

/// Check a header value against `body` at `now_secs`: shape, age within
/// [`MAX_SKEW_SECS`], then the tag (constant-time compare).
pub fn verify(
    secret: &str,
    header: Option<&str>,
    now_secs: i64,
    body: &[u8],
) -> Result<(), SignatureError> {
    let header = SignatureHeader::parse(header)?;
    header.check_fresh(now_secs, MAX_SKEW_SECS)?;
    header.check_tag([secret], body)
}

/// How old a dispatch signature may be. A dispatch is signed as it is sent, and its
/// item's lease ends `lease_ms` after the claim, before that: an older signature
/// belongs to a lease that has expired, so it is refused (a replay window no longer
/// than the lease, and never longer than [`MAX_SKEW_SECS`]).
pub fn dispatch_max_age_secs(lease_ms: i64) -> u64 {
    let lease_secs = u64::try_from(lease_ms).unwrap_or(0).div_ceil(1_000);
    lease_secs.min(MAX_SKEW_SECS)
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
            verify("k", Some(&header), 1_000 + MAX_SKEW_SECS as i64, b"body"),
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
        // Same shape, one hex digit changed.
        let flipped = if header.ends_with('0') { '1' } else { '0' };
        let tampered = format!("{}{flipped}", &header[..header.len() - 1]);
        assert_eq!(
            verify("k", Some(&tampered), 1_000, b"body"),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn rejects_stale_and_future_timestamps() {
        let header = sign("k", 1_000, b"body");
        let late = 1_000 + MAX_SKEW_SECS as i64 + 1;
        assert_eq!(
            verify("k", Some(&header), late, b"body"),
            Err(SignatureError::Stale)
        );
        let early = 1_000 - MAX_SKEW_SECS as i64 - 1;
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
        let tag = "ab".repeat(32);
        let long = format!("t=1,v1={tag},{}", "x".repeat(300));
        for bad in [
            "".to_string(),
            "t=1".into(),
            format!("v1={tag}"),
            "t=x,v1=abcd".into(),
            "t=1,v1=zz".into(),
            // The tag must be exactly 64 hex digits.
            "t=1,v1=abcd".into(),
            format!("t=1,v1={tag}00"),
            format!("t=1,v1={}", &tag[..62]),
            format!("t=1,v1={}zz", &tag[..62]),
            // One of each.
            format!("t=1,t=2,v1={tag}"),
            format!("t=1,v1={tag},v1={tag}"),
            format!("t=,v1={tag}"),
            long,
        ] {
            assert_eq!(
                SignatureHeader::parse(Some(&bad)),
                Err(SignatureError::Malformed),
                "{bad}"
            );
        }
        // Unknown fields and spaces around fields are fine.
        let ok = SignatureHeader::parse(Some(&format!(" t=7 , v0=x, v1={tag}"))).unwrap();
        assert_eq!(ok.timestamp, 7);
    }

    #[test]
    fn any_of_several_secrets_may_have_signed() {
        let header = SignatureHeader::parse(Some(&sign("old", 5, b"body"))).unwrap();
        assert_eq!(header.check_tag(["new", "old"], b"body"), Ok(()));
        assert_eq!(header.check_tag(["old", "new"], b"body"), Ok(()));
        assert_eq!(
            header.check_tag(["new"], b"body"),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            header.check_tag(std::iter::empty(), b"body"),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn a_dispatch_older_than_the_lease_is_stale() {
        assert_eq!(dispatch_max_age_secs(120_000), 120);
        assert_eq!(dispatch_max_age_secs(11_000), 11);
        assert_eq!(
            dispatch_max_age_secs(10_500),
            11,
            "rounded up, never shorter"
        );
        assert_eq!(dispatch_max_age_secs(3_600_000), MAX_SKEW_SECS);
        assert_eq!(dispatch_max_age_secs(-5), 0);
        let header = SignatureHeader::parse(Some(&sign("k", 1_000, b""))).unwrap();
        let max_age = dispatch_max_age_secs(11_000);
        assert_eq!(header.check_fresh(1_011, max_age), Ok(()));
        assert_eq!(
            header.check_fresh(1_012, max_age),
            Err(SignatureError::Stale)
        );
    }
}
