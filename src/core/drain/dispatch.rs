//! The wire format of `POST /internal/run`, both ways. The request carries
//! everything in its body, `<signature>\n<JSON>`, and nothing in its headers (the
//! JSON is [`Dispatched`]: the item and the id of the invocation dispatching it):
//! the runtime's trace events (`wrangler tail`, Tail Workers, Workers Logs) record
//! request headers, redacting only names that look secret, and never bodies, and the
//! item holds its lease token and its payload (`data`, a subject's `signing_secret`).
//! The outcome comes back in response headers, so the dispatcher reads no body:
//! reading the child's JSON answer cost about 0.2 ms of CPU per call locally, a third
//! of the whole per-item cost (docs/benchmarks/history-2026-11-21.md).

use percent_encoding::{percent_decode_str, utf8_percent_encode, NON_ALPHANUMERIC};
use serde::{Deserialize, Serialize};

use crate::core::batch::model::{
    cut_on_char_boundary, ClaimedItem, Outcome, RefusedBy, MAX_REASON_BYTES,
};
use crate::core::flow::pace::Paced;
use crate::core::security::signature;

/// Status of a child's answer carrying an outcome; any other status is a failed call.
pub const OUTCOME_STATUS: u16 = 204;
pub const OUTCOME_HEADER: &str = "Fanout-Outcome";
pub const REASON_HEADER: &str = "Fanout-Outcome-Reason";
/// A retry's own delay in ms (`Ran::retry_after_ms`), when its answer asked for one.
pub const RETRY_AFTER_HEADER: &str = "Fanout-Retry-After-Ms";
/// A retry its receiver refused (`Ran::refused`), as [`RefusedBy`]'s JSON with
/// each key percent-encoded (`{}` for every key the item holds).
pub const REFUSED_HEADER: &str = "Fanout-Refused";
/// What the answer's announced budget asks of the item's keys (`Ran::paced`),
/// as `core::flow::pace::Paced`'s JSON; absent on the answers of most runs.
pub const PACED_HEADER: &str = "Fanout-Paced";
/// The keys the pacing concerns (`Ran::paced_keys`), when not every key the
/// item holds: a JSON array, each key percent-encoded.
pub const PACED_KEYS_HEADER: &str = "Fanout-Paced-Keys";

/// What a dispatch body signs: the claimed item, and the id of the invocation
/// that dispatched it (the child's log lines and outbound calls carry it). Signed
/// with the item, so a child names the invocation its dispatcher named; in the
/// body, since the dispatch keeps no header but its content type.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dispatched {
    pub invocation: String,
    pub item: ClaimedItem,
}

#[derive(Serialize)]
struct DispatchedRef<'a> {
    invocation: &'a str,
    item: &'a ClaimedItem,
}

/// The JSON a dispatch body signs ([`Dispatched`]).
pub fn dispatched_json(invocation: &str, item: &ClaimedItem) -> serde_json::Result<String> {
    serde_json::to_string(&DispatchedRef { invocation, item })
}

/// A dispatch request as the drain sends it: its headers and body, which the edge
/// copies into the runtime's request unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchRequest {
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

/// The request carrying `item_json`, signed with `secret` at `now_secs`: the
/// signature on the body's first line, then the JSON it signs. No header carries
/// either (trace events record headers), nor any part of the item.
pub fn request(secret: &str, now_secs: i64, item_json: &str) -> DispatchRequest {
    let sig = signature::sign(secret, now_secs, item_json.as_bytes());
    let mut body = String::with_capacity(sig.len() + 1 + item_json.len());
    body.push_str(&sig);
    body.push('\n');
    body.push_str(item_json);
    DispatchRequest {
        headers: vec![("Content-Type", "text/plain; charset=utf-8".into())],
        body,
    }
}

/// What the start of a dispatch body says about its signature line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureLine<'a> {
    /// No newline yet, and still short enough to become a signature line.
    Incomplete,
    /// The signature (without its newline) and where the item's JSON starts.
    Found { signature: &'a str, item_at: usize },
    /// Longer than any signature, or not text: the request cannot be valid.
    Malformed,
}

