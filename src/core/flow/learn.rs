//! Learned rates (backpressure): how a key's rate follows its receiver's
//! refusals, as a pure function of `now`. A refusal (what `core::receiver`
//! calls one: a `429`, a `403` with a rate-limit signal, a `503` with a wait;
//! or any retry whose answer asked for a delay, a kind's own
//! `ctx.retry_after`; [`is_refusal`]) halves the
//! key's learned rate, or, the first time, learns the rate its receiver took
//! over the last window (never below one a minute); each window without a refusal raises it
//! one step (additive increase); a rate set with `PUT /limits` is its ceiling
//! (learning only lowers what a key may start), and a rate nothing refused for
//! an hour is forgotten. Rates are counted in starts per minute, so the floor is
//! an integer.
//!
//! Applied by the claim (`sql/claim_selection.sql`: a key's rate in force is
//! min(its set rate, the learned one), a key without a set rate has the learned
//! one alone), stored by the commit that carries a refusal
//! (`sql/learn_limit_keys.sql`, once per commit per key). Both are this rule's
//! SQL twins: the state is written only on a refusal, and the steps and the idle
//! hour are computed from it at each read ([`at`]), so no window writes
//! anything. `LEARN_LIMITS=false` turns learning off (nothing is stored).

/// A learning window: refusals within one of a halving halve once (a burst of
/// refusals is one signal), and a rate rises one step per window without any.
pub const WINDOW_MS: i64 = 5_000;
/// The least a learned rate lets start: one a minute.
pub const FLOOR_PER_MINUTE: i64 = 1;
/// The most a window without a refusal adds: one start a second more. A slower
/// rate rises by a quarter of itself a window ([`step`]), so that a receiver
/// taking a few a minute is not sent one more a second each window.
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

/// The learned rate after a refusal at `now`: half of the rate learned already
/// (as [`at`] has raised it by `now`), or, when none is, the rate its receiver
/// took: `taken` items holding the key it answered with success over the last
/// `span_ms` (since the first of the window's starts, at least a second); never
/// below the floor nor above `ceiling` (a set rate, per minute). A first
/// refusal is not halved: what was taken is what the receiver takes, while
/// what was started (a drain's burst) can be any multiple of it. `learned` is
/// the state as stored: only refusals write it, so its `changed_at` is its last
/// halving, and a refusal within a window of that keeps the rate (one burst,
/// one signal).
pub fn refused(
    learned: Option<Learned>,
    taken: i64,
    span_ms: i64,
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
    let per_minute = match learned.and_then(|l| at(l, ceiling, now)) {
        Some(l) => l.per_minute / 2,
        None => taken.max(0) * 60_000 / span_ms.max(1_000),
    }
    .max(FLOOR_PER_MINUTE);
    Learned {
        per_minute: ceiling.map_or(per_minute, |c| per_minute.min(c)),
        changed_at: now,
        refused_at: now,
    }
}

/// The learned rate at `now` when nothing was refused since it last changed: one
/// [`step`] up per whole window since then (at most `ceiling`), or `None` once it
/// has been idle for [`IDLE_MS`] (dropped).
pub fn at(learned: Learned, ceiling: Option<i64>, now: i64) -> Option<Learned> {
    if expired(&learned, now) {
        return None;
    }
    let windows = (now - learned.changed_at).max(0) / WINDOW_MS;
    if windows == 0 {
        return Some(learned);
    }
    let raised = learned.per_minute + windows * step(learned.per_minute);
    Some(Learned {
        per_minute: ceiling.map_or(raised, |c| raised.min(c)),
        changed_at: learned.changed_at + windows * WINDOW_MS,
        ..learned
    })
}

/// What each window without a refusal adds to `per_minute` (as last learned): a
/// quarter of it, at least one, at most [`STEP_PER_MINUTE`].
pub fn step(per_minute: i64) -> i64 {
    (per_minute / 4).clamp(1, STEP_PER_MINUTE)
}

