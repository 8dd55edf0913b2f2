//! Time formatting and the daily batch key. The clock itself lives in `edge`.

use chrono::{DateTime, SecondsFormat, Utc};

/// Milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds.
pub fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// Milliseconds since the Unix epoch from an RFC 3339 timestamp (any offset).
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Serde for a millisecond timestamp that is RFC 3339 text in JSON (the API's and
/// the logs' form): `#[serde(with = "crate::core::time::rfc3339_ms")]`.
pub mod rfc3339_ms {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::rfc3339(*ms))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_rfc3339(&text)
            .ok_or_else(|| D::Error::custom(format!("not an RFC 3339 timestamp: {text:?}")))
    }
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

    #[test]
    fn rfc3339_parses_back_to_the_same_millisecond() {
        for ms in [0, 1, 999, 1_795_262_400_123, 1_795_305_599_999] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms));
        }
        assert_eq!(
            parse_rfc3339("2026-11-21T13:00:00.123+01:00"),
            Some(1_795_262_400_123)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
