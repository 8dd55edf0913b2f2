//! Time formatting and the daily batch key. The clock itself lives in `edge`.

use chrono::{DateTime, SecondsFormat, Utc};

/// Milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds.
pub fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// The daily batch key for a scheduled time: `daily:<UTC date>`. Re-firing the
/// cron the same UTC day yields the same key, which is what makes it idempotent.
pub fn daily_batch_key(scheduled_ms: i64) -> String {
    let date = DateTime::<Utc>::from_timestamp_millis(scheduled_ms)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| "1970-01-01".into());
    format!("daily:{date}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daily_key_is_the_utc_date_of_the_scheduled_time() {
        // 2026-11-21T12:00:00Z and 23:59:59.999Z the same day share a key.
        assert_eq!(daily_batch_key(1_795_262_400_000), "daily:2026-11-21");
        assert_eq!(daily_batch_key(1_795_305_599_999), "daily:2026-11-21");
        assert_eq!(daily_batch_key(1_795_305_600_000), "daily:2026-11-22");
    }

    #[test]
    fn rfc3339_has_milliseconds_and_z() {
        assert_eq!(rfc3339(1_795_262_400_123), "2026-11-21T12:00:00.123Z");
    }
}
