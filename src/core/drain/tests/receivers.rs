//! Throws told from crashes, keyed give-backs, rate slots, and receivers'
//! refusals (the attempt given back, streaks, channels).

use super::*;
use crate::core::batch::model::Paced;

/// An item whose dispatch threw `n` times running before.
fn thrown_before(id: i64, n: i64) -> ClaimedItem {
    ClaimedItem {
        given_back: n,
        ..item(id)
    }
}

#[test]
fn a_throw_below_a_place_already_answered_is_a_crash_that_spends_its_attempt() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(1..4)));
    assert_eq!(dispatched(&r.actions(0)), vec![1, 2]);
    // The second call answered: the platform takes at least two.
    r.m.finished(1, item(2), Outcome::Done, 0.0);
    r.m.refused(2, item(1), Refused("internal error".into()), 0.0);
    // Not a refusal: the drain goes on with item 3.
    let a = r.actions(2);
    assert_eq!(dispatched(&a), vec![3]);
    r.m.finished(3, item(3), Outcome::Done, 0.0);
    r.m.timer(3 + FLUSH_INTERVAL_MS);
    let rows = take_commit(r.actions(3 + FLUSH_INTERVAL_MS));
    let crashed = rows.iter().find(|s| s.item.item_id == 1).unwrap();
    let t = &crashed.transition;
    assert!(!t.is_release(), "{t:?}");
    assert_eq!(t.status, ItemStatus::Pending);
    assert!(t.run_after.is_some(), "backs off as any retry: {t:?}");
    assert_eq!(
        t.error.as_deref(),
        Some("attempt 1 failed: child crashed: internal error")
    );
    assert_eq!(t.given_back, None, "a run stores no throws running");
    let applied = ids(&rows);
    r.m.committed(4 + FLUSH_INTERVAL_MS, rows, Ok(applied));
    let tally = r.m.tally();
    assert_eq!((tally.retried, tally.released, tally.completed), (1, 0, 2));
    assert_eq!(r.m.answered_up_to(), 3);
}

#[test]
fn a_throw_below_what_an_earlier_drain_had_answered_is_a_crash() {
    let mut r = Run::new(POLICY, 1_000);
    r.m.knows_answered(5);
    r.actions(0);
    r.m.claimed(
        0,
        Ok(vec![ClaimedItem {
            attempt: 3,
            ..item(1)
        }]),
    );
    assert_eq!(dispatched(&r.actions(0)), vec![1]);
    r.m.refused(
        1,
        ClaimedItem {
            attempt: 3,
            ..item(1)
        },
        refused(),
        0.0,
    );
    let rows = take_commit(r.actions(1));
    // Its last attempt: it ends failed, within its attempts.
    let t = &rows[0].transition;
    assert_eq!(t.status, ItemStatus::Failed);
    assert!(
        t.error.as_deref().unwrap().contains("child crashed: "),
        "{t:?}"
    );
}

#[test]
fn a_throw_past_every_place_answered_is_a_refusal_counted_on_its_item() {
    let mut r = Run::new(POLICY, 1_000);
    r.m.knows_answered(1);
    r.actions(0);
    r.m.claimed(
        0,
        Ok(vec![item(1), thrown_before(2, 1), thrown_before(3, 1)]),
    );
    assert_eq!(dispatched(&r.actions(0)), vec![1, 2]);
    r.m.finished(1, item(1), Outcome::Done, 0.0);
    r.m.refused(2, thrown_before(2, 1), refused(), 0.0);
    let rows = take_commit(r.actions(2));
    assert_eq!(ids(&rows), vec![1, 2, 3]);
    // The thrown one counts one more throw running; the one queued behind it
    // keeps its count; both spend nothing.
    assert!(rows[1].transition.is_release() && rows[2].transition.is_release());
    assert_eq!(rows[1].transition.given_back, Some(2));
    assert_eq!(rows[2].transition.given_back, Some(1));
}

#[test]
fn with_nothing_answered_the_third_throw_running_is_a_crash() {
    for (before, crash) in [(0, false), (1, false), (2, true)] {
        let mut r = Run::new(POLICY, 1_000);
        r.actions(0);
        r.m.claimed(0, Ok(vec![thrown_before(1, before)]));
        r.actions(0);
        r.m.refused(1, thrown_before(1, before), refused(), 0.0);
        let rows = take_commit(r.actions(1));
        let t = &rows[0].transition;
        assert_eq!(!t.is_release(), crash, "{before} before: {t:?}");
        if !crash {
            assert_eq!(t.given_back, Some(before + 1));
        }
    }
}

