//! Learned rates (backpressure), the rule alone: how a key's rate follows its
//! receiver's refusals, as a pure function of `now`. A refusal (a `429`, a `503`
//! with `Retry-After`) halves what the key started over the last window (never
//! below one a minute), each window without a refusal raises it one step
//! (additive increase), a rate set with `PUT /limits` is its ceiling (learning
//! only lowers what a key may start), and a rate nothing refused for an hour is
//! forgotten. Rates are counted in starts per minute, so the floor is an integer.
//!
//! Not applied yet: the claim does not read learned rates, nothing stores them
//! and there is no `LEARN_LIMITS` setting (what is in force is the receiver's
//! pause, `sql/pause_limit_keys.sql`). This is the rule the claim's state is to
//! follow, with its tests.

/// A learning window: refusals within one halve once (a burst of refusals is one
/// signal), and a rate rises one step per window without any.
pub const WINDOW_MS: i64 = 10_000;
/// The least a learned rate lets start: one a minute.
pub const FLOOR_PER_MINUTE: i64 = 1;
/// What a window without a refusal adds: one start a second more.
pub const STEP_PER_MINUTE: i64 = 60;
/// A learned rate nothing refused for this long is dropped (the key goes back to
/// its set rate, or to none).
pub const IDLE_MS: i64 = 3_600_000;

/// A key's learned rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    /// Starts per minute the key may make.
    pub per_minute: i64,
    /// When it last changed (a refusal's halving or a window's step).
    pub changed_at: i64,
    /// The last refusal: the idle hour counts from it.
    pub refused_at: i64,
}

/// A set rate (`rate` starts per `per_seconds`) in starts per minute, rounded
/// down but at least the floor: the ceiling learning keeps under.
pub fn ceiling_per_minute(rate: i64, per_seconds: i64) -> i64 {
    (rate * 60 / per_seconds.max(1)).max(FLOOR_PER_MINUTE)
}

/// The learned rate after a refusal at `now`, when the key started `started`
/// items over the last `window_ms` (its receiver took that, and refused): about
/// half of that, or of the rate learned already if lower, never below the floor
/// nor above `ceiling` (a set rate, per minute). A second refusal within the
/// window of the last halving keeps the rate (one burst, one signal).
pub fn refused(
    learned: Option<Learned>,
    started: i64,
    window_ms: i64,
    ceiling: Option<i64>,
    now: i64,
) -> Learned {
    let learned = learned.filter(|l| !expired(l, now));
    if let Some(l) = learned.filter(|l| now - l.changed_at < WINDOW_MS) {
        return Learned {
            refused_at: now,
            ..l
        };
    }
    let observed = started.max(0) * 60_000 / window_ms.max(1_000);
    let base = learned.map_or(observed, |l| l.per_minute.min(observed.max(1)));
    let halved = (base / 2).max(FLOOR_PER_MINUTE);
    Learned {
        per_minute: ceiling.map_or(halved, |c| halved.min(c)),
        changed_at: now,
        refused_at: now,
    }
}

/// The learned rate at `now` when nothing was refused since it last changed: one
/// step up per whole window since then (at most `ceiling`), or `None` once it
/// has been idle for [`IDLE_MS`] (dropped).
pub fn at(learned: Learned, ceiling: Option<i64>, now: i64) -> Option<Learned> {
    if expired(&learned, now) {
        return None;
    }
    let windows = (now - learned.changed_at).max(0) / WINDOW_MS;
    if windows == 0 {
        return Some(learned);
    }
    let raised = learned.per_minute + windows * STEP_PER_MINUTE;
    Some(Learned {
        per_minute: ceiling.map_or(raised, |c| raised.min(c)),
        changed_at: learned.changed_at + windows * WINDOW_MS,
        ..learned
    })
}

fn expired(learned: &Learned, now: i64) -> bool {
    now - learned.refused_at >= IDLE_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_000_000_000;

    #[test]
    fn a_refusal_halves_what_the_key_started_over_the_window() {
        // 120 starts in 10 s (12 a second, 720 a minute) met a refusal: 360 a minute.
        let l = refused(None, 120, WINDOW_MS, None, NOW);
        assert_eq!(l.per_minute, 360);
        assert_eq!((l.changed_at, l.refused_at), (NOW, NOW));
        // A learned rate lower than what was started halves itself.
        let again = refused(Some(l), 100, WINDOW_MS, None, NOW + WINDOW_MS);
        assert_eq!(again.per_minute, 180);
    }

    #[test]
    fn refusals_within_one_window_halve_once() {
        let l = refused(None, 120, WINDOW_MS, None, NOW);
        let burst = refused(Some(l), 120, WINDOW_MS, None, NOW + 500);
        assert_eq!(burst.per_minute, 360);
        assert_eq!(burst.refused_at, NOW + 500, "the idle hour starts over");
    }

    #[test]
    fn each_window_without_a_refusal_adds_a_step() {
        let l = refused(None, 120, WINDOW_MS, None, NOW);
        assert_eq!(at(l, None, NOW + WINDOW_MS - 1), Some(l));
        let one = at(l, None, NOW + WINDOW_MS).unwrap();
        assert_eq!(one.per_minute, 360 + STEP_PER_MINUTE);
        let three = at(l, None, NOW + 3 * WINDOW_MS + 5).unwrap();
        assert_eq!(
            (three.per_minute, three.changed_at),
            (360 + 3 * STEP_PER_MINUTE, NOW + 3 * WINDOW_MS)
        );
        assert_eq!(at(one, None, NOW + 3 * WINDOW_MS + 5), Some(three));
    }

    #[test]
    fn a_learned_rate_never_goes_below_one_a_minute() {
        let none_started = refused(None, 0, WINDOW_MS, None, NOW);
        assert_eq!(none_started.per_minute, FLOOR_PER_MINUTE);
        let mut l = refused(None, 4, WINDOW_MS, None, NOW);
        for n in 1..20 {
            l = refused(Some(l), 1, WINDOW_MS, None, NOW + n * WINDOW_MS);
        }
        assert_eq!(l.per_minute, FLOOR_PER_MINUTE);
    }

    #[test]
    fn a_set_rate_is_the_ceiling_learning_keeps_under() {
        // PUT /limits with 5 a second: 300 a minute.
        let ceiling = Some(ceiling_per_minute(5, 1));
        assert_eq!(ceiling, Some(300));
        let l = refused(None, 1_000, WINDOW_MS, ceiling, NOW);
        assert_eq!(l.per_minute, 300, "half of 6,000 a minute, kept under 300");
        let later = at(l, ceiling, NOW + 50 * WINDOW_MS).unwrap();
        assert_eq!(later.per_minute, 300, "the steps stop at the set rate");
        assert_eq!(ceiling_per_minute(1, 3_600), FLOOR_PER_MINUTE);
    }

    #[test]
    fn a_rate_nothing_refused_for_an_hour_is_dropped() {
        let l = refused(None, 120, WINDOW_MS, None, NOW);
        assert!(at(l, None, NOW + IDLE_MS - 1).is_some());
        assert_eq!(at(l, None, NOW + IDLE_MS), None);
        // A refusal after the idle hour learns afresh from what was started.
        let fresh = refused(Some(l), 20, WINDOW_MS, None, NOW + IDLE_MS);
        assert_eq!(fresh.per_minute, 60);
    }
}
