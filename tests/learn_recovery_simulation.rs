//! Learned rates in virtual time: 10,000 items to a receiver that takes 100 a
//! second (a token bucket of a second's burst, refusing the rest with
//! `Retry-After: 1`), sent by a drain of 50 in flight that paces the
//! receiver's key by its learned rate (`core::learn`) and pauses it on each
//! refusal. The rule as it is against the rule it replaced (additive steps of
//! at most one a second per window, from a floor of one a minute when the
//! window before the first refusal took nothing), on a receiver fresh and on
//! one whose budget others had spent (its first wave all refused).

use cron_fanout::core::learn::{self, Learned, Seen};

const ITEMS: usize = 10_000;
const IN_FLIGHT: usize = 50;
/// The receiver: 100 a second, a burst of 100, each answer after 100 ms.
const RECEIVER_PER_S: f64 = 100.0;
const LATENCY_MS: i64 = 100;
const RETRY_AFTER_MS: i64 = 1_000;

/// The rule that was: a first refusal learns what was taken (at least one a
/// minute), later ones halve, each window adds a quarter of the stored rate,
/// at most 60 a minute.
mod additive {
    use cron_fanout::core::learn::WINDOW_MS;

    #[derive(Clone, Copy)]
    pub struct State {
        pub per_minute: i64,
        pub changed_at: i64,
    }

    pub fn at(s: State, now: i64) -> i64 {
        let windows = (now - s.changed_at).max(0) / WINDOW_MS;
        s.per_minute + windows * (s.per_minute / 4).clamp(1, 60)
    }

    pub fn refused(s: Option<State>, taken: i64, span_ms: i64, now: i64) -> State {
        if let Some(s) = s.filter(|s| now - s.changed_at < WINDOW_MS) {
            return s;
        }
        let per_minute = match s {
            Some(s) => at(s, now) / 2,
            None => taken * 60_000 / span_ms.max(1_000),
        }
        .max(1);
        State {
            per_minute,
            changed_at: now,
        }
    }
}

/// A learning rule as the simulation drives it.
trait Rule {
    /// The rate in force at `now` (per minute), `None` when none is learned.
    fn rate(&self, now: i64) -> Option<i64>;
    fn refused(&mut self, taken: i64, span_ms: i64, now: i64);
}

#[derive(Default)]
struct Compounding(Option<Learned>);

impl Rule for Compounding {
    fn rate(&self, now: i64) -> Option<i64> {
        learn::at(self.0?, None, now).map(|l| l.per_minute)
    }
    fn refused(&mut self, taken: i64, span_ms: i64, now: i64) {
        let seen = Seen {
            taken,
            span_ms,
            announced: None,
            wait_ms: Some(RETRY_AFTER_MS),
        };
        self.0 = Some(learn::learned_after(self.0, seen, None, now));
    }
}

#[derive(Default)]
struct Additive(Option<additive::State>);

impl Rule for Additive {
    fn rate(&self, now: i64) -> Option<i64> {
        self.0.map(|s| additive::at(s, now))
    }
    fn refused(&mut self, taken: i64, span_ms: i64, now: i64) {
        self.0 = Some(additive::refused(self.0, taken, span_ms, now));
    }
}

#[derive(Debug)]
struct Run {
    makespan_ms: i64,
    calls: usize,
    /// From the first refusal until the rate in force is first back at 90 a
    /// second (or none is in force).
    recovery_ms: Option<i64>,
}

