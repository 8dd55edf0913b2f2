//! The streak, pure: which local day it is for the user (`now` and their zone in),
//! whether that day has a contribution, and how many days in a row end at it.
//! GitHub's calendar is a list of dates with counts; it is read as the user's
//! own days (see the README on which zone GitHub dates its days in).

use std::collections::HashMap;

use chrono::{DateTime, Days, NaiveDate};
use chrono_tz::Tz;

/// One day of the contribution calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Day {
    pub date: NaiveDate,
    pub count: u32,
}

/// Where the user stands today.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streak {
    /// The user's local date at `now`.
    pub today: NaiveDate,
    /// Whether `today` has a contribution.
    pub contributed_today: bool,
    /// Days in a row with a contribution, ending today, or yesterday when today
    /// has none yet (a streak is not broken before the day is over).
    pub current: u32,
}

impl Streak {
    /// A streak that ends at midnight unless the user contributes: no
    /// contribution today, and one yesterday.
    pub fn at_risk(&self) -> bool {
        !self.contributed_today && self.current > 0
    }
}

/// The local date in `zone` at `now_ms` (ms since the epoch).
pub fn local_date(now_ms: i64, zone: Tz) -> NaiveDate {
    let utc =
        DateTime::from_timestamp_millis(now_ms).expect("a clock reading is in chrono's range");
    utc.with_timezone(&zone).date_naive()
}