/// The burst a learned rate allows after an idle spell: a second of it, at
/// least one (as a set rate's usual burst; a held claimer then claims half a
/// second of starts at once, not one claim per start).
pub fn burst(per_minute: i64) -> i64 {
    (per_minute / 60).max(1)
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
mod tests {
    use super::*;

    const NOW: i64 = 1_795_000_000_000;

    #[test]
    fn a_first_refusal_learns_what_the_receiver_took_and_a_later_one_halves_it() {
        // 60 taken in 10 s (6 a second): 360 a minute; a span under a second
        // counts as one.
        let l = refused(None, 60, 10_000, None, NOW);
        assert_eq!(l.per_minute, 360);
        assert_eq!(refused(None, 10, 200, None, NOW).per_minute, 600);
        assert_eq!((l.changed_at, l.refused_at), (NOW, NOW));
        // A learned rate halves itself, as raised by the window since, whatever
        // was started.
        let again = refused(Some(l), 100, WINDOW_MS, None, NOW + WINDOW_MS);
        assert_eq!(again.per_minute, (360 + STEP_PER_MINUTE) / 2);
    }

    #[test]
    fn refusals_within_one_window_halve_once() {
        let l = refused(None, 60, 10_000, None, NOW);
        let burst = refused(Some(l), 120, WINDOW_MS, None, NOW + 500);
        assert_eq!(burst.per_minute, 360);
        assert_eq!(burst.refused_at, NOW + 500, "the idle hour starts over");
    }

    #[test]
    fn each_window_without_a_refusal_adds_a_step() {
        let l = refused(None, 60, 10_000, None, NOW);
        assert_eq!(at(l, None, NOW + WINDOW_MS - 1), Some(l));
        let one = at(l, None, NOW + WINDOW_MS).unwrap();
        assert_eq!(one.per_minute, 360 + STEP_PER_MINUTE);
        let three = at(l, None, NOW + 3 * WINDOW_MS + 5).unwrap();
        assert_eq!(
            (three.per_minute, three.changed_at),
            (360 + 3 * STEP_PER_MINUTE, NOW + 3 * WINDOW_MS)
        );
        // A slow rate rises by a quarter of itself a window, at least one.
        let slow = refused(None, 1, 60_000, None, NOW);
        assert_eq!(slow.per_minute, FLOOR_PER_MINUTE);
        assert_eq!(at(slow, None, NOW + 2 * WINDOW_MS).unwrap().per_minute, 3);
        let twelve = Learned {
            per_minute: 12,
            ..slow
        };
        assert_eq!(at(twelve, None, NOW + WINDOW_MS).unwrap().per_minute, 15);
    }

    #[test]
    fn a_learned_rate_never_goes_below_one_a_minute() {
        let none_started = refused(None, 0, WINDOW_MS, None, NOW);
        assert_eq!(none_started.per_minute, FLOOR_PER_MINUTE);
        // A refusal every window, each after a window's step, ends at the floor.
        let mut l = refused(None, 50, 10_000, None, NOW);
        for n in 1..40 {
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
        assert_eq!(l.per_minute, 300, "12,000 a minute taken, kept under 300");
        let later = at(l, ceiling, NOW + 50 * WINDOW_MS).unwrap();
        assert_eq!(later.per_minute, 300, "the steps stop at the set rate");
        assert_eq!(ceiling_per_minute(1, 3_600), FLOOR_PER_MINUTE);
    }

    #[test]
    fn a_rate_nothing_refused_for_an_hour_is_dropped() {
        let l = refused(None, 60, 10_000, None, NOW);
        assert!(at(l, None, NOW + IDLE_MS - 1).is_some());
        assert_eq!(at(l, None, NOW + IDLE_MS), None);
        // A refusal after the idle hour learns afresh from what was taken.
        let fresh = refused(Some(l), 10, 10_000, None, NOW + IDLE_MS);
        assert_eq!(fresh.per_minute, 60);
    }
}
