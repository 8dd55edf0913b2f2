//! Learned rates (backpressure): how a key's rate follows its receiver, as a
//! pure function of `now`. A refusal (what `core::receiver` calls one: a
//! `429`, a `403` with a rate-limit signal, a `503` with a wait; or any retry
//! whose answer asked for a delay, a kind's own `ctx.retry_after`;
//! [`is_refusal`]) or an answer whose announced budget ran out teaches the key
//! a rate ([`learned_after`]):
//!
//! - a rate the receiver announces (a quota per window: `RateLimit-Policy`,
//!   Shopify's bucket; a quota with only its reset: the quota per the time
//!   left to it, `core::flow::pace::paced`) is the rate, held as it is
//!   (source `headers`);
//! - else a refusal within a window of the last change keeps the rate (a burst
//!   of refusals is one signal);
//! - else a learned rate still alive halves, and remembers the rate it had
//!   (`before`);
//! - else the first refusal learns what the receiver took over the last window
//!   (source `refusals`), or, when nothing was taken in it, one start per wait
//!   the receiver asked (source `retry_after`, at least one per window): never
//!   the floor of one a minute because a window was empty.
//!
//! Recovery compounds: each window without a refusal multiplies the rate by
//! 5/4 ([`GROWTH_X1024`]) up to `before`, the rate the last refusal cut; after
//! [`HOLD_WINDOWS`] windows it probes above it by an eighth of `before` a
//! window. A rate without a `before` (learned from a wait) compounds until the
//! next refusal; an announced rate is not probed above. A rate set with `PUT
//! /limits` is the ceiling (learning only lowers what a key may start), and a
//! rate nothing refused for an hour is forgotten. Rates are counted in starts
//! per minute, so the floor is an integer.
//!
//! Applied by the claim (`sql/key_rules.sql`: a key's rate in force is
//! min(its set rate, the learned one), a key without a set rate has the learned
//! one alone), stored by the commit that carries a refusal or a spent budget
//! (`sql/learn_limit_keys.sql`, once per commit per key). Both are this rule's
//! SQL twins, in integers: the state is written only then, and the growth and
//! the idle hour are computed from it at each read ([`at`]), so no window
//! writes anything. `LEARN_LIMITS=false` turns learning off (nothing is stored).

/// A learning window: refusals within one of a change keep the rate, and a
/// rate grows once per window without any.
pub const WINDOW_MS: i64 = 5_000;
/// The least a learned rate lets start: one a minute.
pub const FLOOR_PER_MINUTE: i64 = 1;
/// The most a learned rate may be (a billion a minute): keeps the integer
/// growth below `i64`'s range.
pub const MAX_PER_MINUTE: i64 = 1_000_000_000;
/// 1.25^w × 1024, rounded, for w = 0..=40 windows: the compounding factor,
/// in integers so the SQL twins compute the very same rates (SQLite has no
/// `pow` unless built with its math functions). Past 40 windows (×7,523) the
/// factor stays: by then any rate has met its `before` or its ceiling.
pub const GROWTH_X1024: [i64; 41] = [
    1024, 1280, 1600, 2000, 2500, 3125, 3906, 4883, 6104, 7629, 9537, 11921, 14901, 18626, 23283,
    29104, 36380, 45475, 56843, 71054, 88818, 111022, 138778, 173472, 216840, 271051, 338813,
    423516, 529396, 661744, 827181, 1033976, 1292470, 1615587, 2019484, 2524355, 3155444, 3944305,
    4930381, 6162976, 7703720,
];
/// The most the rule before compounding added a window (one start a second);
/// kept as the 0.2.0 API named it, no longer a bound.
pub const STEP_PER_MINUTE: i64 = 60;
/// Windows a rate stays at (at most) `before` before it probes above it: a
/// halved rate is back at `before` after 3.1 windows of compounding.
pub const HOLD_WINDOWS: i64 = 4;
/// A learned rate nothing refused for this long is dropped (the key goes back to
/// its set rate, or to none).
pub const IDLE_MS: i64 = 3_600_000;

