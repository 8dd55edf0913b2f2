//! Cron expressions in the syntax Cloudflare's cron triggers accept, evaluated by
//! `croner` (which handles time zones and DST). Cloudflare documents five fields:
//!
//! | field        | values                       | characters |
//! |--------------|------------------------------|------------|
//! | minute       | 0-59                         | `* , - /`  |
//! | hour         | 0-23                         | `* , - /`  |
//! | day of month | 1-31                         | `* , - / L W` |
//! | month        | 1-12, `JAN`-`DEC`            | `* , - /`  |
//! | day of week  | 1-7 = Sunday-Saturday, `SUN`-`SAT` | `* , - / L #` |
//!
//! Day-of-week numbers are Quartz-style (1 = Sunday, 0 refused), as on Cloudflare,
//! so `1-5` means Sunday to Thursday: write `MON-FRI`. croner extensions that
//! Cloudflare does not list are refused here (`?`, the `+` AND-prefix, `@daily`
//! nicknames, a seconds or year field, a step without a start such as `/5`), and
//! names are accepted only in their own field. docs/guides/schedules.md lists what
//! remains different.

use croner::parser::{CronParser, Seconds, Year};
use croner::{Cron, JobType};

const FIELDS: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// A parsed cron expression and the text it came from (stored as given).
#[derive(Debug, Clone)]
pub struct CronExpr {
    text: String,
    // Boxed: a parsed pattern is a few hundred bytes, the other timings two words.
    cron: Box<Cron>,
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &CronExpr) -> bool {
        self.text == other.text
    }
}

