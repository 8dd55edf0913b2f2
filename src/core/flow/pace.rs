//! Pacing from the receiver's own word, before it refuses: an answer whose
//! announced budget (`core::receiver::Budget`) is spent pauses the keys its
//! item holds until the budget resets, and the quota per window it announces
//! becomes their learned rate (`core::learn`, source `headers`). Only such an
//! answer (or a refusal carrying a quota) gives a [`Paced`]: an answer with
//! budget left, or none announced, costs no write.

use crate::core::batch::model::Transition;
use crate::core::flow::learn;
use crate::core::flow::receiver::Word;

pub use crate::core::batch::model::Paced;

/// What `word`, read at `now`, asks of the keys: a pause until the reset when
/// nothing remains and the reset is ahead, with the announced rate; for a
/// refusal, the announced rate alone (its wait already pauses the keys); for
/// budget left with a reset ahead, what remains and when it resets, for the
/// drain to weigh against its calls on their way ([`spent_by_flight`]). The
/// rate is the quota per window when both are announced, else (a quota and a
/// reset alone, as GitHub's and Discord's `x-ratelimit-*`) the quota per the
/// time left to the reset (at least a second): no slower than the receiver's
/// own rate, and no faster than its budget lasts. `None` when it asks nothing.
pub fn paced(word: &Word, now: i64) -> Option<Paced> {
    let budget = word.announced?;
    let reset_at = budget.reset_at_ms.filter(|&at| at > now);
    let until = reset_at.filter(|_| budget.remaining == Some(0));
    let per_minute = learn::announced_per_minute(budget.quota, budget.window_ms).or_else(|| {
        let left = reset_at?.saturating_sub(now).max(1_000);
        learn::announced_per_minute(budget.quota, Some(left))
    });
    let left = budget.remaining.filter(|&r| r > 0).zip(reset_at);
    let paced = Paced {
        until,
        per_minute,
        remaining: left.map(|(r, _)| r),
        reset_at: left.map(|(_, at)| at),
        refill: budget.refill.filter(|_| per_minute.is_some()),
    };
    (until.is_some() || (word.refusal && per_minute.is_some()) || left.is_some()).then_some(paced)
}

/// A budget that is not spent yet but will be by the calls already on their
/// way to the receiver (`in_flight`: the drain's running items holding one of
/// the answered item's keys, as many as what remains or more) pauses the keys
/// until its reset now, as the answer of the last of them would: what the
/// drain would send meanwhile could only be refused.
pub fn spent_by_flight(paced: Paced, in_flight: i64, now: i64) -> Paced {
    match (paced.until, paced.remaining, paced.reset_at) {
        (None, Some(remaining), Some(at)) if in_flight >= remaining && at > now => Paced {
            until: Some(at),
            ..paced
        },
        _ => paced,
    }
}

/// How many of a drain's calls on their way (each as its item's keys,
/// `ClaimedItem::limits`' JSON) hold one of `keys`: what [`spent_by_flight`]
/// weighs a budget left against.
pub fn on_their_way<'a>(
    keys: &[String],
    running: impl IntoIterator<Item = Option<&'a str>>,
) -> i64 {
    if keys.is_empty() {
        return 0;
    }
    let holds = |limits: &Option<&str>| {
        let theirs: Vec<String> = limits
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default();
        theirs.iter().any(|k| keys.contains(k))
    };
    running.into_iter().filter(holds).count() as i64
}