#[test]
fn a_refusal_gives_back_the_queued_items_holding_its_keys_and_marks_its_commit() {
    // Concurrency 2, a claim of 4: items 1 and 2 run, 3 and 4 wait in the queue.
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    let keyed = |id: i64, keys: &str| ClaimedItem {
        limits: Some(keys.into()),
        ..item(id)
    };
    let claimed = vec![
        keyed(1, r#"["host:a"]"#),
        keyed(2, r#"["host:b"]"#),
        keyed(3, r#"["host:a","tenant:x"]"#),
        keyed(4, r#"["host:b"]"#),
    ];
    r.m.claimed(0, Ok(claimed.clone()));
    assert_eq!(dispatched(&r.actions(0)), [1, 2]);
    // The claim ahead finds nothing more.
    r.m.claimed(0, Ok(Vec::new()));
    r.actions(0);
    // host:a's receiver refuses item 1: item 3 (queued, holding host:a) goes
    // back unrun; item 4 (another key) is sent.
    r.m.finished(
        10,
        claimed[0].clone(),
        Outcome::Retry("HTTP 429".into()),
        0.0,
    );
    let mut after = r.actions(10);
    assert_eq!(dispatched(&after), [4]);
    assert_eq!(released(&r.reports()), [3]);
    r.m.finished(20, claimed[1].clone(), Outcome::Done, 0.0);
    r.m.finished(20, claimed[3].clone(), Outcome::Done, 0.0);
    after.extend(r.actions(20));
    after.extend(r.actions(20 + FLUSH_INTERVAL_MS));
    let rows: Vec<Settled> = after
        .into_iter()
        .filter_map(|a| match a {
            Action::Commit(rows) => Some(rows),
            _ => None,
        })
        .flatten()
        .collect();
    let refused = rows.iter().find(|s| s.item.item_id == 1).unwrap();
    assert_eq!(
        refused.transition.refused_at,
        Some(10),
        "the refusal teaches a rate"
    );
    let back = rows.iter().find(|s| s.item.item_id == 3).unwrap();
    assert!(back.transition.is_release(), "given back, its attempt too");
    assert_eq!(back.transition.refused_at, None);
    // A retry that is no refusal (a 500 without Retry-After) gives nothing back.
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(claimed.clone()));
    r.actions(0);
    r.m.claimed(0, Ok(Vec::new()));
    r.actions(0);
    r.m.finished(
        10,
        claimed[0].clone(),
        Outcome::Retry("HTTP 500".into()),
        0.0,
    );
    assert_eq!(dispatched(&r.actions(10)), [3]);
}

#[test]
fn an_answer_saying_its_budget_is_spent_gives_back_the_queued_items_holding_its_keys() {
    // Concurrency 2, a claim of 4: items 1 and 2 run, 3 and 4 wait in the queue.
    let claimed = vec![
        keyed(1, &["host:a"]),
        keyed(2, &["host:b"]),
        keyed(3, &["host:a"]),
        keyed(4, &["host:b"]),
    ];
    let mut r = two_running(&claimed);
    // host:a's receiver takes item 1 and says nothing remains until 2 s: item 3
    // would meet its refusal, so it goes back unrun; item 4 (another key) is sent.
    let spent = Ran {
        paced: Some(Paced {
            until: Some(2_000),
            ..Paced::default()
        }),
        ..Ran::from(Outcome::Done)
    };
    r.m.finished(10, claimed[0].clone(), spent, 0.0);
    assert_eq!(dispatched(&r.actions(10)), [4]);
    assert_eq!(released(&r.reports()), [3]);
    // Budget left (no pause) gives nothing back.
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(claimed.clone()));
    r.actions(0);
    r.m.claimed(0, Ok(Vec::new()));
    r.actions(0);
    let left = Ran {
        paced: Some(Paced {
            per_minute: Some(120),
            remaining: Some(5),
            reset_at: Some(2_000),
            ..Paced::default()
        }),
        ..Ran::from(Outcome::Done)
    };
    r.m.finished(10, claimed[0].clone(), left, 0.0);
    assert_eq!(dispatched(&r.actions(10)), [3]);
}

#[test]
fn a_multi_channels_spent_budget_pauses_that_channels_key_alone() {
    // Concurrency 2, a claim of 4: item 1 (two channels, host:a and host:b)
    // and 2 run; 3 (host:a) and 4 (host:b) wait in the queue.
    let claimed = vec![
        keyed(1, &["host:a", "host:b"]),
        keyed(2, &["host:c"]),
        keyed(3, &["host:a"]),
        keyed(4, &["host:b"]),
    ];
    let mut r = two_running(&claimed);
    // Item 1's channel to host:b spent its budget until 2 s; host:a's did not.
    let spent = Ran {
        paced: Some(Paced {
            until: Some(2_000),
            per_minute: Some(300),
            ..Paced::default()
        }),
        paced_keys: Some(vec!["host:b".into()]),
        ..Ran::from(Outcome::Done)
    };
    r.m.finished(10, claimed[0].clone(), spent, 0.0);
    let a = r.actions(10);
    assert_eq!(dispatched(&a), [3], "host:a's item goes on");
    assert_eq!(released(&r.reports()), [4], "host:b's goes back unrun");
    let rows = take_commit(a);
    let first = rows.iter().find(|s| s.item.item_id == 1).unwrap();
    assert_eq!(
        (
            first.transition.paused_until,
            first.transition.refused_keys.clone(),
            first.transition.refused_at
        ),
        (Some(2_000), Some(vec!["host:b".to_string()]), None),
        "the pause and the rate are host:b's alone, and no refusal"
    );
}

#[test]
fn an_item_waits_while_the_calls_on_their_way_will_spend_its_keys_budget_left() {
    let left = |remaining, reset_at| Ran {
        paced: Some(Paced {
            per_minute: Some(300),
            remaining: Some(remaining),
            reset_at: Some(reset_at),
            ..Paced::default()
        }),
        ..Ran::from(Outcome::Done)
    };
    let start = || {
        // Concurrency 2, a claim of 4: 1 (host:a) and 2 (host:b) run.
        let claimed = vec![
            keyed(1, &["host:a"]),
            keyed(2, &["host:b"]),
            keyed(3, &["host:a"]),
            keyed(4, &["host:a"]),
        ];
        let mut r = two_running(&claimed);
        // host:a has 1 left until 1 s, nothing on its way there: 3 goes.
        r.m.finished(10, claimed[0].clone(), left(1, 1_000), 0.0);
        assert_eq!(dispatched(&r.actions(10)), [3]);
        // 2's slot frees; 3 is on its way to spend host:a's last: 4 waits,
        // neither sent nor given back.
        r.m.finished(20, claimed[1].clone(), Ran::from(Outcome::Done), 0.0);
        let a = r.actions(20);
        assert!(dispatched(&a).is_empty(), "{a:?}");
        assert!(released(&r.reports()).is_empty());
        (r, claimed)
    };
    // 3's answer says the budget is spent: 4 goes back unrun.
    let (mut r, claimed) = start();
    let spent = Ran {
        paced: Some(Paced {
            until: Some(1_000),
            ..Paced::default()
        }),
        ..Ran::from(Outcome::Done)
    };
    r.m.finished(30, claimed[2].clone(), spent, 0.0);
    r.actions(30);
    assert_eq!(released(&r.reports()), [4]);
    // 3's answer says the window reset with budget to spare: 4 goes.
    let (mut r, claimed) = start();
    r.m.finished(30, claimed[2].clone(), left(4, 2_000), 0.0);
    assert_eq!(dispatched(&r.actions(30)), [4]);
    // No answer before the reset: 4 goes at the reset.
    let (mut r, _) = start();
    assert!(dispatched(&r.actions(999)).is_empty());
    assert_eq!(dispatched(&r.actions(1_000)), [4]);
}

#[test]
fn budget_left_no_more_than_the_calls_on_their_way_pauses_the_keys_and_gives_back_the_queue() {
    // Concurrency 2, a claim of 4: items 1 and 2 (host:a) run, 3 (host:a) and
    // 4 (host:b) wait in the queue.
    let claimed = vec![
        keyed(1, &["host:a"]),
        keyed(2, &["host:a"]),
        keyed(3, &["host:a"]),
        keyed(4, &["host:b"]),
    ];
    let mut r = two_running(&claimed);
    // Item 1's answer: 1 left until 2 s, and item 2 is on its way there.
    let one_left = Ran {
        paced: Some(Paced {
            per_minute: Some(300),
            remaining: Some(1),
            reset_at: Some(2_000),
            ..Paced::default()
        }),
        ..Ran::from(Outcome::Done)
    };
    r.m.finished(10, claimed[0].clone(), one_left, 0.0);
    let a = r.actions(10);
    assert_eq!(dispatched(&a), [4]);
    assert_eq!(released(&r.reports()), [3]);
    // Its pause is committed at once (D1 holds the key only then).
    let rows = take_commit(a);
    let first = rows.iter().find(|s| s.item.item_id == 1).unwrap();
    assert_eq!(
        (
            first.transition.paused_until,
            first.transition.announced_per_minute
        ),
        (Some(2_000), Some(300)),
        "paused until the reset, learning the rate"
    );
}

#[test]
fn items_claimed_ahead_are_dispatched_at_their_slots_in_slot_order() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    // A rate let 3 through: one now, two at slots ahead (returned out of order).
    let slot = |id, at| ClaimedItem {
        start_at: at,
        ..item(id)
    };
    r.m.claimed_holding(
        5,
        Ok(vec![slot(1, 5), slot(2, 400), slot(3, 200)]),
        Some(900),
    );
    let a = r.actions(5);
    assert_eq!(dispatched(&a), vec![1]);
    assert_eq!(a.last(), Some(&Action::Wait(Some(200))), "{a:?}");
    r.m.timer(199);
    assert_eq!(dispatched(&r.actions(199)), Vec::<i64>::new());
    r.m.timer(200);
    let a = r.actions(200);
    assert_eq!(dispatched(&a), vec![3]);
    // Both slots of the window run: it waits for an answer, not the slot.
    assert_eq!(a.last(), Some(&Action::Wait(Some(900))), "{a:?}");
    r.m.finished(300, item(1), Outcome::Done, 0.0);
    let a = r.actions(300);
    assert_eq!(a.last(), Some(&Action::Wait(Some(400))), "{a:?}");
    r.m.timer(400);
    assert_eq!(dispatched(&r.actions(400)), vec![2]);
}

#[test]
fn an_item_waiting_for_its_slot_past_its_lease_is_released_unrun() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    // Claimed ahead to a slot its lease (at the policy's lease) could not cover:
    // it goes back unrun when the call could no longer land, not at its slot.
    let late = ClaimedItem {
        start_at: POLICY.limits.lease_ms * 2,
        ..item(1)
    };
    r.m.claimed_holding(5, Ok(vec![late, item(2)]), None);
    let a = r.actions(5);
    assert_eq!(dispatched(&a), vec![2], "the one due now goes; {a:?}");
    let Some(Action::Wait(Some(at))) = a.last() else {
        panic!("{a:?}")
    };
    assert!(*at < POLICY.limits.lease_ms, "woken to release it: {a:?}");
    r.m.timer(*at);
    r.actions(*at);
    assert_eq!(released(&r.reports()), vec![1]);
}

