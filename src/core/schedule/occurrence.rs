//! When a schedule fires. Pure: `t` and the zones in use are arguments.
//!
//! A schedule's *occurrences* are the instants its batches are due:
//! - `every_seconds: N`: the multiples of N seconds since 1970-01-01T00:00Z (every
//!   900 s is :00, :15, :30, :45 UTC), so re-saving a schedule never shifts it.
//!   Keyed by the instant, or by the UTC date when N is a day or more;
//! - `at`: that one instant, keyed by it;
//! - a cron that fires at most once a day (see [`CronExpr::fires_at_most_daily`]):
//!   one occurrence per matching *local date* D, due at D's local fire time in its
//!   zone, or with `"timezone": "subject"` at the earliest of D's local fire times
//!   across the zones in use (UTC+14 first). Its batch key ends with D;
//! - any other cron: croner's matches in its zone. Its batch key ends with the instant.
//!
//! DST, for crons that fire at most once a day (each zone on its own with
//! `"subject"`): a local time skipped by spring-forward runs at the first valid
//! instant after it, a repeated one once, at its first occurrence. Other crons
//! follow croner's rule instead: a time in the skipped hour does not run that day,
//! one in the repeated hour runs at both passes (`30 2,14 * * *` in Europe/Berlin
//! runs three times on 2026-10-25, `0 2,14 * * *` once on 2026-03-29).

use chrono::{Days, NaiveDate, NaiveDateTime, TimeDelta};
use chrono_tz::Tz;

use super::cron::CronExpr;
use super::zone::{first_valid_at_or_after, in_zone, start_of_day};
use super::{ScheduleSpec, Timing, Zone};
use crate::core::time::rfc3339;

/// One firing of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occurrence {
    /// When the batch is due: the earliest item time, before jitter.
    pub fire_at: i64,
    /// What follows `<schedule id>:` in the batch key: a local date `YYYY-MM-DD`
    /// for schedules that fire at most once per local day, else the instant.
    pub key_suffix: String,
    /// `"timezone": "subject"` only: each zone in use → its local fire instant.
    pub zone_times: Vec<(String, i64)>,
}

impl Occurrence {
    /// The last of its local fire times (`fire_at` unless per subject zone).
    pub fn last_local_time(&self) -> i64 {
        self.zone_times
            .iter()
            .map(|(_, at)| *at)
            .max()
            .unwrap_or(self.fire_at)
    }
}

/// How far to look on each side of an instant for local dates: every zone's local
/// date is within a day of the UTC date (offsets run from -12 h to +14 h).
const DATE_MARGIN: Days = Days::new(2);

impl ScheduleSpec {
    /// The first occurrence strictly after `t`. `zones` (the zones of the subjects
    /// the schedule covers) matter only for `"timezone": "subject"`; with none, it
    /// fires on UTC time so it still advances.
    pub fn first_after(&self, t: i64, zones: &[Tz]) -> Option<Occurrence> {
        match &self.timing {
            Timing::Every { seconds } => {
                let step = seconds * 1000;
                Some(interval(t.div_euclid(step) * step + step, *seconds))
            }
            Timing::At { at } => (*at > t).then(|| instant(*at)),
            Timing::Cron(cron) if cron.fires_at_most_daily() => {
                Daily::new(cron, &self.zone, zones).first_after(t)
            }
            Timing::Cron(cron) => {
                let tz = self.zone.fixed()?;
                let from = in_zone(tz, floor_second(t))?;
                let next = cron.cron().find_next_occurrence(&from, false).ok()?;
                Some(instant(next.timestamp_millis()))
            }
        }
    }

    /// The last occurrence at or before `t`.
    pub fn latest_at_or_before(&self, t: i64, zones: &[Tz]) -> Option<Occurrence> {
        match &self.timing {
            Timing::Every { seconds } => {
                let step = seconds * 1000;
                Some(interval(t.div_euclid(step) * step, *seconds))
            }
            Timing::At { at } => (*at <= t).then(|| instant(*at)),
            Timing::Cron(cron) if cron.fires_at_most_daily() => {
                Daily::new(cron, &self.zone, zones).latest_at_or_before(t)
            }
            Timing::Cron(cron) => {
                let tz = self.zone.fixed()?;
                let from = in_zone(tz, floor_second(t))?;
                let prev = cron.cron().find_previous_occurrence(&from, true).ok()?;
                Some(instant(prev.timestamp_millis()))
            }
        }
    }
}