/// Find the signature line at the start of `body` (all of it, or as much as has
/// arrived). Only the first [`signature::MAX_HEADER_BYTES`] + 1 bytes are looked at.
pub fn signature_line(body: &[u8]) -> SignatureLine<'_> {
    let window = &body[..body.len().min(signature::MAX_HEADER_BYTES + 1)];
    match window.iter().position(|&b| b == b'\n') {
        Some(end) => match std::str::from_utf8(&body[..end]) {
            Ok(signature) => SignatureLine::Found {
                signature,
                item_at: end + 1,
            },
            Err(_) => SignatureLine::Malformed,
        },
        None if window.len() > signature::MAX_HEADER_BYTES => SignatureLine::Malformed,
        None => SignatureLine::Incomplete,
    }
}

/// The header values for an outcome: its kind and, for failures, the reason
/// percent-encoded (header values must be visible ASCII).
pub fn encode(outcome: &Outcome) -> (&'static str, Option<String>) {
    // Cut as every outcome is (`Outcome::bounded`): a kind's reason may be a page.
    let reason = |r: &str| {
        let r = cut_on_char_boundary(r, MAX_REASON_BYTES);
        Some(utf8_percent_encode(r, NON_ALPHANUMERIC).to_string())
    };
    match outcome {
        Outcome::Done => ("done", None),
        Outcome::Retry(r) => ("retry", reason(r)),
        Outcome::Fail(r) => ("fail", reason(r)),
    }
}

/// Read an outcome back from the header values.
pub fn decode(kind: Option<&str>, reason: Option<&str>) -> Result<Outcome, String> {
    let reason = || {
        reason
            .map(|r| percent_decode_str(r).decode_utf8_lossy().into_owned())
            .unwrap_or_else(|| "no reason given".into())
    };
    match kind {
        Some("done") => Ok(Outcome::Done),
        Some("retry") => Ok(Outcome::Retry(reason())),
        Some("fail") => Ok(Outcome::Fail(reason())),
        Some(other) => Err(format!("unknown outcome {other:?}")),
        None => Err(format!("answer without {OUTCOME_HEADER}")),
    }
}

/// Read a retry's own delay back from [`RETRY_AFTER_HEADER`]: ms, not negative.
/// Anything else is no delay (the backoff applies), never a failed dispatch.
pub fn decode_retry_after(value: Option<&str>) -> Option<i64> {
    value?.trim().parse().ok().filter(|ms: &i64| *ms >= 0)
}

/// [`REFUSED_HEADER`]'s value for a refusal: keys percent-encoded, so the
/// value stays visible ASCII whatever a key holds.
pub fn encode_refused(refused: &RefusedBy) -> String {
    let encoded = RefusedBy {
        keys: refused.keys.as_deref().map(encoded_keys),
        with_failure: refused.with_failure,
    };
    serde_json::to_string(&encoded).expect("plain data serialises")
}

/// Keys percent-encoded for a header.
fn encoded_keys(keys: &[String]) -> Vec<String> {
    keys.iter()
        .map(|k| utf8_percent_encode(k, NON_ALPHANUMERIC).to_string())
        .collect()
}

/// Keys back from [`encoded_keys`]; `None` if one does not decode.
fn decoded_keys(keys: &[String]) -> Option<Vec<String>> {
    keys.iter()
        .map(|k| percent_decode_str(k).decode_utf8().map(String::from))
        .collect::<Result<Vec<_>, _>>()
        .ok()
}

/// [`PACED_KEYS_HEADER`]'s value: a JSON array of the keys, each percent-encoded.
pub fn encode_paced_keys(keys: &[String]) -> String {
    serde_json::to_string(&encoded_keys(keys)).expect("plain data serialises")
}

/// Read the paced keys back from [`PACED_KEYS_HEADER`]: anything unreadable
/// is none (the pacing then concerns every key the item holds).
pub fn decode_paced_keys(value: Option<&str>) -> Option<Vec<String>> {
    let keys: Vec<String> = serde_json::from_str(value?).ok()?;
    decoded_keys(&keys)
}

/// [`PACED_HEADER`]'s value.
pub fn encode_paced(paced: &Paced) -> String {
    serde_json::to_string(paced).expect("plain data serialises")
}

/// Read the pacing back from [`PACED_HEADER`]: anything unreadable is none
/// (the keys are paced by the next answer, or refused), never a failed dispatch.
pub fn decode_paced(value: Option<&str>) -> Option<Paced> {
    serde_json::from_str(value?).ok()
}

