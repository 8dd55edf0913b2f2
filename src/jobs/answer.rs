//! How another party's HTTP answer becomes an outcome, the same for every kind
//! that reads one: the status class of [`super::webhook::classify_status`] (2xx
//! done; 408, 425, 429, 5xx retry; 3xx and other 4xx fail), the first
//! [`MAX_TEXT_BYTES`] of the answer's text in the reason, and a `Retry-After` in
//! seconds on a retry answer as the next attempt's delay (`Outcome::RetryAfter`;
//! the drain caps it by the retry cap).

use super::outbound::Response;
use super::webhook::classify_status;
use crate::core::model::Outcome;

/// Most bytes of an answer's text kept in a reason (cut on a char boundary).
pub const MAX_TEXT_BYTES: usize = 200;

/// The outcome of `status` with the answer's `text` and `Retry-After` value.
pub fn map(status: u16, text: &str, retry_after: Option<&str>) -> Outcome {
    let text = cut(text.trim(), MAX_TEXT_BYTES);
    let outcome = classify_status(status).map_reason(|reason| match text {
        "" => reason,
        text => format!("{reason}: {text}"),
    });
    match (outcome, retry_after.and_then(retry_after_ms)) {
        (Outcome::Retry(reason), Some(delay_ms)) => Outcome::RetryAfter { reason, delay_ms },
        (outcome, _) => outcome,
    }
}

/// [`map`] of a response as the seam returns it.
pub fn from_response(response: &Response) -> Outcome {
    map(
        response.status,
        &response.body,
        response.header_value("Retry-After"),
    )
}

/// `Retry-After: <seconds>` in ms; an HTTP date or anything else is ignored (the
/// backoff applies). Bounded so the product cannot overflow; the cap applies later.
fn retry_after_ms(value: &str) -> Option<i64> {
    let secs: u32 = value.trim().parse().ok()?;
    Some(i64::from(secs) * 1_000)
}

fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_as_for_webhooks_with_the_answers_text() {
        assert_eq!(map(200, "ignored", None), Outcome::Done);
        assert_eq!(map(204, "", Some("5")), Outcome::Done);
        assert_eq!(
            map(503, " busy \n", None),
            Outcome::Retry("HTTP 503: busy".into())
        );
        assert_eq!(map(408, "", None), Outcome::Retry("HTTP 408".into()));
        assert_eq!(
            map(422, "bad user", None),
            Outcome::Fail("HTTP 422: bad user".into())
        );
        assert_eq!(
            map(301, "moved", None),
            Outcome::Fail("HTTP 301: redirects are not followed: moved".into())
        );
    }

    #[test]
    fn the_text_is_cut_to_200_bytes_on_a_char_boundary() {
        let Outcome::Fail(reason) = map(400, &"é".repeat(150), None) else {
            panic!("a 400 is permanent");
        };
        let text = reason.strip_prefix("HTTP 400: ").unwrap();
        assert_eq!(text.len(), MAX_TEXT_BYTES);
        assert_eq!(text, "é".repeat(100));
    }

    #[test]
    fn retry_after_in_seconds_delays_a_retry_only() {
        assert_eq!(
            map(429, "slow down", Some(" 2 ")),
            Outcome::RetryAfter {
                reason: "HTTP 429: slow down".into(),
                delay_ms: 2_000
            }
        );
        // A date, a negative or a fraction is not seconds: the backoff applies.
        for other in ["Wed, 21 Oct 2015 07:28:00 GMT", "-1", "1.5", ""] {
            assert_eq!(
                map(503, "", Some(other)),
                Outcome::Retry("HTTP 503".into()),
                "{other}"
            );
        }
        // On a permanent failure it means nothing.
        assert_eq!(map(400, "", Some("2")), Outcome::Fail("HTTP 400".into()));
    }
}