/// Put a run's pacing on its transition, settled at `now`: a pause past any
/// already there (the keys of a refusal pause until its wait: the later of the
/// two stands), and the announced rate for the commit to teach the keys
/// (`sql/learn_limit_keys.sql`) when the run was refused or spent the budget.
pub fn apply(transition: &mut Transition, paced: Paced, now: i64) {
    if let Some(until) = paced.until.filter(|&until| until > now) {
        transition.paused_until = Some(transition.paused_until.map_or(until, |p| p.max(until)));
        transition.paced_at = Some(now);
    }
    if transition.refused_at.is_some() || transition.paced_at.is_some() {
        transition.announced_per_minute = paced.per_minute;
        transition.announced_refill = paced.refill.filter(|_| paced.per_minute.is_some());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{ClaimedItem, Outcome};
    use crate::core::receiver::{read, Budget};
    use crate::core::retry::{decide, RetryPolicy};

    const NOW: i64 = 1_795_000_000_000;

    fn word(status: u16, headers: &[(&str, &str)]) -> Word {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        read(status, &headers, b"", NOW, 3_600_000)
    }

    /// A success as the drain settles it (`retry::decide`).
    fn completed() -> Transition {
        let policy = RetryPolicy {
            base_ms: 1_000,
            max_ms: 60_000,
        };
        decide(
            &ClaimedItem::sample(1, "b"),
            &Outcome::Done,
            policy,
            NOW,
            0.0,
        )
    }

    #[test]
    fn a_spent_budget_pauses_until_its_reset_without_a_refusal() {
        // GitHub: docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
        let github = word(
            200,
            &[
                ("x-ratelimit-limit", "60"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1795000030"),
            ],
        );
        assert_eq!(
            paced(&github, NOW),
            Some(Paced {
                until: Some(NOW + 30_000),
                per_minute: Some(120),
                refill: Some(60),
                ..Paced::default()
            }),
            "no window announced: its quota per the time left to the reset"
        );
        // The IETF fields: a quota per window is a rate (10 per 5 s: 120 a minute).
        let ietf = word(
            200,
            &[
                ("RateLimit-Policy", "\"default\";q=10;w=5"),
                ("RateLimit", "\"default\";r=0;t=3"),
            ],
        );
        assert_eq!(
            paced(&ietf, NOW),
            Some(Paced {
                until: Some(NOW + 3_000),
                per_minute: Some(120),
                refill: Some(10),
                ..Paced::default()
            })
        );
        // Shopify's full bucket: until one call leaks, at its leak rate.
        let shopify = word(200, &[("X-Shopify-Shop-Api-Call-Limit", "40/40")]);
        assert_eq!(
            paced(&shopify, NOW),
            Some(Paced {
                until: Some(NOW + 500),
                per_minute: Some(120),
                refill: Some(1),
                ..Paced::default()
            })
        );
    }

    #[test]
    fn budget_left_pauses_nothing_and_says_what_remains_until_when() {
        let left = word(
            200,
            &[
                ("RateLimit-Policy", "\"default\";q=10;w=5"),
                ("RateLimit", "\"default\";r=4;t=3"),
            ],
        );
        assert_eq!(
            paced(&left, NOW),
            Some(Paced {
                until: None,
                per_minute: Some(120),
                remaining: Some(4),
                reset_at: Some(NOW + 3_000),
                refill: Some(10),
            })
        );
        let mut t = completed();
        apply(&mut t, paced(&left, NOW).unwrap(), NOW);
        assert_eq!(
            (t.paused_until, t.paced_at, t.announced_per_minute),
            (None, None, None),
            "budget left writes nothing"
        );
        assert_eq!(paced(&word(200, &[]), NOW), None);
        // A reset already past is no pause, and nothing to weigh.
        let mut spent = left;
        spent.announced = Some(Budget {
            remaining: Some(0),
            reset_at_ms: Some(NOW),
            quota: None,
            window_ms: None,
            refill: None,
        });
        assert_eq!(paced(&spent, NOW), None);
        spent.announced = Some(Budget {
            remaining: Some(3),
            reset_at_ms: Some(NOW - 1),
            quota: None,
            window_ms: None,
            refill: None,
        });
        assert_eq!(paced(&spent, NOW), None);
    }

    #[test]
    fn the_calls_on_their_way_are_those_holding_one_of_the_keys() {
        let keys = ["host:a".to_string()];
        let running = [
            Some(r#"["host:a","tenant:x"]"#),
            Some(r#"["host:b"]"#),
            None,
            Some("garbage"),
            Some(r#"["host:a"]"#),
        ];
        assert_eq!(on_their_way(&keys, running), 2);
        assert_eq!(on_their_way(&[], running), 0);
    }

    #[test]
    fn what_remains_no_more_than_the_calls_on_their_way_pauses_until_the_reset() {
        // GitHub: docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
        let github = word(
            200,
            &[
                ("x-ratelimit-limit", "10"),
                ("x-ratelimit-remaining", "3"),
                ("x-ratelimit-reset", "1795000002"),
            ],
        );
        let left = paced(&github, NOW).unwrap();
        assert_eq!(
            left,
            Paced {
                until: None,
                per_minute: Some(300),
                remaining: Some(3),
                reset_at: Some(NOW + 2_000),
                refill: Some(10),
            },
            "10 per the 2 s left: 300 a minute"
        );
        assert_eq!(spent_by_flight(left, 2, NOW), left, "one call still fits");
        let spent = spent_by_flight(left, 3, NOW);
        assert_eq!(spent.until, Some(NOW + 2_000));
        let mut t = completed();
        apply(&mut t, spent, NOW);
        assert_eq!(
            (
                t.paused_until,
                t.paced_at,
                t.announced_per_minute,
                t.announced_refill
            ),
            (Some(NOW + 2_000), Some(NOW), Some(300), Some(10)),
            "its reset gives the whole quota back"
        );
        // A reset past by the time it is weighed pauses nothing.
        assert_eq!(spent_by_flight(left, 9, NOW + 2_000), left);
    }

    #[test]
    fn a_refusal_carries_the_announced_rate_to_learn_from() {
        let refused = word(
            429,
            &[
                ("Retry-After", "2"),
                ("RateLimit-Policy", "\"default\";q=10;w=5"),
                ("RateLimit", "\"default\";r=2;t=3"),
            ],
        );
        assert_eq!(
            paced(&refused, NOW),
            Some(Paced {
                until: None,
                per_minute: Some(120),
                remaining: Some(2),
                reset_at: Some(NOW + 3_000),
                refill: Some(10),
            })
        );
    }

    #[test]
    fn the_transition_pauses_its_keys_until_the_later_instant_and_learns_the_rate() {
        let mut t = completed();
        let p = Paced {
            until: Some(NOW + 3_000),
            per_minute: Some(120),
            ..Paced::default()
        };
        apply(&mut t, p, NOW);
        assert_eq!(
            (t.paused_until, t.paced_at, t.announced_per_minute),
            (Some(NOW + 3_000), Some(NOW), Some(120))
        );
        // A refusal's wait past the reset stands.
        let mut r = completed();
        r.refused_at = Some(NOW);
        r.paused_until = Some(NOW + 9_000);
        apply(&mut r, p, NOW);
        assert_eq!(r.paused_until, Some(NOW + 9_000));
        // A rate alone on a success teaches nothing (it is not spent).
        let mut s = completed();
        apply(
            &mut s,
            Paced {
                until: None,
                per_minute: Some(120),
                remaining: Some(4),
                reset_at: Some(NOW + 3_000),
                refill: Some(10),
            },
            NOW,
        );
        assert_eq!((s.paused_until, s.announced_per_minute), (None, None));
    }
}
