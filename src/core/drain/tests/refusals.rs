//! The platform refusing dispatches, the child cap, a retry's own delay, and
//! claims that wait for held items.

use super::*;

#[test]
fn a_refused_dispatch_gives_its_item_back_unrun_with_its_attempt() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(1..2)));
    assert_eq!(dispatched(&r.actions(0)), vec![1]);
    r.m.refused(5, item(1), refused(), 0.0);
    let rows = take_commit(r.actions(5));
    assert_eq!(ids(&rows), vec![1]);
    let t = &rows[0].transition;
    assert_eq!(t.status, ItemStatus::Pending);
    assert!(t.is_release(), "{t:?}");
    // Attempt 1 is given back; its due time is left as it was: due at once.
    assert_eq!((t.attempt, t.run_after), (Some(0), None));
    r.m.committed(6, rows, Ok(vec![1]));
    assert_eq!(r.actions(6), vec![Action::Done(StopReason::Refused)]);
    let t = r.m.tally();
    assert_eq!((t.released, t.retried, t.failed), (1, 0, 0));
}

#[test]
fn after_a_refusal_the_queue_is_given_back_and_nothing_more_is_dispatched() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(1..5)));
    assert_eq!(dispatched(&r.actions(0)), vec![1, 2]);
    r.m.claimed(1, Ok(items(5..7)));
    r.m.refused(2, item(1), refused(), 0.0);
    // Item 1's slot is free, but 3 to 6 wait behind it: none of them starts.
    let a = r.actions(2);
    assert!(dispatched(&a).is_empty(), "{a:?}");
    assert!(
        !a.iter().any(|a| matches!(a, Action::Claim { .. })),
        "{a:?}"
    );
    // Their dispatches were held by their claims and are given back.
    assert_eq!(r.budget.ledger().reserved, 0);
    r.m.finished(3, item(2), Outcome::Done, 0.0);
    let rows = take_commit(r.actions(3));
    assert_eq!(ids(&rows), vec![1, 3, 4, 5, 6, 2]);
    assert!(rows[..5].iter().all(|s| s.transition.is_release()));
    r.m.committed(4, rows, Ok(vec![1, 2, 3, 4, 5, 6]));
    assert_eq!(r.actions(4), vec![Action::Done(StopReason::Refused)]);
    let t = r.m.tally();
    assert_eq!((t.claimed, t.completed, t.released), (6, 1, 5));
}

#[test]
fn a_call_that_answered_after_a_refusal_is_committed_as_usual() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(1..3)));
    r.actions(0);
    r.m.refused(2, item(1), refused(), 0.0);
    r.m.finished(3, item(2), Outcome::Retry("HTTP 503".into()), 0.0);
    r.m.timer(2 + FLUSH_INTERVAL_MS);
    let rows = take_commit(r.actions(2 + FLUSH_INTERVAL_MS));
    assert_eq!(ids(&rows), vec![1, 2]);
    // The answered one spent its attempt and backs off, as any retry.
    let t = &rows[1].transition;
    assert!(!t.is_release() && t.run_after.is_some(), "{t:?}");
}

#[test]
fn items_of_a_claim_out_when_a_refusal_came_are_given_back() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(1..5)));
    let a = r.actions(0);
    assert!(a.iter().any(|a| matches!(a, Action::Claim { .. })), "{a:?}");
    r.m.refused(1, item(1), refused(), 0.0);
    r.m.refused(1, item(2), refused(), 0.0);
    r.actions(1);
    r.m.claimed(2, Ok(items(5..7)));
    let a = r.actions(2);
    assert!(dispatched(&a).is_empty(), "{a:?}");
    let rows = take_commit(a);
    assert_eq!(ids(&rows), vec![1, 3, 4, 2, 5, 6]);
    assert!(rows.iter().all(|s| s.transition.is_release()));
    assert_eq!(r.budget.ledger().reserved, 0);
}

#[test]
fn a_refusal_is_reported_once_with_its_message_and_all_it_gave_back() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    // A short claim: nothing else is due, no claim follows.
    r.m.claimed(0, Ok(items(1..4)));
    assert_eq!(dispatched(&r.actions(0)), vec![1, 2]);
    r.m.refused(1, item(1), refused(), 0.0);
    r.m.refused(1, item(2), Refused("a second message".into()), 0.0);
    // Nothing is reported until the drain is done: one line says it all.
    let rows = take_commit(r.actions(1));
    assert!(r.reports().is_empty());
    r.m.committed(2, rows, Ok(vec![1, 2, 3]));
    assert_eq!(r.actions(2), vec![Action::Done(StopReason::Refused)]);
    assert_eq!(
        r.reports(),
        vec![Report::DispatchRefused {
            message: refused().0,
            item_ids: vec![1, 3, 2]
        }]
    );
}

