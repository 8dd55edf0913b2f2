//! What the three APIs' answers share: the receiver's word on them (a retry's
//! delay, a refusal: read by cron-fanout's own reader, `core::receiver`, so the
//! example parses no rate-limit header itself) and text cut to fit a reason,
//! with the secrets taken out.

use cron_fanout::core::receiver::Word;
use cron_fanout::jobs::webhook::{read_word, MAX_ANSWER_TEXT_BYTES};
use cron_fanout::jobs::Response;

/// What an answer received at `now_ms` says of its API's limits: whether it
/// refused, how long it asks to wait (`Retry-After` in seconds or as a date,
/// Discord's `retry_after` and Telegram's `parameters.retry_after` in the body,
/// GitHub's `x-ratelimit-reset`, ...), capped at a week.
pub fn word(response: &Response, now_ms: i64) -> Word {
    read_word(response, now_ms)
}

/// The delay an answer received at `now_ms` asks for, in ms.
pub fn retry_after_ms(response: &Response, now_ms: i64) -> Option<i64> {
    word(response, now_ms).wait_ms(now_ms)
}

/// `text` on one line, cut to the bytes a reason keeps.
pub fn cut(text: &str) -> String {
    let mut end = text.len().min(MAX_ANSWER_TEXT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

/// `text` with every secret in it replaced: an error from the runtime's fetch
/// may quote the URL, and Telegram's has the bot token in its path.
pub fn scrub(text: &str, secrets: &[&str]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_string(), |t, s| t.replace(s, "[redacted]"))
}

/// An answer as the tests write one: status, headers, body.
#[cfg(test)]
pub(crate) fn response(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
    headers
        .iter()
        .fold(Response::with_body(status, body), |r, (n, v)| {
            r.header(n, v)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(headers: &[(&str, &str)], body: &str) -> Response {
        response(429, headers, body)
    }

    /// 2026-10-21T07:28:00Z, as an answer's `Date` would say it.
    const NOW: i64 = 1_792_567_680_000;

    #[test]
    fn retry_after_comes_from_the_header_or_the_body() {
        let after =
            |headers: &[(&str, &str)], body: &str| retry_after_ms(&answer(headers, body), NOW);
        assert_eq!(after(&[("Retry-After", "7")], ""), Some(7_000));
        assert_eq!(after(&[("retry-after", "1.25")], ""), Some(1_250));
        let discord =
            r#"{"message": "You are being rate limited.", "retry_after": 0.5, "global": false}"#;
        assert_eq!(after(&[], discord), Some(500));
        let telegram = r#"{"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 12", "parameters": {"retry_after": 12}}"#;
        assert_eq!(after(&[], telegram), Some(12_000));
        // A date is measured against the answer's own Date: the sender's clock.
        let dated = [
            ("Date", "Wed, 21 Oct 2026 07:28:00 GMT"),
            ("Retry-After", "Wed, 21 Oct 2026 07:28:30 GMT"),
        ];
        assert_eq!(after(&dated, ""), Some(30_000));
        for none in [answer(&[], ""), answer(&[("Retry-After", "-3")], "")] {
            assert_eq!(retry_after_ms(&none, NOW), None, "{none:?}");
        }
    }

    #[test]
    fn reasons_are_one_cut_line_without_secrets() {
        assert_eq!(cut(" a\nb "), "a b");
        assert_eq!(cut(&"é".repeat(150)).len(), 200);
        assert_eq!(
            scrub(
                "fetch https://t.test/bot123:abc/sendMessage failed",
                &["123:abc", ""]
            ),
            "fetch https://t.test/bot[redacted]/sendMessage failed"
        );
    }
}