/// Read a refusal back from [`REFUSED_HEADER`]. Anything unreadable is no
/// refusal (the attempt is spent, as for any retry), never a failed dispatch.
pub fn decode_refused(value: Option<&str>) -> Option<RefusedBy> {
    let encoded: RefusedBy = serde_json::from_str(value?).ok()?;
    let keys = match encoded.keys {
        None => None,
        Some(keys) => Some(decoded_keys(&keys)?),
    };
    Some(RefusedBy {
        keys,
        with_failure: encoded.with_failure,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_travels_in_its_header_and_garbage_is_none() {
        for refused in [
            RefusedBy::default(),
            RefusedBy {
                keys: Some(vec!["host:api.github.com".into(), "ünï, \"x\"".into()]),
                with_failure: true,
            },
        ] {
            let value = encode_refused(&refused);
            assert!(value.bytes().all(|b| b.is_ascii_graphic()), "{value}");
            assert_eq!(decode_refused(Some(&value)), Some(refused));
        }
        assert_eq!(encode_refused(&RefusedBy::default()), "{}");
        for bad in [
            None,
            Some(""),
            Some("yes"),
            Some(r#"{"keys":"x"}"#),
            Some(r#"{"keys":["%ff"]}"#),
        ] {
            assert_eq!(decode_refused(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn pacing_round_trips_and_garbage_is_none() {
        let paced = Paced {
            until: Some(1_795_000_003_000),
            per_minute: Some(120),
            ..Paced::default()
        };
        let value = encode_paced(&paced);
        assert_eq!(value, r#"{"until":1795000003000,"per_minute":120}"#);
        assert_eq!(decode_paced(Some(&value)), Some(paced));
        for bad in [None, Some(""), Some("soon"), Some(r#"{"until":"x"}"#)] {
            assert_eq!(decode_paced(bad), None, "{bad:?}");
        }
        let keys = vec!["host:discord.com".to_string(), "ünï, \"x\"".to_string()];
        let value = encode_paced_keys(&keys);
        assert!(value.bytes().all(|b| b.is_ascii_graphic()), "{value}");
        assert_eq!(decode_paced_keys(Some(&value)), Some(keys));
        for bad in [None, Some("x"), Some(r#"["%ff"]"#), Some(r#"{"keys":[]}"#)] {
            assert_eq!(decode_paced_keys(bad), None, "{bad:?}");
        }
    }

    /// An item as the drain claims it, with everything trace events must not see.
    const SECRET: &str = "dispatch-secret-0123456789";
    const LEASE: &str = "lease-7f3a9c";
    const SIGNING: &str = "subject-signing-secret-42";

    fn claimed_item_json() -> String {
        let item = crate::core::batch::model::ClaimedItem {
            item_id: 7,
            lease_token: LEASE.into(),
            batch_id: "b1".into(),
            subject_id: "s1".into(),
            attempt: 1,
            max_attempts: 5,
            kind: "webhook".into(),
            payload: format!(
                r#"{{"url":"https://example.com/hook","signing_secret":"{SIGNING}","data":{{"user":1}}}}"#
            ),
            receipts: None,
            given_back: 0,
            limits: None,
            start_at: 0,
            refused_since: None,
        };
        serde_json::to_string(&item).unwrap()
    }

    #[test]
    fn no_header_of_a_dispatch_carries_the_item_its_lease_or_its_signature() {
        let json = claimed_item_json();
        let req = request(SECRET, 1_700_000_000, &json);
        let sig = crate::core::security::signature::sign(SECRET, 1_700_000_000, json.as_bytes());
        let tag = sig.split("v1=").nth(1).unwrap();
        for (name, value) in &req.headers {
            for secret in [LEASE, SIGNING, tag, "\"user\""] {
                assert!(
                    !value.contains(secret) && !name.contains(secret),
                    "header {name} carries {secret:?}: {value}"
                );
            }
        }
    }

    #[test]
    fn the_invocation_id_travels_signed_in_the_body_with_the_item() {
        let item: crate::core::batch::model::ClaimedItem =
            serde_json::from_str(&claimed_item_json()).unwrap();
        let json = dispatched_json("inv-7f3a", &item).unwrap();
        let req = request(SECRET, 1_700_000_000, &json);
        // The only header stays the content type.
        assert_eq!(
            req.headers,
            [("Content-Type", "text/plain; charset=utf-8".to_string())]
        );
        let SignatureLine::Found { signature, item_at } = signature_line(req.body.as_bytes())
        else {
            panic!("no signature line");
        };
        let signed = &req.body.as_bytes()[item_at..];
        let header = signature::SignatureHeader::parse(Some(signature)).unwrap();
        assert_eq!(header.check_tag([SECRET], signed), Ok(()));
        let back: Dispatched = serde_json::from_slice(signed).unwrap();
        assert_eq!(
            back,
            Dispatched {
                invocation: "inv-7f3a".into(),
                item
            }
        );
        // A bare item (no invocation) is not a dispatch.
        assert!(serde_json::from_str::<Dispatched>(&claimed_item_json()).is_err());
    }

    #[test]
    fn outcomes_round_trip_through_header_values() {
        for o in [
            Outcome::Done,
            Outcome::Retry("HTTP 503".into()),
            Outcome::Fail("permanent: ünïcode, commas, \"quotes\"\nand newlines".into()),
        ] {
            let (kind, reason) = encode(&o);
            if let Some(r) = &reason {
                assert!(r.bytes().all(|b| b.is_ascii_graphic()), "{r}");
            }
            assert_eq!(decode(Some(kind), reason.as_deref()), Ok(o));
        }
    }

    #[test]
    fn long_reasons_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_REASON_BYTES);
        let (_, reason) = encode(&Outcome::Retry(long));
        match decode(Some("retry"), reason.as_deref()).unwrap() {
            Outcome::Retry(r) => assert_eq!(r.len(), MAX_REASON_BYTES),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_body_is_the_signature_line_then_the_signed_json() {
        let json = claimed_item_json();
        let req = request(SECRET, 1_700_000_000, &json);
        let SignatureLine::Found { signature, item_at } = signature_line(req.body.as_bytes())
        else {
            panic!("no signature line in {:?}", req.body);
        };
        assert_eq!(&req.body.as_bytes()[item_at..], json.as_bytes());
        let header = signature::SignatureHeader::parse(Some(signature)).unwrap();
        assert_eq!(header.timestamp, 1_700_000_000);
        assert_eq!(header.check_tag([SECRET], json.as_bytes()), Ok(()));
        assert!(header
            .check_tag(["another-secret-0123456"], json.as_bytes())
            .is_err());
    }

    #[test]
    fn the_signature_line_is_found_as_the_body_arrives() {
        let sig = signature::sign(SECRET, 1_700_000_000, b"{}");
        let body = format!("{sig}\n{{}}");
        // Any prefix ending before the newline is incomplete; with it, found.
        assert_eq!(
            signature_line(&body.as_bytes()[..sig.len()]),
            SignatureLine::Incomplete
        );
        assert_eq!(signature_line(b""), SignatureLine::Incomplete);
        assert_eq!(
            signature_line(&body.as_bytes()[..sig.len() + 1]),
            SignatureLine::Found {
                signature: sig.as_str(),
                item_at: sig.len() + 1
            }
        );
        // No line within the longest signature: refused without reading further.
        let spaces = vec![b' '; signature::MAX_HEADER_BYTES + 1];
        assert_eq!(signature_line(&spaces), SignatureLine::Malformed);
        let mut long = vec![b' '; signature::MAX_HEADER_BYTES];
        long.push(b'\n');
        assert!(matches!(signature_line(&long), SignatureLine::Found { .. }));
        assert_eq!(signature_line(b"t=1,\xff\n{}"), SignatureLine::Malformed);
        // An item's own newlines are after the first one: not the signature's.
        assert!(matches!(
            signature_line(b"t=1,v1=00\n{\"a\":\"x\\ny\"}\n"),
            SignatureLine::Found { item_at: 10, .. }
        ));
    }

    #[test]
    fn a_retry_after_header_reads_back_as_its_delay_and_anything_else_as_none() {
        use crate::core::batch::model::Ran;
        let ran = Ran {
            retry_after_ms: Some(2_000),
            own_delay: false,
            ..Ran::from(Outcome::Retry("HTTP 429: slow down".into()))
        };
        let sent = ran.retry_after_ms.map(|ms| ms.to_string());
        assert_eq!(decode_retry_after(sent.as_deref()), Some(2_000));
        assert_eq!(decode_retry_after(Some("0")), Some(0));
        for bad in [None, Some("-1"), Some("1.5"), Some("soon"), Some("")] {
            assert_eq!(decode_retry_after(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn missing_or_unknown_kinds_are_errors() {
        assert!(decode(None, None).is_err());
        assert!(decode(Some("maybe"), None).is_err());
        assert_eq!(
            decode(Some("fail"), None),
            Ok(Outcome::Fail("no reason given".into()))
        );
    }
}