#[test]
fn one_invocation_dispatches_at_most_its_child_cap() {
    let capped = Policy {
        limits: DrainLimits {
            max_children: 3,
            ..POLICY.limits
        },
        ..POLICY
    };
    let mut r = Run::new(capped, 1_000);
    assert!(matches!(r.actions(0)[0], Action::Claim { limit: 3, .. }));
    r.m.claimed(0, Ok(items(1..4)));
    assert_eq!(dispatched(&r.actions(0)), vec![1, 2]);
    r.m.finished(1, item(1), Outcome::Done, 0.0);
    r.m.finished(1, item(2), Outcome::Done, 0.0);
    assert_eq!(dispatched(&r.actions(1)), vec![3]);
    r.m.finished(2, item(3), Outcome::Done, 0.0);
    let rows = take_commit(r.actions(2));
    r.m.committed(3, rows, Ok(vec![1, 2, 3]));
    assert_eq!(r.actions(3), vec![Action::Done(StopReason::ChildCap)]);
}

#[test]
fn items_released_unrun_do_not_count_against_the_child_cap() {
    let capped = Policy {
        limits: DrainLimits {
            max_children: 3,
            ..POLICY.limits
        },
        ..POLICY
    };
    let mut r = Run::new(capped, 1_000);
    r.actions(0);
    // Too late for its lease: all three go back unrun, and another claim of
    // three may follow (here the deadline stops it first).
    r.m.claimed(27_000, Ok(items(1..4)));
    r.actions(27_000);
    assert_eq!(released(&r.reports()), vec![1, 2, 3]);
    assert_eq!(r.m.plan_state(27_000).children, 0);
}

/// A run with its own retry policy for kind `nudge`, two items claimed and
/// dispatched: item 1 of kind `nudge`, item 2 of another kind.
fn nudge_with_own_retry(own: RetryPolicy) -> (Run, ClaimedItem) {
    let mut r = Run::new(POLICY, 1_000);
    r.m.set_kind_retry(vec![("nudge".to_string(), own)]);
    r.actions(0);
    let nudge = ClaimedItem {
        kind: "nudge".into(),
        ..item(1)
    };
    r.m.claimed(0, Ok(vec![nudge.clone(), item(2)]));
    r.actions(0);
    (r, nudge)
}

#[test]
fn a_kinds_own_backoff_sets_its_retry_delay() {
    let (mut r, nudge) = nudge_with_own_retry(RetryPolicy {
        base_ms: 10,
        max_ms: 10,
    });
    r.m.finished(10, nudge, Outcome::Retry("HTTP 503".into()), 0.999_999);
    r.m.finished(10, item(2), Outcome::Retry("HTTP 503".into()), 0.999_999);
    let rows = take_commit(r.actions(10));
    let after: Vec<Option<i64>> = rows.iter().map(|s| s.transition.run_after).collect();
    // Its own 10 ms; other kinds keep the global backoff (100 ms on attempt 1).
    assert_eq!(after, vec![Some(10 + 9), Some(10 + 99)]);
}

#[test]
fn a_retry_after_sets_the_next_attempts_delay_capped_by_the_retry_cap() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(vec![item(1), item(2)]));
    r.actions(0);
    let after = |ms| Ran {
        retry_after_ms: Some(ms),
        own_delay: false,
        ..Ran::from(Outcome::Retry("HTTP 429".into()))
    };
    // Past the cap (400 ms), and shorter than the backoff (50 to 100 ms).
    r.m.finished(10, item(1), after(120_000), 0.0);
    r.m.finished(10, item(2), after(0), 0.999_999);
    let rows = take_commit(r.actions(10));
    let after: Vec<Option<i64>> = rows.iter().map(|s| s.transition.run_after).collect();
    assert_eq!(after, vec![Some(10 + 400), Some(10)]);
}

#[test]
fn an_items_own_delay_delays_it_alone_spends_its_attempt_and_pauses_nothing() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    let keyed = |id| ClaimedItem {
        limits: Some(r#"["service:HANDLER"]"#.into()),
        ..item(id)
    };
    r.m.claimed(0, Ok(vec![keyed(1), keyed(2)]));
    r.actions(0);
    let own = Ran {
        retry_after_ms: Some(300),
        own_delay: true,
        ..Ran::from(Outcome::Retry("HTTP 503".into()))
    };
    r.m.finished(10, keyed(1), own, 0.0);
    r.m.finished(10, keyed(2), Outcome::Done, 0.0);
    let rows = take_commit(r.actions(10));
    let t = &rows[0].transition;
    assert_eq!(
        (t.status, t.run_after),
        (ItemStatus::Pending, Some(10 + 300))
    );
    // Not a refusal: no pause, no rate learned, the attempt spent.
    assert_eq!(
        (t.paused_until, t.refused_at, t.attempt),
        (None, None, None)
    );
    assert_eq!(t.error.as_deref(), Some("attempt 1 failed: HTTP 503"));
    assert_eq!(rows[1].transition.status, ItemStatus::Completed);
}

#[test]
fn a_retry_after_on_the_last_attempt_still_fails_the_item() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    let last = ClaimedItem {
        attempt: 3,
        max_attempts: 3,
        ..item(1)
    };
    r.m.claimed(0, Ok(vec![last.clone()]));
    r.actions(0);
    let ran = Ran {
        retry_after_ms: Some(50),
        own_delay: false,
        ..Ran::from(Outcome::Retry("HTTP 429".into()))
    };
    r.m.finished(10, last, ran, 0.0);
    let rows = take_commit(r.actions(10));
    assert_eq!(rows[0].transition.status, ItemStatus::Failed);
    assert_eq!(rows[0].transition.run_after, None);
}

