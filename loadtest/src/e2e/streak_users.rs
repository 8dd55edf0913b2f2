//! What the streak part seeds and checks against, for both versions of the app:
//! the users (zones, calendars, what the fakes answer them first, whether a
//! reminder is due), the tokens the fakes accept, and the instants of its day.

use chrono::{DateTime, Utc};

/// Tokens the fakes accept (secrets of the Worker, passed like the others).
pub const GITHUB_TOKEN: &str = "ghp_e2e_streak_token_0123456789";
pub const TELEGRAM_BOT_TOKEN: &str = "424242:e2e-streak-bot-token";

pub const GROUP: &str = "streaks";
pub const SCHEDULE: &str = "streaks";
pub const BERLIN: &str = "Europe/Berlin";
pub const NEW_YORK: &str = "America/New_York";
/// Berlin's 17:50 on a January day (UTC+1, no DST in play: the host tests
/// cover it; ten minutes before 18:00, so a start slowed by a loaded machine
/// cannot pass it before the schedule is written), then its 18:00, and New
/// York's 18:00 (UTC-5).
pub const SETUP_AT: &str = "2027-01-15T16:50:00Z";
pub const BERLIN_1800: &str = "2027-01-15T17:00:00.000Z";
pub const NEW_YORK_1800: &str = "2027-01-15T23:00:00.000Z";

/// One user: subject id (also the GitHub login and the Discord webhook id),
/// zone, calendar (oldest first, the last day today), what the fakes answer
/// first, and whether a reminder is due.
pub struct User {
    pub id: &'static str,
    pub zone: &'static str,
    pub counts: &'static [u32],
    /// `github`, `discord` or `telegram`, and the statuses it answers first.
    pub script: &'static [(&'static str, &'static [u16])],
    pub at_risk: bool,
}

pub const USERS: &[User] = &[
    User {
        id: "risk",
        zone: BERLIN,
        counts: &[1, 2, 0],
        script: &[],
        at_risk: true,
    },
    User {
        id: "discord-503",
        zone: BERLIN,
        counts: &[3, 0],
        script: &[("discord", &[503])],
        at_risk: true,
    },
    User {
        id: "telegram-429",
        zone: BERLIN,
        counts: &[1, 0],
        script: &[("telegram", &[429])],
        at_risk: true,
    },
    User {
        id: "github-429",
        zone: BERLIN,
        counts: &[2, 0],
        script: &[("github", &[429])],
        at_risk: true,
    },
    User {
        id: "safe",
        zone: BERLIN,
        counts: &[1, 1],
        script: &[],
        at_risk: false,
    },
    User {
        id: "broken",
        zone: BERLIN,
        counts: &[5, 0, 0],
        script: &[],
        at_risk: false,
    },
    User {
        id: "later",
        zone: NEW_YORK,
        counts: &[1, 0],
        script: &[],
        at_risk: true,
    },
];

/// A user's Telegram chat id.
pub fn chat_id(index: usize) -> i64 {
    1_000 + index as i64
}

pub fn t(rfc: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc)
        .expect("a valid instant")
        .to_utc()
}