/// A retry its receiver refused (`core::receiver`), with its wait.
fn refused_ran(reason: &str, wait_ms: Option<i64>, by: RefusedBy) -> Ran {
    Ran {
        retry_after_ms: wait_ms,
        own_delay: false,
        refused: Some(by),
        ..Ran::from(Outcome::Retry(reason.into()))
    }
}

/// A drain of concurrency 2 that claimed `claimed` at 0: its first two run,
/// the rest wait in its queue, and its next claim came back empty.
fn two_running(claimed: &[ClaimedItem]) -> Run {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(claimed.to_vec()));
    assert_eq!(dispatched(&r.actions(0)), [1, 2]);
    r.m.claimed(0, Ok(Vec::new()));
    r.actions(0);
    r
}

fn keyed(id: i64, keys: &[&str]) -> ClaimedItem {
    ClaimedItem {
        limits: Some(serde_json::to_string(keys).unwrap()),
        ..item(id)
    }
}

#[test]
fn a_receivers_refusal_gives_the_attempt_back_and_waits_what_it_asked() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    // On its last attempt: a refusal must not use it up.
    let last = ClaimedItem {
        attempt: 3,
        max_attempts: 3,
        ..keyed(1, &["host:api.github.com"])
    };
    r.m.claimed(0, Ok(vec![last.clone()]));
    r.actions(0);
    let by = RefusedBy::default();
    r.m.finished(10, last, refused_ran("HTTP 429", Some(200), by), 0.0);
    let rows = take_commit(r.actions(10));
    let t = &rows[0].transition;
    assert_eq!((t.status, t.attempt), (ItemStatus::Pending, Some(2)));
    assert_eq!((t.run_after, t.paused_until), (Some(210), Some(210)));
    assert_eq!((t.refused_at, t.refused_since), (Some(10), Some(10)));
    assert_eq!(t.refused_keys, None, "every key the item holds");
    assert_eq!(
        t.error.as_deref(),
        Some("attempt 3 refused by host:api.github.com, given back: HTTP 429")
    );
    assert!(!t.is_release(), "a run its receiver refused, not a release");
    r.m.committed(20, rows, Ok(vec![1]));
    assert_eq!((r.m.tally().retried, r.m.tally().released), (1, 0));
}

