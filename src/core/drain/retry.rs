//! Retry policy and the pure decision that turns a job's outcome into the row
//! transition to commit.

use crate::core::batch::model::{cut_reason, ClaimedItem, ItemStatus, Outcome, Transition};

/// Exponential backoff from `base_ms`, doubling per attempt, capped at `max_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub base_ms: i64,
    pub max_ms: i64,
}

impl RetryPolicy {
    /// Delay before the next try after `attempt` (1-based) failed. `jitter` in
    /// [0, 1) spreads retries over [delay/2, delay) so a burst of failures does not
    /// come back as a burst ("equal jitter").
    pub fn backoff_ms(&self, attempt: i64, jitter: f64) -> i64 {
        let exp = (attempt.max(1) - 1).min(32) as u32;
        let delay = self.base_ms.saturating_mul(1_i64 << exp).min(self.max_ms);
        let jitter = jitter.clamp(0.0, 1.0);
        delay / 2 + ((delay - delay / 2) as f64 * jitter) as i64
    }
}

/// Decide the transition for a claimed item's outcome at `now_ms`.
///
/// Invariant 3: a transient failure on the last allowed attempt is terminal, so
/// `attempt` never exceeds `max_attempts` and an exhausted item always says why.
pub fn decide(
    item: &ClaimedItem,
    outcome: &Outcome,
    policy: RetryPolicy,
    now_ms: i64,
    jitter: f64,
) -> Transition {
    let base = Transition {
        id: item.item_id,
        batch_id: item.batch_id.clone(),
        token: item.lease_token.clone(),
        status: ItemStatus::Completed,
        run_after: None,
        completed_at: Some(now_ms),
        error: None,
        attempt: None,
        receipts: None,
        paused_until: None,
        refused_at: None,
        refused_keys: None,
        refused_since: None,
        given_back: None,
        paced_at: None,
        announced_per_minute: None,
        announced_refill: None,
    };
    // The stored text is cut too: a reason of MAX_REASON_BYTES plus these words
    // would pass the bound `last_error` keeps.
    let error = |text: String| Some(cut_reason(text));
    match outcome {
        Outcome::Done => base,
        Outcome::Fail(reason) => Transition {
            status: ItemStatus::Failed,
            error: error(format!("permanent failure: {reason}")),
            ..base
        },
        Outcome::Retry(reason) if item.attempt >= item.max_attempts => Transition {
            status: ItemStatus::Failed,
            error: error(format!(
                "gave up after {} attempts; last error: {reason}",
                item.attempt
            )),
            ..base
        },
        Outcome::Retry(reason) => Transition {
            status: ItemStatus::Pending,
            run_after: Some(now_ms + policy.backoff_ms(item.attempt, jitter)),
            completed_at: None,
            error: error(format!("attempt {} failed: {reason}", item.attempt)),
            ..base
        },
    }
}

/// A retry whose answer asked for its own delay (`Ran::retry_after_ms`) waits
/// that long instead of the backoff, at most the retry cap (`policy.max_ms`): an
/// answer cannot park an item for longer than the deployment would. Its keys are
/// paused as long (`Transition::paused_until`) unless the delay is the item's
/// own (`own`: a `service` handler's `after_seconds`).
pub fn defer(
    transition: &mut Transition,
    retry_after_ms: Option<i64>,
    own: bool,
    policy: RetryPolicy,
    now_ms: i64,
) {
    if let (ItemStatus::Pending, Some(ms)) = (transition.status, retry_after_ms) {
        transition.run_after = Some(now_ms + ms.clamp(0, policy.max_ms));
        // The receiver's word holds for every item sent to it; a handler's
        // delay of its own item holds for that item alone.
        if !own {
            transition.paused_until = transition.run_after;
        }
    }
}