/// Where a learned rate came from (`GET /limits`' `learned.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// One start per wait the receiver asked (`Retry-After` and kin), when it
    /// took nothing in the window before its refusal.
    RetryAfter,
    /// A quota per window the receiver announced.
    Headers,
    /// What the receiver took before refusing, halved by later refusals.
    Refusals,
}

impl Source {
    /// The name stored (`limit_state.learned_from`) and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::RetryAfter => "retry_after",
            Source::Headers => "headers",
            Source::Refusals => "refusals",
        }
    }

    /// A stored name; anything else (a row from before the column) reads as
    /// `refusals`, what every rate was learned from then.
    pub fn parse(name: Option<&str>) -> Source {
        match name {
            Some("retry_after") => Source::RetryAfter,
            Some("headers") => Source::Headers,
            _ => Source::Refusals,
        }
    }
}

/// A key's learned rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    /// Starts per minute the key may make, as learned at `changed_at`.
    pub per_minute: i64,
    /// The rate the last refusal cut (what recovery compounds back to), `None`
    /// when none is known (a rate learned from a wait).
    pub before: Option<i64>,
    pub source: Source,
    /// When it was last learned: the windows of growth count from it.
    pub changed_at: i64,
    /// The last refusal (or spent budget): the idle hour counts from it.
    pub refused_at: i64,
}

/// What the commit saw of a key's receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen {
    /// Items holding the key its receiver answered with success over the last
    /// `span_ms` (since the first of the window's starts, at least a second).
    pub taken: i64,
    pub span_ms: i64,
    /// The rate the receiver announced (its quota per window), per minute.
    pub announced: Option<i64>,
    /// The longest wait a refusal asked for (ms).
    pub wait_ms: Option<i64>,
}

/// A set rate (`rate` starts per `per_seconds`) in starts per minute, rounded
/// down but at least the floor: the ceiling learning keeps under.
pub fn ceiling_per_minute(rate: i64, per_seconds: i64) -> i64 {
    (rate * 60 / per_seconds.max(1)).max(FLOOR_PER_MINUTE)
}

/// A receiver's quota per window as a rate per minute (at least the floor),
/// `None` unless both are known and positive.
pub fn announced_per_minute(quota: Option<i64>, window_ms: Option<i64>) -> Option<i64> {
    let (quota, window_ms) = (quota?, window_ms?);
    (quota > 0 && window_ms > 0).then(|| {
        let per_minute = i128::from(quota) * 60_000 / i128::from(window_ms);
        per_minute.clamp(1, i128::from(MAX_PER_MINUTE)) as i64
    })
}

/// A refusal that announced no rate and asked no wait: [`learned_after`] with
/// what was taken alone.
pub fn refused(
    learned: Option<Learned>,
    taken: i64,
    span_ms: i64,
    ceiling: Option<i64>,
    now: i64,
) -> Learned {
    let seen = Seen {
        taken,
        span_ms,
        ..Seen::default()
    };
    learned_after(learned, seen, ceiling, now)
}

/// The learned rate after a refusal (or a spent budget) at `now`, by the rule
/// above. `learned` is the state as stored: only these write it, so its
/// `changed_at` is its last change. Never below the floor nor above `ceiling`
/// (a set rate, per minute).
pub fn learned_after(
    learned: Option<Learned>,
    seen: Seen,
    ceiling: Option<i64>,
    now: i64,
) -> Learned {
    let learned = learned.filter(|l| !expired(l, now));
    let keep_under = |per_minute: i64| {
        let per_minute = per_minute.clamp(FLOOR_PER_MINUTE, MAX_PER_MINUTE);
        ceiling.map_or(per_minute, |c| per_minute.min(c))
    };
    let fresh = |per_minute: i64, before: Option<i64>, source: Source| Learned {
        per_minute,
        before,
        source,
        changed_at: now,
        refused_at: now,
    };
    if let Some(announced) = seen.announced {
        let rate = keep_under(announced);
        return fresh(rate, Some(rate), Source::Headers);
    }
    if let Some(l) = learned.filter(|l| now - l.changed_at < WINDOW_MS) {
        return Learned {
            refused_at: now,
            ..l
        };
    }
    if let Some(current) = learned.and_then(|l| at(l, ceiling, now)) {
        let cut = current.per_minute;
        return fresh(keep_under(cut / 2), Some(cut), Source::Refusals);
    }
    if seen.taken > 0 {
        let rate = keep_under(seen.taken * 60_000 / seen.span_ms.max(1_000));
        return fresh(rate, Some(rate), Source::Refusals);
    }
    let wait_ms = seen.wait_ms.unwrap_or(WINDOW_MS).clamp(1_000, WINDOW_MS);
    fresh(keep_under(60_000 / wait_ms), None, Source::RetryAfter)
}