#[test]
fn a_refusal_without_a_wait_backs_off_and_pauses_nothing() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(vec![item(1)]));
    r.actions(0);
    let ran = refused_ran("HTTP 429", None, RefusedBy::default());
    r.m.finished(10, item(1), ran, 0.0);
    let t = take_commit(r.actions(10)).remove(0).transition;
    // The backoff of attempt 1 (50 to 100 ms), its attempt given back all the same.
    assert_eq!(
        (t.run_after, t.paused_until, t.attempt),
        (Some(60), None, Some(0))
    );
    assert_eq!(t.refused_at, Some(10));
}

#[test]
fn a_streak_of_refusals_longer_than_the_give_up_fails_the_item_naming_its_key() {
    let policy = Policy {
        refusal_give_up_ms: 7_200_000,
        ..POLICY
    };
    let at = |now: i64, since: i64| {
        let mut r = Run::new(policy, 1_000);
        r.actions(0);
        let refused_before = ClaimedItem {
            refused_since: Some(since),
            ..keyed(1, &["host:api.github.com"])
        };
        r.m.claimed(0, Ok(vec![refused_before.clone()]));
        r.actions(0);
        let ran = refused_ran("HTTP 403: rate limited", Some(50), RefusedBy::default());
        r.m.finished(now, refused_before, ran, 0.0);
        take_commit(r.actions(now)).remove(0).transition
    };
    // Two hours refused: still waiting, the streak counted from its start.
    let within = at(7_200_000 + 5, 5);
    assert_eq!(
        (within.status, within.refused_since),
        (ItemStatus::Pending, Some(5))
    );
    // A moment more: failed, saying by whom and for how long.
    let over = at(7_200_000 + 6, 5);
    assert_eq!(over.status, ItemStatus::Failed);
    assert_eq!(
        over.error.as_deref(),
        Some("refused by host:api.github.com for 2 h; last answer: HTTP 403: rate limited")
    );
    assert_eq!(
        (over.attempt, over.refused_since, over.run_after),
        (None, None, None)
    );
    assert_eq!(over.refused_at, Some(7_200_006), "its key still learns");
}