#[test]
fn a_retry_after_sets_the_retry_delay_instead_of_the_backoff_within_the_kinds_cap() {
    let (mut r, nudge) = nudge_with_own_retry(RetryPolicy {
        base_ms: 10,
        max_ms: 50,
    });
    let after = |ms| Ran {
        retry_after_ms: Some(ms),
        own_delay: false,
        ..Ran::from(Outcome::Retry("HTTP 429".into()))
    };
    r.m.finished(10, nudge, after(300), 0.0);
    r.m.finished(10, item(2), after(300), 0.0);
    let rows = take_commit(r.actions(10));
    let run_after: Vec<Option<i64>> = rows.iter().map(|s| s.transition.run_after).collect();
    // The answer's 300 ms, not the backoff (50 ms on attempt 1), capped by each
    // kind's cap: its own 50 ms, the global 400 ms.
    assert_eq!(run_after, vec![Some(10 + 50), Some(10 + 300)]);
    assert_eq!(
        rows[1].transition.error.as_deref(),
        Some("attempt 1 failed: HTTP 429")
    );
}

#[test]
fn claims_wait_for_a_whole_chunk_once_the_queue_covers_a_round_trip() {
    // Two slots, chunks of 8 (a line of 10), items of 100 ms, D1 at 10 ms: once a
    // chunk's worth has finished (0.02 an ms), the queue covers a round trip
    // with 1 item, and a claim waits until it is down to that.
    let policy = Policy {
        limits: DrainLimits {
            claim_chunk: 8,
            ..POLICY.limits
        },
        retry: POLICY.retry,
        refusal_give_up_ms: POLICY.refusal_give_up_ms,
    };
    let mut r = Run::new(policy, 1_000);
    r.m.prepared(10);
    assert_eq!(claims(&r.actions(0)), [8]);
    r.m.claimed(10, Ok(items(1..9)));
    assert_eq!(dispatched(&r.actions(10)), [1, 2]);
    let mut next = 1;
    let mut step = |r: &mut Run, at: i64| {
        r.m.finished(at, item(next), Outcome::Done, 0.0);
        r.m.finished(at, item(next + 1), Outcome::Done, 0.0);
        next += 2;
        r.actions(at)
    };
    // Rate unknown (under 8 finished): half a chunk as soon as it fits.
    assert_eq!(claims(&step(&mut r, 110)), [4]);
    r.m.claimed(120, Ok(items(9..13)));
    assert_eq!(claims(&step(&mut r, 210)), [] as [i64; 0]);
    assert_eq!(claims(&step(&mut r, 310)), [4]);
    r.m.claimed(320, Ok(items(13..17)));
    assert_eq!(claims(&step(&mut r, 410)), [] as [i64; 0]);
    // 10 finished in 500 ms, a cover of 1: half a chunk fits, 4 are queued, and
    // the claim waits.
    let a = step(&mut r, 510);
    assert_eq!((dispatched(&a), claims(&a)), (vec![11, 12], vec![]));
    assert_eq!(claims(&step(&mut r, 610)), [] as [i64; 0]);
    // The queue is down to the cover: a whole chunk, while the window still runs.
    let a = step(&mut r, 710);
    assert_eq!((dispatched(&a), claims(&a)), (vec![15, 16], vec![8]));
}

#[test]
fn a_short_claim_with_items_held_claims_again_when_they_may_go() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    // 1 of 4 came back: the rest of what is due waits on a key until 250.
    r.m.claimed_holding(5, Ok(items(1..2)), Some(250));
    let a = r.actions(5);
    assert_eq!(dispatched(&a), vec![1]);
    assert_eq!(
        a.last(),
        Some(&Action::Wait(Some(250))),
        "not drained: it waits for the key"
    );
    r.m.timer(250);
    let a = r.actions(250);
    assert!(
        matches!(a[0], Action::Claim { .. }),
        "it claims again at the key's time: {a:?}"
    );
}

#[test]
fn a_commit_may_give_a_held_key_its_slot_back_so_the_drain_claims_after_it() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed_holding(5, Ok(items(1..3)), Some(5 + 1_000));
    r.actions(5);
    r.m.finished(10, item(1), Outcome::Done, 0.0);
    r.m.finished(20, item(2), Outcome::Done, 0.0);
    let rows = take_commit(r.actions(20));
    r.m.committed(30, rows, Ok(vec![1, 2]));
    let a = r.actions(30);
    assert!(
        matches!(a[0], Action::Claim { .. }),
        "the commit ended items holding the key: claim now, not at 1,005: {a:?}"
    );
}

#[test]
fn items_held_past_the_deadline_end_the_drain() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    // The key's next token comes after this drain's deadline (60 s).
    r.m.claimed_holding(5, Ok(Vec::new()), Some(90_000));
    assert_eq!(r.actions(5), vec![Action::Done(StopReason::Drained)]);
}
