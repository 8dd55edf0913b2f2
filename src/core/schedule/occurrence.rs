//! When a schedule fires. Pure: `t` and the zones in use are arguments.
//!
//! A schedule's *occurrences* are the instants its batches are due:
//! - `every_seconds: N`: the multiples of N seconds since 1970-01-01T00:00Z (every
//!   900 s is :00, :15, :30, :45 UTC), so re-saving a schedule never shifts it;
//! - `at`: that one instant;
//! - a cron that fires at most once a day (see [`CronExpr::fires_at_most_daily`]):
//!   one occurrence per matching *local date* D, due at D's local fire time in its
//!   zone, or with `"timezone": "subject"` at the earliest of D's local fire times
//!   across the zones in use (UTC+14 first). Its batch key ends with D;
//! - any other cron: croner's matches in its zone. Its batch key ends with the instant.
//!
//! Local times follow one rule everywhere: a time skipped by spring-forward runs at
//! the first valid instant after it, a repeated one once, at its first occurrence.

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
                Some(instant(t.div_euclid(step) * step + step))
            }
            Timing::At { at } => (*at > t).then(|| instant(*at)),
            Timing::Cron(cron) if cron.fires_at_most_daily() => {
                Daily::new(cron, &self.zone, zones).first_after(t)
            }
            Timing::Cron(cron) => {
                let tz = self.zone.fixed()?;
                let from = in_zone(tz, floor_second(t));
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
                Some(instant(t.div_euclid(step) * step))
            }
            Timing::At { at } => (*at <= t).then(|| instant(*at)),
            Timing::Cron(cron) if cron.fires_at_most_daily() => {
                Daily::new(cron, &self.zone, zones).latest_at_or_before(t)
            }
            Timing::Cron(cron) => {
                let tz = self.zone.fixed()?;
                let from = in_zone(tz, floor_second(t));
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
        let utc_date = in_zone(Tz::UTC, t).date_naive();
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
        let utc_date = in_zone(Tz::UTC, t).date_naive();
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
    let from = start_of_day(tz, date);
    let found = cron.cron().find_next_occurrence(&from, true).ok()?;
    if found.date_naive() == date {
        return Some(found.timestamp_millis());
    }
    let wall = cron
        .cron()
        .find_next_occurrence(&date.and_hms_opt(0, 0, 0)?, true)
        .ok()?;
    Some(first_valid_at_or_after(tz, wall).timestamp_millis())
}