#[test]
fn a_retry_that_is_no_refusal_spends_its_attempt_and_ends_the_streak() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    let refused_before = ClaimedItem {
        refused_since: Some(5),
        ..item(1)
    };
    r.m.claimed(0, Ok(vec![refused_before.clone()]));
    r.actions(0);
    // A 503 that names a wait pauses and teaches its keys, as before, but is a
    // failure of the receiver's, not a refusal the reader called.
    let ran = Ran {
        retry_after_ms: Some(200),
        own_delay: false,
        ..Ran::from(Outcome::Retry("HTTP 503".into()))
    };
    r.m.finished(10, refused_before, ran, 0.0);
    let t = take_commit(r.actions(10)).remove(0).transition;
    assert_eq!(
        (t.status, t.attempt, t.refused_since),
        (ItemStatus::Pending, None, None)
    );
    assert_eq!(t.error.as_deref(), Some("attempt 1 failed: HTTP 503"));
}

#[test]
fn a_release_keeps_the_streak_of_refusals_it_is_in() {
    let refused_before = ClaimedItem {
        refused_since: Some(5),
        ..item(1)
    };
    let t = release(&refused_before);
    assert!(t.is_release());
    assert_eq!(t.refused_since, Some(5));
}

#[test]
fn a_channels_refusal_pauses_and_teaches_that_channels_key_only() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    let multi = ClaimedItem {
        kind: "multi".into(),
        ..keyed(1, &["host:email.test", "host:push.test"])
    };
    let other = item(2);
    let behind_push = keyed(3, &["host:push.test"]);
    let behind_email = keyed(4, &["host:email.test"]);
    let claimed = vec![multi.clone(), other, behind_push, behind_email];
    r.m.claimed(0, Ok(claimed));
    let a = r.actions(0);
    assert_eq!(dispatched(&a), vec![1, 2]);
    if !claims(&a).is_empty() {
        r.m.claimed(0, Ok(Vec::new()));
    }
    let channels = crate::core::batch::receipts::ChannelResults::from([
        ("email".to_string(), Outcome::Done),
        ("push".to_string(), Outcome::Retry("HTTP 429".into())),
    ]);
    let push = RefusedBy {
        keys: Some(vec!["host:push.test".into()]),
        with_failure: false,
    };
    let ran = Ran {
        channels: Some(channels),
        ..refused_ran("channel push: HTTP 429", Some(300), push)
    };
    r.m.finished(10, multi, ran, 0.0);
    // Only the item queued behind the refused channel's key goes back.
    assert_eq!(released(&r.reports()), vec![3]);
    // Its pause is committed at once (D1 holds the key only then).
    let a = r.actions(10);
    assert_eq!(dispatched(&a), vec![4]);
    let rows = take_commit(a);
    let t = &rows
        .iter()
        .find(|s| s.item.item_id == 1)
        .unwrap()
        .transition;
    assert_eq!(
        t.refused_keys.as_deref(),
        Some(&["host:push.test".to_string()][..])
    );
    assert_eq!((t.attempt, t.paused_until), (Some(0), Some(310)));
    assert_eq!(
        t.error.as_deref(),
        Some("attempt 1 refused by host:push.test, given back: channel push: HTTP 429")
    );
    // The delivered channel keeps its receipt.
    assert!(t
        .receipts
        .as_deref()
        .unwrap()
        .contains(r#""email":{"status":"delivered""#));
}

#[test]
fn a_channels_refusal_beside_a_failure_spends_the_attempt_and_still_names_its_key() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    let multi = keyed(1, &["host:email.test", "host:push.test"]);
    r.m.claimed(0, Ok(vec![multi.clone()]));
    r.actions(0);
    let push = RefusedBy {
        keys: Some(vec!["host:push.test".into()]),
        with_failure: true,
    };
    let ran = refused_ran(
        "channel email: HTTP 502; channel push: HTTP 429",
        Some(300),
        push,
    );
    r.m.finished(10, multi, ran, 0.0);
    let t = take_commit(r.actions(10)).remove(0).transition;
    assert_eq!((t.attempt, t.run_after), (None, Some(310)));
    assert_eq!(
        t.refused_keys.as_deref(),
        Some(&["host:push.test".to_string()][..])
    );
    assert_eq!(t.refused_at, Some(10));
}