/// A receiver's refusal of a run (`Ran::refused`): not a failure, so it spends
/// no attempt (given back, as for an item released unrun) and is retried after
/// the receiver's wait (`retry_after_ms`, capped at `policy.max_ms`; the backoff
/// without one), its keys paused as long when it named a wait. Only a streak of
/// refusals longer than `give_up_ms` (`REFUSAL_GIVE_UP_SECONDS`), counted from
/// the first of them (`ClaimedItem::refused_since`), fails it, naming `by` (the
/// refused key) and how long.
#[allow(clippy::too_many_arguments)] // Each is one fact of the refusal; no bundle reads better.
pub fn refused(
    item: &ClaimedItem,
    reason: &str,
    retry_after_ms: Option<i64>,
    policy: RetryPolicy,
    give_up_ms: i64,
    by: &str,
    now_ms: i64,
    jitter: f64,
) -> Transition {
    let since = item.refused_since.unwrap_or(now_ms).min(now_ms);
    let base = give_back(item, "");
    if now_ms - since > give_up_ms {
        return Transition {
            status: ItemStatus::Failed,
            run_after: None,
            completed_at: Some(now_ms),
            error: Some(cut_reason(format!(
                "refused by {by} for {}; last answer: {reason}",
                span(now_ms - since)
            ))),
            attempt: None,
            refused_since: None,
            ..base
        };
    }
    let wait = match retry_after_ms {
        Some(ms) => ms.clamp(0, policy.max_ms),
        None => policy.backoff_ms(item.attempt, jitter),
    };
    Transition {
        run_after: Some(now_ms + wait),
        paused_until: retry_after_ms.map(|_| now_ms + wait),
        error: Some(cut_reason(format!(
            "attempt {} refused by {by}, given back: {reason}",
            item.attempt
        ))),
        refused_since: Some(since),
        ..base
    }
}

/// A span in its largest whole unit: `24 h`, `90 min` under 2 h, `45 s`.
fn span(ms: i64) -> String {
    let secs = ms / 1_000;
    if secs >= 7_200 {
        format!("{} h", secs / 3_600)
    } else if secs >= 120 {
        format!("{} min", secs / 60)
    } else {
        format!("{secs} s")
    }
}

/// Give a claimed item back unrun: `pending` again, due as before, with the
/// attempt its claim counted given back (it never ran, so it must not use one up;
/// an item on its last attempt would otherwise never be claimable again).
pub fn release(item: &ClaimedItem) -> Transition {
    give_back(
        item,
        "too little time left to run and commit it before its lease expired or the deadline",
    )
}

/// The same for an item given back because the platform refused a dispatch of
/// this invocation (its own, or an earlier one: nothing more is dispatched).
/// `thrown`: its own dispatch threw (counted in `given_back`); otherwise it was
/// claimed and waiting behind one that did (its count stays).
pub fn release_refused(item: &ClaimedItem, thrown: bool) -> Transition {
    Transition {
        given_back: Some(item.given_back + i64::from(thrown)),
        ..give_back(item, "the platform refused this invocation's dispatches")
    }
}

fn give_back(item: &ClaimedItem, why: &str) -> Transition {
    Transition {
        id: item.item_id,
        batch_id: item.batch_id.clone(),
        token: item.lease_token.clone(),
        status: ItemStatus::Pending,
        run_after: None,
        completed_at: None,
        error: Some(format!("attempt {} released unrun: {why}", item.attempt)),
        attempt: Some(item.attempt - 1),
        receipts: None,
        paused_until: None,
        refused_at: None,
        refused_keys: None,
        // Unrun: the streak of refusals it is in goes on.
        refused_since: item.refused_since,
        given_back: None,
        paced_at: None,
        announced_per_minute: None,
        announced_refill: None,
    }
}

