//! What the three APIs' answers share: a retry's delay (`Retry-After` in
//! seconds, which Discord sends with a fraction, or the delay in the JSON body
//! as Discord and Telegram also give it) and text cut to fit a reason, with the
//! secrets taken out.

use cron_fanout::jobs::webhook::MAX_ANSWER_TEXT_BYTES;
use cron_fanout::jobs::Response;
use serde_json::Value;

/// The delay a rate-limited answer asks for, in ms: the `Retry-After` header in
/// seconds (a fraction rounded up), else the body's `retry_after` (Discord) or
/// `parameters.retry_after` (Telegram). An HTTP date is not used: the sender's
/// clock is not ours.
pub fn retry_after_ms(response: &Response) -> Option<i64> {
    let seconds = |v: &Value| v.as_f64();
    let from_header = response
        .header_value("Retry-After")
        .and_then(|v| v.trim().parse::<f64>().ok());
    let from_body = || {
        let body: Value = serde_json::from_slice(&response.body).ok()?;
        body.get("retry_after")
            .and_then(seconds)
            .or_else(|| body.pointer("/parameters/retry_after").and_then(seconds))
    };
    from_header
        .or_else(from_body)
        .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 86_400.0)
        .map(|s| (s * 1_000.0).ceil() as i64)
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
    Response {
        status,
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: body.into(),
        whole: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(headers: &[(&str, &str)], body: &str) -> Response {
        response(429, headers, body)
    }

    #[test]
    fn retry_after_comes_from_the_header_or_the_body() {
        assert_eq!(
            retry_after_ms(&answer(&[("Retry-After", "7")], "")),
            Some(7_000)
        );
        assert_eq!(
            retry_after_ms(&answer(&[("retry-after", "1.25")], "")),
            Some(1_250)
        );
        let discord =
            r#"{"message": "You are being rate limited.", "retry_after": 0.5, "global": false}"#;
        assert_eq!(retry_after_ms(&answer(&[], discord)), Some(500));
        let telegram = r#"{"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 12", "parameters": {"retry_after": 12}}"#;
        assert_eq!(retry_after_ms(&answer(&[], telegram)), Some(12_000));
        for none in [
            answer(&[], ""),
            answer(&[("Retry-After", "Wed, 21 Oct 2026 07:28:00 GMT")], ""),
            answer(&[("Retry-After", "-3")], ""),
        ] {
            assert_eq!(retry_after_ms(&none), None, "{none:?}");
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