/// The streak as of `today` from the calendar's days (any order; days after
/// `today` are ignored: a calendar can run ahead of a zone behind GitHub's; a
/// date missing from the calendar counts as no contribution).
pub fn streak(days: &[Day], today: NaiveDate) -> Streak {
    let mut counts: HashMap<NaiveDate, u32> = HashMap::new();
    for d in days.iter().filter(|d| d.date <= today) {
        *counts.entry(d.date).or_default() += d.count;
    }
    let has = |date: NaiveDate| counts.get(&date).is_some_and(|&c| c > 0);
    let contributed_today = has(today);
    let mut day = if contributed_today {
        Some(today)
    } else {
        today.checked_sub_days(Days::new(1))
    };
    let mut current = 0;
    while let Some(d) = day.filter(|&d| has(d)) {
        current += 1;
        day = d.checked_sub_days(Days::new(1));
    }
    Streak {
        today,
        contributed_today,
        current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDateTime, TimeZone};

    fn date(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    fn zone(name: &str) -> Tz {
        name.parse().unwrap()
    }

    /// The instant `local` ("YYYY-MM-DDTHH:MM:SS") in `zone` names, in ms (the
    /// earlier one when the local time happens twice).
    fn at(local: &str, zone_name: &str) -> i64 {
        let naive: NaiveDateTime = local.parse().unwrap();
        zone(zone_name)
            .from_local_datetime(&naive)
            .earliest()
            .unwrap()
            .timestamp_millis()
    }

    fn utc(instant: &str) -> i64 {
        DateTime::parse_from_rfc3339(instant)
            .unwrap()
            .timestamp_millis()
    }

    /// A calendar from `(date, count)` pairs.
    fn calendar(days: &[(&str, u32)]) -> Vec<Day> {
        days.iter()
            .map(|&(d, count)| Day {
                date: date(d),
                count,
            })
            .collect()
    }

    #[test]
    fn the_local_date_is_the_users_not_utcs_across_midnight() {
        // 23:30 UTC is already tomorrow in Berlin, still today in New York.
        let now = utc("2026-11-24T23:30:00Z");
        assert_eq!(local_date(now, zone("Europe/Berlin")), date("2026-11-25"));
        assert_eq!(
            local_date(now, zone("America/New_York")),
            date("2026-11-24")
        );
        assert_eq!(local_date(now, zone("UTC")), date("2026-11-24"));
        // 00:30 UTC is still yesterday in Los Angeles.
        let now = utc("2026-11-25T00:30:00Z");
        assert_eq!(
            local_date(now, zone("America/Los_Angeles")),
            date("2026-11-24")
        );
    }

    #[test]
    fn the_zones_at_the_ends_of_the_day_are_a_calendar_day_apart() {
        // At 18:00 on Kiritimati (UTC+14), Pago Pago (UTC-11) is a day behind.
        let now = at("2026-11-24T18:00:00", "Pacific/Kiritimati");
        assert_eq!(
            local_date(now, zone("Pacific/Kiritimati")),
            date("2026-11-24")
        );
        assert_eq!(
            local_date(now, zone("Pacific/Pago_Pago")),
            date("2026-11-23")
        );
    }

    #[test]
    fn the_last_and_first_second_of_a_local_day() {
        let zone_name = "Asia/Kolkata"; // UTC+05:30: midnight is not on a UTC hour
        let last = at("2026-11-24T23:59:59", zone_name);
        assert_eq!(local_date(last, zone(zone_name)), date("2026-11-24"));
        assert_eq!(
            local_date(last + 1_000, zone(zone_name)),
            date("2026-11-25")
        );
    }

    #[test]
    fn dst_days_keep_their_date_on_both_sides_of_the_change() {
        // Berlin springs forward at 02:00 on 2026-03-29 (a 23-hour day) and falls
        // back at 03:00 on 2026-10-25 (a 25-hour day).
        let berlin = zone("Europe/Berlin");
        for local in [
            "2026-03-29T00:30:00",
            "2026-03-29T03:30:00",
            "2026-03-29T18:00:00",
            "2026-03-29T23:59:00",
        ] {
            assert_eq!(
                local_date(at(local, "Europe/Berlin"), berlin),
                date("2026-03-29"),
                "{local}"
            );
        }
        // 02:30 happens twice on the fall-back day; both are that day, and the
        // day's last hour is still it.
        let first = at("2026-10-25T02:30:00", "Europe/Berlin");
        assert_eq!(local_date(first, berlin), date("2026-10-25"));
        assert_eq!(local_date(first + 3_600_000, berlin), date("2026-10-25"));
        assert_eq!(
            local_date(at("2026-10-25T23:59:00", "Europe/Berlin"), berlin),
            date("2026-10-25")
        );
        // 18:00 New York on its fall-back day is 23:00 UTC, not 22:00.
        let ny = at("2026-11-01T18:00:00", "America/New_York");
        assert_eq!(ny, utc("2026-11-01T23:00:00Z"));
        assert_eq!(local_date(ny, zone("America/New_York")), date("2026-11-01"));
    }

    #[test]
    fn a_streak_ending_yesterday_is_at_risk_today() {
        let days = calendar(&[
            ("2026-11-20", 0),
            ("2026-11-21", 1),
            ("2026-11-22", 4),
            ("2026-11-23", 2),
            ("2026-11-24", 0),
        ]);
        let s = streak(&days, date("2026-11-24"));
        assert_eq!((s.contributed_today, s.current), (false, 3));
        assert!(s.at_risk());
    }

    #[test]
    fn a_contribution_today_extends_the_streak_and_it_is_safe() {
        let days = calendar(&[("2026-11-22", 1), ("2026-11-23", 2), ("2026-11-24", 1)]);
        let s = streak(&days, date("2026-11-24"));
        assert_eq!((s.contributed_today, s.current), (true, 3));
        assert!(!s.at_risk());
    }

    #[test]
    fn a_streak_broken_yesterday_is_not_at_risk() {
        let days = calendar(&[
            ("2026-11-21", 3),
            ("2026-11-22", 5),
            ("2026-11-23", 0),
            ("2026-11-24", 0),
        ]);
        let s = streak(&days, date("2026-11-24"));
        assert_eq!((s.contributed_today, s.current), (false, 0));
        assert!(!s.at_risk());
    }

    #[test]
    fn an_empty_calendar_has_no_streak_to_lose() {
        let s = streak(&[], date("2026-11-24"));
        assert_eq!(
            s,
            Streak {
                today: date("2026-11-24"),
                contributed_today: false,
                current: 0
            }
        );
        assert!(!s.at_risk());
    }

    #[test]
    fn days_after_the_users_today_do_not_count() {
        // GitHub's calendar already has the 25th (a zone ahead of the user's);
        // for a user still on the 24th that is not today.
        let days = calendar(&[("2026-11-23", 1), ("2026-11-24", 0), ("2026-11-25", 6)]);
        let s = streak(&days, date("2026-11-24"));
        assert_eq!((s.contributed_today, s.current), (false, 1));
        assert!(s.at_risk());
    }

    #[test]
    fn a_day_missing_from_the_calendar_breaks_the_streak_and_order_does_not_matter() {
        let days = calendar(&[("2026-11-23", 1), ("2026-11-20", 1), ("2026-11-21", 2)]);
        let s = streak(&days, date("2026-11-24"));
        // The 22nd is missing: only the 23rd counts.
        assert_eq!((s.contributed_today, s.current), (false, 1));
    }

    #[test]
    fn a_streak_runs_across_month_and_year_ends() {
        let days = calendar(&[
            ("2026-12-30", 1),
            ("2026-12-31", 1),
            ("2027-01-01", 1),
            ("2027-01-02", 0),
        ]);
        let s = streak(&days, date("2027-01-02"));
        assert_eq!((s.contributed_today, s.current), (false, 3));
    }
}