/// Who refused `item`, as a give-up reason names it: the refused keys, else
/// every key it holds (its receiver's `host:` key among them).
pub(crate) fn refused_by(only: Option<&[String]>, item: &ClaimedItem) -> String {
    let keys = only.map_or_else(|| item.keys(), <[String]>::to_vec);
    if keys.is_empty() {
        "its receiver".into()
    } else {
        keys.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        base_ms: 60_000,
        max_ms: 1_800_000,
    };

    fn item(attempt: i64, max_attempts: i64) -> ClaimedItem {
        ClaimedItem {
            item_id: 7,
            lease_token: "tok".into(),
            batch_id: "b".into(),
            subject_id: "s".into(),
            attempt,
            max_attempts,
            kind: "webhook".into(),
            payload: "{}".into(),
            receipts: None,
            given_back: 0,
            limits: None,
            start_at: 0,
            refused_since: None,
        }
    }

    #[test]
    fn a_stored_error_keeps_at_most_max_reason_bytes_with_its_words() {
        use crate::core::batch::model::MAX_REASON_BYTES;
        let reason = "x".repeat(MAX_REASON_BYTES);
        for (attempt, outcome) in [
            (1, Outcome::Retry(reason.clone())),
            (5, Outcome::Retry(reason.clone())),
            (1, Outcome::Fail(reason.clone())),
        ] {
            let t = decide(&item(attempt, 5), &outcome, POLICY, 0, 0.5);
            let error = t.error.unwrap();
            assert_eq!(error.len(), MAX_REASON_BYTES, "{attempt} {outcome:?}");
        }
    }

    #[test]
    fn backoff_doubles_from_base_and_caps() {
        let full: Vec<i64> = (1..=7).map(|a| POLICY.backoff_ms(a, 0.999_999)).collect();
        assert_eq!(
            full,
            vec![59_999, 119_999, 239_999, 479_999, 959_999, 1_799_999, 1_799_999]
        );
    }

    #[test]
    fn jitter_spreads_over_the_upper_half() {
        assert_eq!(POLICY.backoff_ms(1, 0.0), 30_000);
        assert_eq!(POLICY.backoff_ms(1, 0.5), 45_000);
        // Out-of-range jitter is clamped, never a negative or doubled delay.
        assert_eq!(POLICY.backoff_ms(1, -3.0), 30_000);
        assert_eq!(POLICY.backoff_ms(1, 9.0), 60_000);
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        assert_eq!(POLICY.backoff_ms(10_000, 1.0), 1_800_000);
        assert_eq!(POLICY.backoff_ms(0, 1.0), 60_000);
    }

    #[test]
    fn done_completes_with_a_timestamp() {
        let t = decide(&item(1, 5), &Outcome::Done, POLICY, 1_000, 0.5);
        assert_eq!(t.status, ItemStatus::Completed);
        assert_eq!(
            (t.completed_at, t.run_after, t.error),
            (Some(1_000), None, None)
        );
        assert_eq!((t.id, t.token.as_str()), (7, "tok"));
    }

    #[test]
    fn retry_goes_back_to_pending_with_backoff_and_reason() {
        let t = decide(
            &item(2, 5),
            &Outcome::Retry("HTTP 503".into()),
            POLICY,
            1_000,
            0.0,
        );
        assert_eq!(t.status, ItemStatus::Pending);
        assert_eq!(t.run_after, Some(1_000 + 60_000));
        assert_eq!(t.completed_at, None);
        assert_eq!(t.error.as_deref(), Some("attempt 2 failed: HTTP 503"));
    }

    #[test]
    fn retry_on_last_attempt_fails_with_reason() {
        let t = decide(
            &item(5, 5),
            &Outcome::Retry("HTTP 500".into()),
            POLICY,
            1_000,
            0.0,
        );
        assert_eq!(t.status, ItemStatus::Failed);
        assert_eq!(t.completed_at, Some(1_000));
        assert_eq!(
            t.error.as_deref(),
            Some("gave up after 5 attempts; last error: HTTP 500")
        );
    }

    #[test]
    fn a_retry_after_sets_the_next_attempt_instead_of_the_backoff_capped_by_the_cap() {
        let retry = Outcome::Retry("HTTP 429".into());
        let after = |attempt, delay_ms| {
            let mut t = decide(&item(attempt, 5), &retry, POLICY, 1_000, 0.9);
            defer(&mut t, Some(delay_ms), false, POLICY, 1_000);
            t
        };
        let t = after(2, 2_000);
        assert_eq!(t.status, ItemStatus::Pending);
        assert_eq!(t.run_after, Some(1_000 + 2_000));
        assert_eq!(t.error.as_deref(), Some("attempt 2 failed: HTTP 429"));
        let capped = after(1, 86_400_000);
        assert_eq!(capped.run_after, Some(1_000 + POLICY.max_ms));
        let last = after(5, 2_000);
        assert_eq!(last.status, ItemStatus::Failed);
        assert_eq!(last.run_after, None);
        assert_eq!(
            last.error.as_deref(),
            Some("gave up after 5 attempts; last error: HTTP 429")
        );
    }

    #[test]
    fn permanent_failure_is_terminal_on_first_attempt() {
        let t = decide(
            &item(1, 5),
            &Outcome::Fail("HTTP 400".into()),
            POLICY,
            1_000,
            0.0,
        );
        assert_eq!(t.status, ItemStatus::Failed);
        assert_eq!(t.error.as_deref(), Some("permanent failure: HTTP 400"));
    }

    #[test]
    fn outcomes_of_runs_keep_the_claims_attempt_count() {
        for outcome in [
            Outcome::Done,
            Outcome::Retry("x".into()),
            Outcome::Fail("x".into()),
        ] {
            let t = decide(&item(2, 5), &outcome, POLICY, 1_000, 0.0);
            assert!(!t.is_release() && t.attempt.is_none(), "{outcome:?}");
        }
    }

    #[test]
    fn a_release_gives_the_unused_attempt_back_and_says_why() {
        // The last attempt included: it must stay claimable (attempt < max).
        let t = release(&item(5, 5));
        assert!(t.is_release());
        assert_eq!((t.status, t.attempt), (ItemStatus::Pending, Some(4)));
        assert_eq!((t.run_after, t.completed_at), (None, None));
        assert!(t.error.unwrap().starts_with("attempt 5 released unrun"));
        assert_eq!((t.id, t.token.as_str()), (7, "tok"));
    }
}