/// Drive `rule` in 1 ms steps until every item is taken. `spent`: the
/// receiver's budget starts empty (others spent it).
fn simulate(mut rule: impl Rule, spent: bool) -> Run {
    let mut receiver_tokens = if spent { 0.0 } else { RECEIVER_PER_S };
    let mut pacer_tokens = 0.0f64;
    let mut paused_until = 0i64;
    let mut pending = ITEMS;
    let mut done = 0usize;
    let mut calls = 0usize;
    // (answer at, started at, taken)
    let mut flying: Vec<(i64, i64, bool)> = Vec::new();
    // (completed at, started at) of the items taken: what a refusal counts.
    let mut taken_log: Vec<(i64, i64)> = Vec::new();
    let mut first_refusal = None;
    let mut recovered_at = None;
    let mut now = 0i64;
    while done < ITEMS {
        receiver_tokens = (receiver_tokens + RECEIVER_PER_S / 1_000.0).min(RECEIVER_PER_S);
        let rate = rule.rate(now);
        if let Some(r) = rate {
            let per_ms = r as f64 / 60_000.0;
            pacer_tokens = (pacer_tokens + per_ms).min(learn::burst(r) as f64);
        }
        // Answers due now.
        let (due, still): (Vec<_>, Vec<_>) = flying.into_iter().partition(|a| a.0 <= now);
        flying = still;
        for (_, started, taken) in due {
            if taken {
                done += 1;
                taken_log.push((now, started));
            } else {
                first_refusal.get_or_insert(now);
                pending += 1;
                paused_until = paused_until.max(now + RETRY_AFTER_MS);
                // What the key's items took over the last window, as the
                // commit counts it: of those started in it, the completed.
                let window: Vec<_> = taken_log
                    .iter()
                    .filter(|(_, s)| *s >= now - learn::WINDOW_MS)
                    .collect();
                let span = window.iter().map(|(_, s)| now - s).max().unwrap_or(0);
                rule.refused(window.len() as i64, span, now);
                pacer_tokens = 0.0;
            }
        }
        if first_refusal.is_some()
            && recovered_at.is_none()
            && rule.rate(now).is_none_or(|r| r >= 5_400)
        {
            recovered_at = Some(now);
        }
        // Starts now.
        while pending > 0 && flying.len() < IN_FLIGHT && now >= paused_until {
            if rate.is_some() {
                if pacer_tokens < 1.0 {
                    break;
                }
                pacer_tokens -= 1.0;
            }
            pending -= 1;
            calls += 1;
            let taken = receiver_tokens >= 1.0;
            if taken {
                receiver_tokens -= 1.0;
            }
            flying.push((now + LATENCY_MS, now, taken));
        }
        now += 1;
    }
    Run {
        makespan_ms: now,
        calls,
        recovery_ms: recovered_at.map(|at| at - first_refusal.unwrap_or(0)),
    }
}

/// What the receiver's own limit allows: 10,000 at 100 a second.
const IDEAL_MS: i64 = (ITEMS as f64 / RECEIVER_PER_S * 1_000.0) as i64;

fn compare(spent: bool) -> (Run, Run) {
    let before = simulate(Additive::default(), spent);
    let after = simulate(Compounding::default(), spent);
    eprintln!(
        "receiver budget {}: additive {before:?} ({:.2} × ideal); compounding {after:?} ({:.2} × ideal)",
        if spent { "spent at start" } else { "fresh" },
        before.makespan_ms as f64 / IDEAL_MS as f64,
        after.makespan_ms as f64 / IDEAL_MS as f64,
    );
    (before, after)
}

#[test]
fn after_a_first_refusal_that_took_nothing_the_rate_recovers_in_seconds_not_minutes() {
    let (before, after) = compare(true);
    assert!(
        after.makespan_ms <= 2 * IDEAL_MS,
        "compounding: {after:?}, ideal {IDEAL_MS} ms"
    );
    let recovered = after.recovery_ms.expect("recovers before the end");
    assert!(
        before.recovery_ms.is_none_or(|b| recovered * 4 < b),
        "recovery {after:?} vs {before:?}"
    );
    assert!(after.makespan_ms < before.makespan_ms);
}

#[test]
fn against_a_fresh_receiver_compounding_is_no_slower_and_keeps_calls_per_item_low() {
    let (before, after) = compare(false);
    assert!(
        after.makespan_ms <= 2 * IDEAL_MS,
        "compounding: {after:?}, ideal {IDEAL_MS} ms"
    );
    assert!(
        after.makespan_ms <= before.makespan_ms,
        "{after:?} vs {before:?}"
    );
    assert!(
        after.calls as f64 / ITEMS as f64 <= 1.3,
        "calls per item {after:?}"
    );
}
