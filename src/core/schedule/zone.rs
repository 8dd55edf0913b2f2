//! Time zones: IANA names (the full tz database compiled in by `chrono-tz`) and the
//! local-time rules every schedule follows.

use chrono::{DateTime, LocalResult, NaiveDate, NaiveDateTime, TimeDelta, TimeZone};
use chrono_tz::Tz;

use crate::core::error::ApiError;

/// The `timezone` of a schedule that fires each subject at its own local time.
pub const SUBJECT_ZONE: &str = "subject";
/// The default zone of subjects and schedules.
pub const DEFAULT_ZONE: &str = "UTC";

/// An IANA zone name (case-sensitive, as in the tz database: `Europe/Berlin`, `UTC`).
pub fn parse_zone(name: &str) -> Option<Tz> {
    name.parse().ok()
}

/// Validate a subject's `timezone` (part of `PUT /subjects`): 400 `invalid_timezone`.
pub fn validate_timezone(field: &str, name: &str) -> Result<Tz, ApiError> {
    parse_zone(name).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_timezone",
            format!(
                "{field}: {name:?} is not an IANA time zone name (e.g. \"Europe/Berlin\", \"UTC\")"
            ),
        )
    })
}

/// `ms` (Unix milliseconds) in `tz`; `None` only outside chrono's range of years.
pub fn in_zone(tz: Tz, ms: i64) -> Option<DateTime<Tz>> {
    tz.timestamp_millis_opt(ms).single()
}

/// The first instant whose local date in `tz` is `date`. Midnight itself can fall
/// in a spring-forward gap (some zones switch at 00:00): then it is the first valid
/// minute after it.
pub fn start_of_day(tz: Tz, date: NaiveDate) -> Option<DateTime<Tz>> {
    first_valid_at_or_after(tz, date.and_hms_opt(0, 0, 0)?)
}

/// `local` in `tz`: the first occurrence of an ambiguous (fall-back) time, the first
/// valid minute after a time that does not exist (spring-forward).
pub fn first_valid_at_or_after(tz: Tz, local: NaiveDateTime) -> Option<DateTime<Tz>> {
    // Gaps last minutes to hours (one historical day-long skip); two days bound it.
    (0..=2 * 24 * 60).find_map(|minute| {
        match tz.from_local_datetime(&local.checked_add_signed(TimeDelta::minutes(minute))?) {
            LocalResult::Single(t) => Some(t),
            LocalResult::Ambiguous(first, _) => Some(first),
            LocalResult::None => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    fn utc_ms(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    #[test]
    fn names_are_iana_and_case_sensitive() {
        for ok in [
            "UTC",
            "Europe/Berlin",
            "America/New_York",
            "Australia/Lord_Howe",
            "Pacific/Kiritimati",
            "Etc/GMT+5",
        ] {
            assert!(validate_timezone("timezone", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "utc",
            "europe/berlin",
            "Mars/Olympus",
            "subject",
            "+02:00",
        ] {
            let e = validate_timezone("subjects[0].timezone", bad).unwrap_err();
            assert_eq!(e.code(), "invalid_timezone", "{bad}");
            assert!(e.public_message().starts_with("subjects[0].timezone"));
        }
    }

    #[test]
    fn a_day_starts_at_local_midnight_or_just_after_a_midnight_gap() {
        let berlin = parse_zone("Europe/Berlin").unwrap();
        assert_eq!(
            start_of_day(berlin, day(2026, 3, 29))
                .unwrap()
                .timestamp_millis(),
            utc_ms("2026-03-28T23:00:00Z")
        );
        // America/Santiago springs forward at 24:00 -> 01:00 (2026-09-06).
        let santiago = parse_zone("America/Santiago").unwrap();
        assert_eq!(
            start_of_day(santiago, day(2026, 9, 6))
                .unwrap()
                .timestamp_millis(),
            utc_ms("2026-09-06T04:00:00Z")
        );
    }

    #[test]
    fn gaps_move_forward_and_repeats_take_the_first() {
        let ny = parse_zone("America/New_York").unwrap();
        let local =
            |d: u32, h: u32, mi: u32, m: u32| day(2026, m, d).and_hms_opt(h, mi, 0).unwrap();
        // 2026-03-08 02:00 EST -> 03:00 EDT: 02:30 does not exist.
        assert_eq!(
            first_valid_at_or_after(ny, local(8, 2, 30, 3))
                .unwrap()
                .timestamp_millis(),
            utc_ms("2026-03-08T07:00:00Z")
        );
        // 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens twice.
        assert_eq!(
            first_valid_at_or_after(ny, local(1, 1, 30, 11))
                .unwrap()
                .timestamp_millis(),
            utc_ms("2026-11-01T05:30:00Z")
        );
    }
}