impl CronExpr {
    /// Parse strictly; the error is a message for the client.
    pub fn parse(text: &str) -> Result<CronExpr, String> {
        let text = text.trim();
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != FIELDS.len() {
            return Err(format!(
                "a cron expression has 5 fields (minute hour day-of-month month day-of-week), got {}",
                fields.len()
            ));
        }
        for (i, field) in fields.iter().enumerate() {
            check_field(i, field)?;
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            // Quartz weekday numbers, as Cloudflare documents them.
            .alternative_weekdays(true)
            // `5/15` (from 5, every 15) is Quartz syntax; the bare `/15` that this
            // also enables is refused by check_field.
            .sloppy_ranges(true)
            .build()
            .parse(text)
            .map_err(|e| format!("{e}"))?;
        if !can_fire(&cron, fields[2]) {
            return Err("it never fires (no month has that day)".into());
        }
        Ok(CronExpr {
            text: text.to_string(),
            cron: Box::new(cron),
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn cron(&self) -> &Cron {
        &self.cron
    }

    /// True when the minute and the hour are each one fixed value: then the
    /// expression fires at most once per local day, whatever its day fields. This
    /// is also croner's "fixed-time job", and only for these does the DST
    /// rule hold (a time skipped by spring-forward runs at the first valid instant
    /// after it; a repeated one runs once, at its first occurrence). Other crons
    /// get croner's interval rule: no run in the skipped hour, a run at both passes
    /// of the repeated one (see `occurrence.rs`).
    pub fn fires_at_most_daily(&self) -> bool {
        self.cron.determine_job_type() == JobType::FixedTime
    }
}

/// Days in each month, February in a leap year.
const MONTH_DAYS: [u16; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// False for patterns that can never match, such as `0 0 30 2 *`: croner would
/// search up to the year 5000 for them, tens of milliseconds of CPU (more than a
/// Free plan request has). With the syntax accepted here only the day-of-month can
/// be impossible, and only when the day-of-week is `*` (otherwise a day matching
/// either fires, and every weekday form fires within a few years). `dom` is the
/// day-of-month field as written (croner does not expose `15W`'s day).
fn can_fire(cron: &Cron, dom: &str) -> bool {
    let p = &cron.pattern;
    if p.is_dom_wildcard() || !p.is_dow_wildcard() || dom.to_ascii_uppercase().contains('L') {
        return true;
    }
    let weekday_days = dom.split(',').filter_map(|token| {
        token
            .to_ascii_uppercase()
            .strip_suffix('W')?
            .parse::<u16>()
            .ok()
    });
    let days: Vec<u16> = p.days.values().into_iter().chain(weekday_days).collect();
    p.months.values().iter().any(|&month| {
        let last = MONTH_DAYS[usize::from(month.clamp(1, 12)) - 1];
        days.iter().any(|&day| day <= last)
    })
}

/// Characters and names per field, before croner sees the text (croner replaces
/// names anywhere, so `JAN` in the day-of-week field would quietly mean Sunday).
fn check_field(index: usize, field: &str) -> Result<(), String> {
    let name = FIELDS[index];
    let upper = field.to_ascii_uppercase();
    let extra: &[char] = match index {
        2 => &['L', 'W'],
        4 => &['L', '#'],
        _ => &[],
    };
    let mut letters = String::new();
    let mut after_digit = false;
    let mut prev = ' ';
    for c in upper.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphabetic() {
            if letters.is_empty() {
                after_digit = prev.is_ascii_digit();
            }
            letters.push(c);
            prev = c;
            continue;
        }
        prev = c;
        if !letters.is_empty() {
            if index == 4 && letters == "L" && !after_digit {
                // Quartz reads a lone `L` as Saturday; croner never matches it.
                return Err("L in the day-of-week field needs a weekday before it: 6L or FRIL (the last Friday)".into());
            }
            check_word(index, name, &letters)?;
            letters.clear();
        }
        if c != ' ' && !(c.is_ascii_digit() || "*,-/".contains(c) || extra.contains(&c)) {
            return Err(format!(
                "{c:?} is not allowed in the {name} field (Cloudflare cron syntax)"
            ));
        }
    }
    if upper.starts_with('/') || upper.contains(",/") {
        return Err(format!(
            "a step needs a start in the {name} field: write */n or a/n"
        ));
    }
    Ok(())
}

/// A run of letters: `L`/`W`/`LW` in day-of-month, `L` or a weekday name
/// (optionally with `L`: `FRIL`) in day-of-week, a month name in month.
fn check_word(index: usize, name: &str, word: &str) -> Result<(), String> {
    let ok = match index {
        2 => matches!(word, "L" | "W" | "LW"),
        3 => MONTHS.contains(&word),
        4 => {
            word == "L"
                || WEEKDAYS
                    .iter()
                    .any(|d| word == *d || word == format!("{d}L"))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{word:?} is not allowed in the {name} field"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Datelike;
    use chrono::{NaiveDate, NaiveDateTime, Weekday};

    fn next(expr: &str, from: NaiveDateTime) -> NaiveDateTime {
        CronExpr::parse(expr)
            .unwrap()
            .cron()
            .find_next_occurrence(&from, false)
            .unwrap()
    }

    fn at(y: i32, m: u32, d: u32, h: u32, mi: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, m, d)
            .unwrap()
            .and_hms_opt(h, mi, 0)
            .unwrap()
    }

    #[test]
    fn cloudflare_documented_examples_parse_with_their_documented_meaning() {
        let from = at(2026, 11, 18, 12, 0); // a Wednesday
        assert_eq!(next("* * * * *", from), at(2026, 11, 18, 12, 1));
        assert_eq!(next("*/30 * * * *", from), at(2026, 11, 18, 12, 30));
        assert_eq!(next("45 * * * *", from), at(2026, 11, 18, 12, 45));
        // "0 17 * * sun" or "0 17 * * 1": 17:00 on Sunday.
        assert_eq!(next("0 17 * * sun", from), at(2026, 11, 22, 17, 0));
        assert_eq!(next("0 17 * * 1", from), at(2026, 11, 22, 17, 0));
        // "10 7 * * mon-fri" or "10 7 * * 2-6": 07:10 on weekdays.
        assert_eq!(next("10 7 * * mon-fri", from), at(2026, 11, 19, 7, 10));
        assert_eq!(
            next("10 7 * * 2-6", at(2026, 11, 21, 8, 0)),
            at(2026, 11, 23, 7, 10)
        );
        assert_eq!(next("0 15 1 * *", from), at(2026, 12, 1, 15, 0));
        // "0 18 * * 6L" or "friL": the last Friday of the month.
        assert_eq!(next("0 18 * * 6L", from), at(2026, 11, 27, 18, 0));
        assert_eq!(next("0 18 * * friL", from), at(2026, 11, 27, 18, 0));
        // "59 23 LW * *": the last weekday of the month (2027-01-31 is a Sunday).
        assert_eq!(
            next("59 23 LW * *", at(2027, 1, 1, 0, 0)),
            at(2027, 1, 29, 23, 59)
        );
        assert_eq!(next("59 23 LW * *", from).date().weekday(), Weekday::Mon);
    }

    #[test]
    fn names_ranges_steps_lists_and_hash() {
        let from = at(2026, 1, 1, 0, 0);
        assert_eq!(next("0 9 * JAN-MAR 2#1", from), at(2026, 1, 5, 9, 0)); // 1st Monday
        assert_eq!(next("5/20 * * * *", from), at(2026, 1, 1, 0, 5));
        assert_eq!(next("0 8-18/5 * * *", from), at(2026, 1, 1, 8, 0));
        assert_eq!(next("0 0 1,15 * *", from), at(2026, 1, 15, 0, 0));
        assert_eq!(
            next("0 0 15W * *", at(2026, 2, 1, 0, 0)),
            at(2026, 2, 16, 0, 0)
        ); // 15th is a Sunday
        assert_eq!(
            next("0 0 L * *", at(2028, 2, 1, 0, 0)),
            at(2028, 2, 29, 0, 0)
        );
        assert_eq!(next("0 0 * * 7", from), at(2026, 1, 3, 0, 0)); // 7 = Saturday
    }

    #[test]
    fn syntax_cloudflare_does_not_accept_is_refused() {
        for bad in [
            "",
            "* * * *",
            "0 * * * * *",      // seconds field
            "0 0 * * * * 2026", // year field
            "@daily",
            "0 9 ? * MON",
            "0 9 1 * +MON",
            "0 9 * * 0", // 0 is not a weekday on Cloudflare
            "0 9 * * 8",
            "60 * * * *",
            "0 24 * * *",
            "0 0 0 * *",
            "0 0 * 13 *",
            "/5 * * * *",
            "0 0,/5 * * *",
            "0 0 L-3 * *", // an offset from the last day: Cloudflare's saffron has it, croner not
            "0 0 L-3W * *",
            "0 0 W * *",
            "0 0 * * L",
        ] {
            assert!(CronExpr::parse(bad).is_err(), "{bad:?} parsed");
        }
        for (bad, why) in [
            ("0 9 * * JAN", "\"JAN\""),
            ("0 9 * MON *", "\"MON\""),
            ("0 9 L * *", "ok"),
            ("0 L * * *", "\"L\""),
            ("0 9 * * 2W", "\"W\""),
            ("0 9 1#2 * *", "'#'"),
            ("0 9 * * MONDAY", "\"MONDAY\""),
        ] {
            match CronExpr::parse(bad) {
                Ok(_) => assert_eq!(why, "ok", "{bad:?} parsed"),
                Err(e) => assert!(e.contains(why), "{bad:?}: {e}"),
            }
        }
    }

    #[test]
    fn impossible_days_are_refused_without_searching() {
        for never in [
            "0 0 30 2 *",
            "0 0 31 2 *",
            "0 0 31 4,6,9,11 *",
            "0 0 30-31 FEB *",
            "0 0 30W 2 *",
        ] {
            let e = CronExpr::parse(never).unwrap_err();
            assert!(e.contains("never fires"), "{never}: {e}");
        }
        // Possible somewhere, or a weekday that matches as well (either fires).
        for some in [
            "0 0 29 2 *",
            "0 0 31 4,5 *",
            "0 0 30 2 MON",
            "0 0 L 2 *",
            "0 0 LW 2 *",
            "0 0 29W 2 *",
            "0 0 * 2 1#5",
        ] {
            let cron = CronExpr::parse(some).unwrap_or_else(|e| panic!("{some}: {e}"));
            let from = at(2026, 1, 1, 0, 0);
            assert!(
                cron.cron().find_next_occurrence(&from, false).is_ok(),
                "{some}"
            );
        }
    }

    #[test]
    fn at_most_daily_means_one_minute_and_one_hour() {
        for daily in [
            "0 9 * * *",
            "30 7 * * 2-6",
            "0 0 1 * *",
            "59 23 LW * *",
            "0 12 * * 6L",
        ] {
            assert!(
                CronExpr::parse(daily).unwrap().fires_at_most_daily(),
                "{daily}"
            );
        }
        for not in [
            "* 9 * * *",
            "0 9,21 * * *",
            "0 */12 * * *",
            "*/5 * * * *",
            "0 8-9 * * *",
        ] {
            assert!(
                !CronExpr::parse(not).unwrap().fires_at_most_daily(),
                "{not}"
            );
        }
    }
}
