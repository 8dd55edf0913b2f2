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
/// refusal, the announced rate alone (its wait already pauses the keys).
/// `None` when it asks nothing.
pub fn paced(word: &Word, now: i64) -> Option<Paced> {
    let budget = word.announced?;
    let until = budget
        .reset_at_ms
        .filter(|&at| budget.remaining == Some(0) && at > now);
    let per_minute = learn::announced_per_minute(budget.quota, budget.window_ms);
    let paced = Paced { until, per_minute };
    (until.is_some() || (word.refusal && per_minute.is_some())).then_some(paced)
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
                per_minute: None
            }),
            "no window announced: no rate, the pause alone"
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
                per_minute: Some(120)
            })
        );
        // Shopify's full bucket: until one call leaks, at its leak rate.
        let shopify = word(200, &[("X-Shopify-Shop-Api-Call-Limit", "40/40")]);
        assert_eq!(
            paced(&shopify, NOW),
            Some(Paced {
                until: Some(NOW + 500),
                per_minute: Some(120)
            })
        );
    }

    #[test]
    fn budget_left_or_none_announced_asks_nothing() {
        let left = word(
            200,
            &[
                ("RateLimit-Policy", "\"default\";q=10;w=5"),
                ("RateLimit", "\"default\";r=4;t=3"),
            ],
        );
        assert_eq!(paced(&left, NOW), None);
        assert_eq!(paced(&word(200, &[]), NOW), None);
        // A reset already past is no pause.
        let mut spent = left;
        spent.announced = Some(Budget {
            remaining: Some(0),
            reset_at_ms: Some(NOW),
            quota: None,
            window_ms: None,
        });
        assert_eq!(paced(&spent, NOW), None);
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
                per_minute: Some(120)
            })
        );
    }

    #[test]
    fn the_transition_pauses_its_keys_until_the_later_instant_and_learns_the_rate() {
        let mut t = completed();
        let p = Paced {
            until: Some(NOW + 3_000),
            per_minute: Some(120),
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
            },
            NOW,
        );
        assert_eq!((s.paused_until, s.announced_per_minute), (None, None));
    }
}