/// Occurrences are whole seconds, so searching from `t` rounded down to its second
/// finds the same ones (croner works in seconds).
fn floor_second(t: i64) -> i64 {
    t.div_euclid(1000) * 1000
}

fn instant(at: i64) -> Occurrence {
    Occurrence {
        fire_at: at,
        key_suffix: rfc3339(at),
        zone_times: Vec::new(),
    }
}

/// An interval of a day or more fires at most once per UTC date (two fires on one
/// date would be less than a day apart), so it is keyed by that date, like a
/// daily cron; shorter intervals by the instant.
fn interval(at: i64, seconds: i64) -> Occurrence {
    let mut occurrence = instant(at);
    if seconds >= 86_400 {
        occurrence.key_suffix.truncate("YYYY-MM-DD".len());
    }
    occurrence
}

/// A cron that fires at most once per local date, in one zone or in each zone in use.
struct Daily<'a> {
    cron: &'a CronExpr,
    zones: Vec<Tz>,
    per_subject: bool,
}

impl<'a> Daily<'a> {
    fn new(cron: &'a CronExpr, zone: &Zone, in_use: &[Tz]) -> Daily<'a> {
        let (zones, per_subject) = match zone {
            Zone::Named(tz) => (vec![*tz], false),
            Zone::Subject if in_use.is_empty() => (vec![Tz::UTC], true),
            Zone::Subject => (in_use.to_vec(), true),
        };
        Daily {
            cron,
            zones,
            per_subject,
        }
    }

    /// Date D's occurrence: D's fire time in each zone, due at the earliest.
    fn on(&self, date: NaiveDate) -> Option<Occurrence> {
        let times: Vec<(String, i64)> = self
            .zones
            .iter()
            .map(|tz| {
                Some((
                    tz.name().to_string(),
                    local_fire_time(self.cron, *tz, date)?,
                ))
            })
            .collect::<Option<_>>()?;
        let fire_at = times.iter().map(|(_, at)| *at).min()?;
        Some(Occurrence {
            fire_at,
            key_suffix: date.format("%Y-%m-%d").to_string(),
            zone_times: if self.per_subject { times } else { Vec::new() },
        })
    }

    /// Walk the matching dates forward from two days before `t`'s UTC date: a date
    /// two days after it is later than `t` in every zone, so a few steps suffice.
    fn first_after(&self, t: i64) -> Option<Occurrence> {
        let utc_date = in_zone(Tz::UTC, t)?.date_naive();
        let mut cursor: NaiveDateTime = (utc_date - DATE_MARGIN).and_hms_opt(0, 0, 0)?;
        for _ in 0..8 {
            let wall = self.cron.cron().find_next_occurrence(&cursor, true).ok()?;
            let occurrence = self.on(wall.date())?;
            if occurrence.fire_at > t {
                return Some(occurrence);
            }
            cursor = (wall.date() + Days::new(1)).and_hms_opt(0, 0, 0)?;
        }
        None
    }

    fn latest_at_or_before(&self, t: i64) -> Option<Occurrence> {
        let utc_date = in_zone(Tz::UTC, t)?.date_naive();
        let mut cursor: NaiveDateTime = (utc_date + DATE_MARGIN).and_hms_opt(23, 59, 59)?;
        for _ in 0..8 {
            let wall = self
                .cron
                .cron()
                .find_previous_occurrence(&cursor, true)
                .ok()?;
            let occurrence = self.on(wall.date())?;
            if occurrence.fire_at <= t {
                return Some(occurrence);
            }
            cursor = wall.date().and_hms_opt(0, 0, 0)? - TimeDelta::seconds(1);
        }
        None
    }
}

/// The instant a daily cron fires on local `date` in `tz` (for a date the cron
/// matches). croner's zoned search from the start of that local day applies the
/// DST rule; if it still lands on another date (a gap across midnight), the
/// first valid instant after the wall time is used.
fn local_fire_time(cron: &CronExpr, tz: Tz, date: NaiveDate) -> Option<i64> {
    let from = start_of_day(tz, date)?;
    let found = cron.cron().find_next_occurrence(&from, true).ok()?;
    if found.date_naive() == date {
        return Some(found.timestamp_millis());
    }
    let wall = cron
        .cron()
        .find_next_occurrence(&date.and_hms_opt(0, 0, 0)?, true)
        .ok()?;
    Some(first_valid_at_or_after(tz, wall)?.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schedule::zone::parse_zone;
    use chrono::DateTime;

    fn ms(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    fn tz(name: &str) -> Tz {
        parse_zone(name).unwrap()
    }

    fn cron(expr: &str, zone: &str) -> ScheduleSpec {
        ScheduleSpec {
            timing: Timing::Cron(CronExpr::parse(expr).unwrap()),
            zone: if zone == "subject" {
                Zone::Subject
            } else {
                Zone::Named(tz(zone))
            },
            group: None,
            jitter_seconds: 0,
            enabled: true,
            priority: 0,
        }
    }

    fn every(seconds: i64) -> ScheduleSpec {
        ScheduleSpec {
            timing: Timing::Every { seconds },
            ..cron("0 0 * * *", "UTC")
        }
    }

    /// (fire instant, key suffix) of the next `n` occurrences after `from`.
    fn next_n(spec: &ScheduleSpec, from: &str, n: usize, zones: &[Tz]) -> Vec<(String, String)> {
        let mut t = ms(from);
        (0..n)
            .map(|_| {
                let o = spec.first_after(t, zones).unwrap();
                assert!(o.fire_at > t);
                t = o.fire_at;
                (rfc3339(o.fire_at), o.key_suffix)
            })
            .collect()
    }

    fn pair(at: &str, key: &str) -> (String, String) {
        (at.to_string(), key.to_string())
    }

    #[test]
    fn berlin_spring_forward_runs_after_the_gap_and_fall_back_runs_once() {
        let spec = cron("30 2 * * *", "Europe/Berlin");
        // 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist that day.
        assert_eq!(
            next_n(&spec, "2026-03-28T12:00:00Z", 2, &[]),
            vec![
                pair("2026-03-29T01:00:00.000Z", "2026-03-29"),
                pair("2026-03-30T00:30:00.000Z", "2026-03-30"),
            ]
        );
        // 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens at 00:30Z and 01:30Z.
        assert_eq!(
            next_n(&spec, "2026-10-24T12:00:00Z", 2, &[]),
            vec![
                pair("2026-10-25T00:30:00.000Z", "2026-10-25"),
                pair("2026-10-26T01:30:00.000Z", "2026-10-26"),
            ]
        );
        // Asked from between the two 02:30s, the repeat is not a second fire.
        assert_eq!(
            spec.first_after(ms("2026-10-25T01:00:00Z"), &[])
                .unwrap()
                .key_suffix,
            "2026-10-26"
        );
    }

    #[test]
    fn new_york_transitions_for_daily_and_interval_crons() {
        let daily = cron("30 2 * * *", "America/New_York");
        assert_eq!(
            next_n(&daily, "2026-03-07T12:00:00Z", 1, &[]),
            vec![pair("2026-03-08T07:00:00.000Z", "2026-03-08")]
        );
        let repeated = cron("30 1 * * *", "America/New_York");
        assert_eq!(
            next_n(&repeated, "2026-10-31T12:00:00Z", 2, &[]),
            vec![
                pair("2026-11-01T05:30:00.000Z", "2026-11-01"),
                pair("2026-11-02T06:30:00.000Z", "2026-11-02"),
            ]
        );
        // An interval cron keys by instant and keeps its absolute rhythm: both
        // passes of the repeated hour fire, the skipped hour does not.
        let half_hourly = cron("*/30 * * * *", "America/New_York");
        let fall: Vec<String> = next_n(&half_hourly, "2026-11-01T04:45:00Z", 5, &[])
            .into_iter()
            .map(|(at, key)| {
                assert_eq!(at, key);
                at
            })
            .collect();
        assert_eq!(
            fall,
            [
                "2026-11-01T05:00:00.000Z",
                "2026-11-01T05:30:00.000Z",
                "2026-11-01T06:00:00.000Z",
                "2026-11-01T06:30:00.000Z",
                "2026-11-01T07:00:00.000Z"
            ]
        );
        let spring: Vec<String> = next_n(&half_hourly, "2026-03-08T06:15:00Z", 2, &[])
            .into_iter()
            .map(|(at, _)| at)
            .collect();
        assert_eq!(
            spring,
            ["2026-03-08T06:30:00.000Z", "2026-03-08T07:00:00.000Z"]
        );
    }

    #[test]
    fn crons_with_several_times_a_day_lose_or_double_a_run_on_transition_days() {
        // Not the daily rule: croner's own search, pinned here so that
        // docs/guides/schedules.md stays true. Europe/Berlin 2026-03-29: 02:00 does not
        // exist and `0 2,14` has no 02:00 run that day (no run after the gap).
        let spring = cron("0 2,14 * * *", "Europe/Berlin");
        assert_eq!(
            next_n(&spring, "2026-03-28T12:00:00Z", 3, &[]),
            vec![
                pair("2026-03-28T13:00:00.000Z", "2026-03-28T13:00:00.000Z"),
                pair("2026-03-29T12:00:00.000Z", "2026-03-29T12:00:00.000Z"),
                pair("2026-03-30T00:00:00.000Z", "2026-03-30T00:00:00.000Z"),
            ]
        );
        // 2026-10-25: 02:30 happens twice (CEST, then CET) and `30 2,14` runs at both.
        let fall = cron("30 2,14 * * *", "Europe/Berlin");
        assert_eq!(
            next_n(&fall, "2026-10-24T12:00:00Z", 4, &[]),
            vec![
                pair("2026-10-24T12:30:00.000Z", "2026-10-24T12:30:00.000Z"),
                pair("2026-10-25T00:30:00.000Z", "2026-10-25T00:30:00.000Z"),
                pair("2026-10-25T01:30:00.000Z", "2026-10-25T01:30:00.000Z"),
                pair("2026-10-25T13:30:00.000Z", "2026-10-25T13:30:00.000Z"),
            ]
        );
    }

    #[test]
    fn lord_howe_half_hour_shift() {
        // Australia/Lord_Howe: +10:30 standard, +11 in summer. 2026-04-05 02:00 ->
        // 01:30 repeats 01:30-02:00; 2026-10-04 02:00 -> 02:30 skips 02:00-02:30.
        let repeated = cron("45 1 * * *", "Australia/Lord_Howe");
        assert_eq!(
            next_n(&repeated, "2026-04-04T00:00:00Z", 2, &[]),
            vec![
                pair("2026-04-04T14:45:00.000Z", "2026-04-05"),
                pair("2026-04-05T15:15:00.000Z", "2026-04-06"),
            ]
        );
        let skipped = cron("15 2 * * *", "Australia/Lord_Howe");
        assert_eq!(
            next_n(&skipped, "2026-10-03T00:00:00Z", 2, &[]),
            vec![
                pair("2026-10-03T15:30:00.000Z", "2026-10-04"),
                pair("2026-10-04T15:15:00.000Z", "2026-10-05"),
            ]
        );
    }

    #[test]
    fn kiritimati_is_a_day_ahead_and_year_ends_roll_over() {
        let nine = cron("0 9 * * *", "Pacific/Kiritimati");
        assert_eq!(
            next_n(&nine, "2026-11-20T12:00:00Z", 1, &[]),
            vec![pair("2026-11-20T19:00:00.000Z", "2026-11-21")]
        );
        let new_year = cron("0 0 1 1 *", "Pacific/Kiritimati");
        assert_eq!(
            next_n(&new_year, "2026-06-01T00:00:00Z", 2, &[]),
            vec![
                pair("2026-12-31T10:00:00.000Z", "2027-01-01"),
                pair("2027-12-31T10:00:00.000Z", "2028-01-01"),
            ]
        );
        let last_minute = cron("59 23 31 12 *", "UTC");
        assert_eq!(
            next_n(&last_minute, "2026-12-31T23:59:00Z", 1, &[]),
            vec![pair("2027-12-31T23:59:00.000Z", "2027-12-31")]
        );
        let midnight = cron("0 0 * * *", "UTC");
        assert_eq!(
            next_n(&midnight, "2026-12-31T23:59:59.999Z", 1, &[]),
            vec![pair("2027-01-01T00:00:00.000Z", "2027-01-01")]
        );
        assert_eq!(
            midnight
                .latest_at_or_before(ms("2027-01-01T00:00:00Z"), &[])
                .unwrap()
                .key_suffix,
            "2027-01-01"
        );
        assert_eq!(
            next_n(&every(3_600), "2026-12-31T23:30:00Z", 1, &[]),
            vec![pair("2027-01-01T00:00:00.000Z", "2027-01-01T00:00:00.000Z")]
        );
        // A day or more apart: keyed by the UTC date, like a daily cron.
        assert_eq!(
            next_n(&every(86_400), "2026-12-31T23:30:00Z", 2, &[]),
            vec![
                pair("2027-01-01T00:00:00.000Z", "2027-01-01"),
                pair("2027-01-02T00:00:00.000Z", "2027-01-02"),
            ]
        );
        assert_eq!(
            next_n(&every(90_000), "2026-12-31T00:00:00Z", 1, &[]),
            vec![pair("2026-12-31T18:00:00.000Z", "2026-12-31")]
        );
    }

    #[test]
    fn the_daily_path_agrees_with_a_zoned_croner_search() {
        // Daily crons go through local dates; croner's own zoned search must give
        // the same instants from any starting point across a year of transitions
        // (every 5 h 17 min, so starts fall at every time of day).
        for zone in [
            "Europe/Berlin",
            "America/New_York",
            "Australia/Lord_Howe",
            "Pacific/Kiritimati",
        ] {
            for expr in ["30 2 * * *", "45 1 * * *", "0 0 * * *", "0 9 * * 2-6"] {
                let spec = cron(expr, zone);
                let Timing::Cron(c) = &spec.timing else {
                    unreachable!()
                };
                let mut t = ms("2026-01-01T00:00:00Z");
                while t < ms("2027-01-01T00:00:00Z") {
                    let ours = spec.first_after(t, &[]).unwrap();
                    let theirs = c
                        .cron()
                        .find_next_occurrence(&in_zone(tz(zone), t).unwrap(), false)
                        .unwrap();
                    assert_eq!(
                        ours.fire_at,
                        theirs.timestamp_millis(),
                        "{zone} {expr} after {}",
                        rfc3339(t)
                    );
                    assert_eq!(ours.key_suffix, theirs.date_naive().to_string());
                    let back = spec.latest_at_or_before(ours.fire_at, &[]).unwrap();
                    assert_eq!(back, ours, "{zone} {expr}");
                    t += (5 * 60 + 17) * 60_000;
                }
            }
        }
    }

    #[test]
    fn each_subject_zone_gets_its_own_local_time_and_the_earliest_fires_first() {
        let spec = cron("0 9 * * *", "subject");
        let zones = [
            tz("America/New_York"),
            tz("Europe/Berlin"),
            tz("Pacific/Kiritimati"),
        ];
        let o = spec
            .first_after(ms("2026-11-20T12:00:00Z"), &zones)
            .unwrap();
        assert_eq!(o.key_suffix, "2026-11-21");
        assert_eq!(o.fire_at, ms("2026-11-20T19:00:00Z"));
        let times: Vec<(&str, String)> = o
            .zone_times
            .iter()
            .map(|(z, at)| (z.as_str(), rfc3339(*at)))
            .collect();
        assert_eq!(
            times,
            [
                ("America/New_York", "2026-11-21T14:00:00.000Z".to_string()),
                ("Europe/Berlin", "2026-11-21T08:00:00.000Z".to_string()),
                ("Pacific/Kiritimati", "2026-11-20T19:00:00.000Z".to_string()),
            ]
        );
        // Until Kiritimati's 09:00 of the 21st, the latest date is the 20th.
        let before = spec
            .latest_at_or_before(ms("2026-11-20T18:59:59Z"), &zones)
            .unwrap();
        assert_eq!(
            (before.key_suffix.as_str(), before.fire_at),
            ("2026-11-20", ms("2026-11-19T19:00:00Z"))
        );
        // Without Kiritimati, the 21st starts in Berlin.
        let later = spec
            .first_after(ms("2026-11-20T12:00:00Z"), &zones[..2])
            .unwrap();
        assert_eq!(later.fire_at, ms("2026-11-21T08:00:00Z"));
        // No subjects: UTC, so the schedule still advances.
        let none = spec.first_after(ms("2026-11-20T12:00:00Z"), &[]).unwrap();
        assert_eq!(
            (none.key_suffix.as_str(), none.fire_at),
            ("2026-11-21", ms("2026-11-21T09:00:00Z"))
        );
        assert_eq!(
            none.zone_times,
            vec![("UTC".to_string(), ms("2026-11-21T09:00:00Z"))]
        );
    }

    #[test]
    fn subject_zones_follow_each_zones_dst_rule_on_its_own() {
        // 2026-03-29: Berlin springs forward (02:30 skipped -> 03:00 CEST); New York
        // is already on EDT (since 03-08); Lord_Howe is on summer time (+11).
        let spec = cron("30 2 * * *", "subject");
        let zones = [
            tz("Europe/Berlin"),
            tz("America/New_York"),
            tz("Australia/Lord_Howe"),
        ];
        let o = spec
            .first_after(ms("2026-03-28T12:00:00Z"), &zones)
            .unwrap();
        assert_eq!(o.key_suffix, "2026-03-29");
        let times: Vec<(&str, String)> = o
            .zone_times
            .iter()
            .map(|(z, at)| (z.as_str(), rfc3339(*at)))
            .collect();
        assert_eq!(
            times,
            [
                ("Europe/Berlin", "2026-03-29T01:00:00.000Z".to_string()),
                ("America/New_York", "2026-03-29T06:30:00.000Z".to_string()),
                (
                    "Australia/Lord_Howe",
                    "2026-03-28T15:30:00.000Z".to_string()
                ),
            ]
        );
        assert_eq!(o.fire_at, ms("2026-03-28T15:30:00Z"));
    }

    #[test]
    fn weekday_crons_skip_dates_in_every_zone_alike() {
        // 2026-11-21 is a Saturday: MON-FRI skips it and the Sunday.
        let spec = cron("30 7 * * MON-FRI", "subject");
        let zones = [tz("Europe/Berlin"), tz("Pacific/Kiritimati")];
        let o = spec
            .first_after(ms("2026-11-20T12:00:00Z"), &zones)
            .unwrap();
        assert_eq!(o.key_suffix, "2026-11-23");
        assert_eq!(o.fire_at, ms("2026-11-22T17:30:00Z"));
    }

    #[test]
    fn intervals_align_to_the_epoch_and_one_offs_fire_once() {
        let spec = every(900);
        let o = spec.first_after(ms("2026-11-21T10:07:13.5Z"), &[]).unwrap();
        assert_eq!(
            (o.fire_at, o.key_suffix.as_str()),
            (ms("2026-11-21T10:15:00Z"), "2026-11-21T10:15:00.000Z")
        );
        assert_eq!(
            spec.first_after(o.fire_at, &[]).unwrap().fire_at,
            ms("2026-11-21T10:30:00Z")
        );
        assert_eq!(spec.latest_at_or_before(o.fire_at, &[]).unwrap(), o);
        assert_eq!(
            spec.latest_at_or_before(ms("2026-11-21T10:29:59.999Z"), &[])
                .unwrap()
                .fire_at,
            o.fire_at
        );

        let at = ms("2026-11-21T22:00:00.250Z");
        let once = ScheduleSpec {
            timing: Timing::At { at },
            ..every(60)
        };
        assert_eq!(
            once.first_after(at - 1, &[]).unwrap().key_suffix,
            "2026-11-21T22:00:00.250Z"
        );
        assert_eq!(once.first_after(at, &[]), None);
        assert_eq!(once.latest_at_or_before(at - 1, &[]), None);
        assert_eq!(once.latest_at_or_before(at, &[]).unwrap().fire_at, at);
    }
}
