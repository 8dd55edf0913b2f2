//! The wire format of a child's answer to `POST /internal/run`: the outcome travels
//! in response headers with an empty body, so the dispatcher never reads a body
//! stream. Measured locally: reading a JSON body cost about 0.2 ms of CPU per call,
//! a third of the whole per-item cost (docs/benchmarks.md).

use percent_encoding::{percent_decode_str, utf8_percent_encode, NON_ALPHANUMERIC};

use super::model::Outcome;

/// Status of a child's answer carrying an outcome; any other status is a failed call.
pub const OUTCOME_STATUS: u16 = 204;
pub const OUTCOME_HEADER: &str = "Fanout-Outcome";
pub const REASON_HEADER: &str = "Fanout-Outcome-Reason";

/// Reasons are cut to this many bytes: they end up in `last_error`, not in a report.
const MAX_REASON_BYTES: usize = 1_000;

/// The header values for an outcome: its kind and, for failures, the reason
/// percent-encoded (header values must be visible ASCII).
pub fn encode(outcome: &Outcome) -> (&'static str, Option<String>) {
    let reason = |r: &str| {
        let mut end = r.len().min(MAX_REASON_BYTES);
        while !r.is_char_boundary(end) {
            end -= 1;
        }
        Some(utf8_percent_encode(&r[..end], NON_ALPHANUMERIC).to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn missing_or_unknown_kinds_are_errors() {
        assert!(decode(None, None).is_err());
        assert!(decode(Some("maybe"), None).is_err());
        assert_eq!(
            decode(Some("fail"), None),
            Ok(Outcome::Fail("no reason given".into()))
        );
    }
}
