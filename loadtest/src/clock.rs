//! The Worker's test clock as the harness sees it: a runtime started with
//! `TEST_CLOCK_OFFSET_MS` (and `ALLOW_TEST_CLOCK=true`) reads real time plus the
//! offset, so the suite can run ticks "at" chosen instants. The offset is fixed per
//! `wrangler dev` start; moving the clock means restarting with another one.

use chrono::{DateTime, Duration, NaiveTime, Utc};

/// Milliseconds added to the Worker's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestClock {
    pub offset_ms: i64,
}

impl TestClock {
    /// The offset that puts a Worker started at `real_now` at `virtual_now`.
    pub fn at(virtual_now: DateTime<Utc>, real_now: DateTime<Utc>) -> TestClock {
        TestClock {
            offset_ms: (virtual_now - real_now).num_milliseconds(),
        }
    }

    /// The Worker's clock now.
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + Duration::milliseconds(self.offset_ms)
    }

    /// The `--var` settings that install this clock.
    pub fn vars(&self) -> [(&'static str, String); 2] {
        [
            ("ALLOW_TEST_CLOCK", "true".to_string()),
            ("TEST_CLOCK_OFFSET_MS", self.offset_ms.to_string()),
        ]
    }
}

/// 12:00:30 UTC on the date `real_now + lead` falls on. A Worker whose clock starts
/// there (offset negative when the real time is later that day) has passed the
/// `daily` schedule's 12:00 fire by its first tick, whatever the real time of day:
/// the migration set that fire to 12:00 of the real date it ran on, and `lead`
/// covers migrations and start-up running past a real midnight.
pub fn noon_of(real_now: DateTime<Utc>, lead: Duration) -> DateTime<Utc> {
    let noon = NaiveTime::from_hms_opt(12, 0, 30).expect("a valid time");
    (real_now + lead).date_naive().and_time(noon).and_utc()
}

/// The key of the `daily` batch that a tick at `virtual_now` fires: the UTC date of
/// the latest 12:00 at or before it (`daily:<date>`).
pub fn daily_key(virtual_now: DateTime<Utc>) -> String {
    let date = (virtual_now - Duration::hours(12)).date_naive();
    format!("daily:{}", date.format("%Y-%m-%d"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn noon_of_the_real_date_unless_midnight_is_near() {
        let lead = Duration::minutes(5);
        for real in [
            "2026-11-21T08:00:00Z",
            "2026-11-21T15:00:00Z",
            "2026-11-21T23:54:59Z",
        ] {
            assert_eq!(noon_of(t(real), lead), t("2026-11-21T12:00:30Z"), "{real}");
        }
        assert_eq!(
            noon_of(t("2026-11-21T23:55:00Z"), lead),
            t("2026-11-22T12:00:30Z"),
            "the migration may run after midnight"
        );
    }

    #[test]
    fn daily_keys_follow_the_latest_noon() {
        assert_eq!(daily_key(t("2026-11-21T12:00:30Z")), "daily:2026-11-21");
        assert_eq!(daily_key(t("2026-11-21T23:59:59Z")), "daily:2026-11-21");
        assert_eq!(daily_key(t("2026-11-22T11:59:59Z")), "daily:2026-11-21");
        assert_eq!(daily_key(t("2026-11-22T12:00:00Z")), "daily:2026-11-22");
    }

    #[test]
    fn the_offset_maps_real_time_to_the_chosen_instant() {
        let real = t("2026-11-21T08:00:00Z");
        let clock = TestClock::at(t("2026-11-21T12:00:30Z"), real);
        assert_eq!(clock.offset_ms, 4 * 3_600_000 + 30_000);
        assert_eq!(clock.vars()[1], ("TEST_CLOCK_OFFSET_MS", "14430000".into()));
    }
}