/// The learned rate at `now` when nothing was refused since it was learned:
/// grown by [`GROWTH_X1024`] a whole window since, up to `before` (an
/// announced rate stays as it is), then probing above it by [`step`] a window
/// past [`HOLD_WINDOWS`]; at most `ceiling`; `None` once idle for [`IDLE_MS`]
/// (dropped). Only `per_minute` changes: the growth always counts from the
/// stored state.
pub fn at(learned: Learned, ceiling: Option<i64>, now: i64) -> Option<Learned> {
    if expired(&learned, now) {
        return None;
    }
    let windows = (now - learned.changed_at).max(0) / WINDOW_MS;
    let factor = GROWTH_X1024[windows.min(GROWTH_X1024.len() as i64 - 1) as usize];
    let grown = learned.per_minute * factor / 1_024;
    let raised = match (learned.before, learned.source) {
        (None, _) => grown,
        (Some(before), Source::Headers) => grown.min(before),
        (Some(before), _) => grown.min(before + (windows - HOLD_WINDOWS).max(0) * step(before)),
    };
    Some(Learned {
        per_minute: ceiling.map_or(raised, |c| raised.min(c)),
        ..learned
    })
}

/// What each window past [`HOLD_WINDOWS`] adds above `before` (`per_minute`):
/// an eighth of it, at least one.
pub fn step(per_minute: i64) -> i64 {
    (per_minute / 8).max(1)
}

/// The burst a learned rate allows after an idle spell: a second of it, at
/// least one (as a set rate's usual burst; a held claimer then claims half a
/// second of starts at once, not one claim per start).
pub fn burst(per_minute: i64) -> i64 {
    (per_minute / 60).max(1)
}

/// The burst of a learned rate in force on a key whose set limit has
/// `set_burst`: [`burst`], never above the set limit's own (`sql/key_rules.sql`).
pub fn burst_under(per_minute: i64, set_burst: Option<i64>) -> i64 {
    set_burst.map_or(burst(per_minute), |set| burst(per_minute).min(set.max(1)))
}

/// Whether a run's answer is its receiver refusing: a retry the receiver's
/// word called a refusal (`Ran::refused`, `core::receiver`: a `429`, a `403`
/// with a rate-limit signal, a `503` with a wait), any retry whose answer
/// asked for a delay (a kind's own `ctx.retry_after`), or a `429` without one
/// (`HTTP 429` is how `jobs::webhook::classify_status` words it, for a kind
/// that maps answers by their status alone). A delay that is the item's own
/// (`Ran::own_delay`: a `service` handler's `after_seconds`) is its handler's
/// decision about that item, not a receiver's "slow down".
pub fn is_refusal(ran: &crate::core::batch::model::Ran) -> bool {
    match &ran.outcome {
        crate::core::batch::model::Outcome::Retry(reason) => {
            ran.refused.is_some()
                || (!ran.own_delay
                    && (ran.retry_after_ms.is_some() || reason.starts_with("HTTP 429")))
        }
        _ => false,
    }
}

fn expired(learned: &Learned, now: i64) -> bool {
    now - learned.refused_at >= IDLE_MS
}

#[cfg(test)]
mod tests;