#[test]
fn items_a_later_claim_returns_for_a_key_the_drain_saw_paused_go_back_unrun_until_the_pause_ends() {
    // Concurrency 2, a claim of 4: items 1 (host:a) and 2 run, 6 and 7 wait;
    // a second claim goes out.
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    let b = |id| keyed(id, &["host:b"]);
    r.m.claimed(0, Ok(vec![keyed(1, &["host:a"]), b(2), b(6), b(7)]));
    let first = r.actions(0);
    assert_eq!(dispatched(&first), [1, 2]);
    assert!(
        !claims(&first).is_empty(),
        "a second claim is out: {first:?}"
    );
    // host:a's budget is spent until 2 s. D1 learns it only with the commit,
    // which goes at once rather than at the next interval.
    let spent = Ran {
        paced: Some(Paced {
            until: Some(2_000),
            ..Paced::default()
        }),
        ..Ran::from(Outcome::Done)
    };
    r.m.finished(10, keyed(1, &["host:a"]), spent, 0.0);
    let a = r.actions(10);
    assert_eq!(dispatched(&a), [6]);
    assert!(
        a.iter().any(|a| matches!(a, Action::Commit(_))),
        "the pause is committed at once: {a:?}"
    );
    // The claim that went out before the commit landed returns host:a's item
    // 3: it goes back unrun, host:b's item 4 is sent.
    r.m.finished(15, b(2), Outcome::Done, 0.0);
    r.m.claimed(20, Ok(vec![keyed(3, &["host:a"]), b(4)]));
    let a = r.actions(20);
    assert_eq!(dispatched(&a), [7]);
    r.m.finished(25, b(6), Outcome::Done, 0.0);
    assert_eq!(dispatched(&r.actions(25)), [4], "3 would only be refused");
    assert_eq!(released(&r.reports()), [3]);
}
