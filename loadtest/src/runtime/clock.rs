//! The Worker's test clock as the harness sees it: a runtime started with
//! `TEST_CLOCK_OFFSET_MS` (and `ALLOW_TEST_CLOCK=true`) reads real time plus the
//! offset, so the suite can run ticks "at" chosen instants. The offset is fixed per
//! `wrangler dev` start; moving the clock means restarting with another one.

use chrono::{DateTime, Duration, Utc};

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

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn the_offset_maps_real_time_to_the_chosen_instant() {
        let real = t("2026-11-21T08:00:00Z");
        let clock = TestClock::at(t("2026-11-21T12:00:30Z"), real);
        assert_eq!(clock.offset_ms, 4 * 3_600_000 + 30_000);
        assert_eq!(clock.vars()[1], ("TEST_CLOCK_OFFSET_MS", "14430000".into()));
    }
}
