//! Scripted runs of the machine, one rule at a time. The randomised simulation
//! against the real store is `tests/drain_simulation.rs`.

use super::*;
use crate::core::batch::model::Outcome;
use crate::core::drain::budget::DrainLimits;
use crate::core::drain::budget::TAIL_SUBREQUESTS;

const POLICY: Policy = Policy {
    limits: DrainLimits {
        concurrency: 2,
        claim_chunk: 4,
        per_item_cost: 1,
        job_timeout_ms: 1_000,
        deadline_ms: 60_000,
        lease_ms: 30_000,
        max_children: i64::MAX,
    },
    retry: RetryPolicy {
        base_ms: 100,
        max_ms: 400,
    },
    refusal_give_up_ms: 86_400_000,
};

fn item(id: i64) -> ClaimedItem {
    ClaimedItem::sample(id, "b")
}

fn items(ids: std::ops::Range<i64>) -> Vec<ClaimedItem> {
    ids.map(item).collect()
}

/// A machine and its budget, as the shell sees them. The metered store charges
/// each D1 call as it goes out; here the test charges it where the shell would.
struct Run {
    m: Drain,
    budget: Budget,
}

impl Run {
    fn new(policy: Policy, limit: i64) -> Run {
        let budget = Budget::new(limit);
        Run {
            m: Drain::new(policy, budget.clone(), 0),
            budget,
        }
    }

    /// Poll until `Wait`/`Done`, charging D1 calls as the metered store would.
    fn actions(&mut self, now: i64) -> Vec<Action> {
        let mut out = Vec::new();
        loop {
            let a = self.m.poll(now);
            if matches!(
                a,
                Action::Claim { .. } | Action::Commit(_) | Action::CommitAgain(_)
            ) {
                self.budget.charge_call().expect("a planned call is paid");
            }
            let end = matches!(a, Action::Wait(_) | Action::Done(_));
            out.push(a);
            if end {
                return out;
            }
        }
    }

    fn reports(&mut self) -> Vec<Report> {
        std::iter::from_fn(|| self.m.next_report()).collect()
    }
}

fn dispatched(actions: &[Action]) -> Vec<i64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Dispatch { item, .. } => Some(item.item_id),
            _ => None,
        })
        .collect()
}

fn take_commit(actions: Vec<Action>) -> Vec<Settled> {
    actions
        .into_iter()
        .find_map(|a| match a {
            Action::Commit(rows) => Some(rows),
            _ => None,
        })
        .expect("a commit")
}

/// The retry of a failed commit.
fn take_commit_again(actions: Vec<Action>) -> Vec<Settled> {
    actions
        .into_iter()
        .find_map(|a| match a {
            Action::CommitAgain(rows) => Some(rows),
            _ => None,
        })
        .expect("a commit retry")
}

fn released(reports: &[Report]) -> Vec<i64> {
    reports
        .iter()
        .filter_map(|r| match r {
            Report::Released(item) => Some(item.item_id),
            _ => None,
        })
        .collect()
}

fn ids(rows: &[Settled]) -> Vec<i64> {
    rows.iter().map(|r| r.item.item_id).collect()
}

#[test]
fn claims_a_chunk_fills_the_window_and_claims_ahead() {
    let mut r = Run::new(POLICY, 1_000);
    assert_eq!(
        r.actions(0),
        vec![
            Action::Claim {
                limit: 4,
                lease_expires_at: 30_000
            },
            Action::Wait(None)
        ]
    );
    r.m.claimed(5, Ok(items(1..5)));
    let a = r.actions(5);
    // Two run, two wait; half a chunk fits behind them, so the next claim goes out.
    assert_eq!(dispatched(&a), vec![1, 2]);
    // It wakes when item 3, first in the queue, could no longer start in time:
    // its lease, less a 3 s call and the commit allowance (1 s + 2 × 3 × 5 ms).
    assert_eq!(
        a[2..],
        [
            Action::Claim {
                limit: 2,
                lease_expires_at: 30_005
            },
            Action::Wait(Some(29_999 - 3_000 - 1_030 + 1))
        ]
    );
    assert_eq!(r.m.tally().claimed, 4);
}

#[test]
fn outcomes_wait_for_the_flush_timer_and_go_in_one_commit() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(1..4)));
    r.actions(0);
    // Item 1 answers: item 3 takes its slot, and the flush timer starts.
    r.m.finished(10, item(1), Outcome::Done, 0.0);
    let a = r.actions(10);
    assert_eq!(dispatched(&a), vec![3]);
    assert_eq!(a.last(), Some(&Action::Wait(Some(10 + FLUSH_INTERVAL_MS))));
    r.m.finished(50, item(2), Outcome::Retry("HTTP 503".into()), 0.0);
    // A timer call before its time changes nothing.
    let flush = 10 + FLUSH_INTERVAL_MS;
    r.m.timer(flush - 10);
    assert_eq!(r.actions(flush - 10), vec![Action::Wait(Some(flush))]);
    r.m.timer(flush);
    let rows = take_commit(r.actions(flush));
    assert_eq!(ids(&rows), vec![1, 2]);
    r.m.committed(flush + 15, rows, Ok(vec![1, 2]));
    // Once nothing runs, the last outcome goes at once, without the timer.
    r.m.finished(flush + 20, item(3), Outcome::Done, 0.0);
    let rows = take_commit(r.actions(flush + 20));
    r.m.committed(flush + 30, rows, Ok(vec![3]));
    assert_eq!(
        r.actions(flush + 30),
        vec![Action::Done(StopReason::Drained)]
    );
    let t = r.m.tally();
    assert_eq!((t.completed, t.retried, t.lost_leases), (2, 1, 0));
    // Only the retry is reported: completions are the hot path.
    let reports = r.reports();
    assert_eq!(reports.len(), 1);
    assert!(
        matches!(&reports[0], Report::Settled(s) if s.transition.status == ItemStatus::Pending)
    );
    assert_eq!(r.m.round_trips().commit_ms, 15);
}

#[test]
fn a_full_buffer_commits_without_waiting_for_the_timer() {
    let policy = Policy {
        limits: DrainLimits {
            concurrency: 600,
            claim_chunk: 600,
            ..POLICY.limits
        },
        ..POLICY
    };
    let mut r = Run::new(policy, 10_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(0..600)));
    r.actions(0);
    for id in 0..FLUSH_MAX_ROWS {
        r.m.finished(1, item(id), Outcome::Done, 0.0);
    }
    let rows = take_commit(r.actions(1));
    assert_eq!(rows.len(), FLUSH_MAX_ROWS as usize);
}

#[test]
fn dispatches_share_a_watchdog_timer_per_cohort() {
    let policy = Policy {
        limits: DrainLimits {
            concurrency: 10,
            claim_chunk: 10,
            ..POLICY.limits
        },
        ..POLICY
    };
    let mut r = Run::new(policy, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(0..10)));
    let new_timers = |actions: Vec<Action>| -> Vec<bool> {
        actions
            .into_iter()
            .filter_map(|a| match a {
                Action::Dispatch { new_watchdog, .. } => Some(new_watchdog),
                _ => None,
            })
            .collect()
    };
    // The first dispatch starts a cohort; the rest of that instant share it.
    let first = new_timers(r.actions(0));
    assert_eq!(first.len(), 10);
    assert_eq!(first.iter().filter(|&&n| n).count(), 1);
    assert!(first[0]);
}

#[test]
fn a_new_cohort_starts_once_the_current_one_is_old() {
    let policy = Policy {
        limits: DrainLimits {
            concurrency: 1,
            claim_chunk: 3,
            ..POLICY.limits
        },
        ..POLICY
    };
    let mut r = Run::new(policy, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(0..3)));
    let new_watchdog = |actions: &[Action]| {
        actions.iter().find_map(|a| match a {
            Action::Dispatch { new_watchdog, .. } => Some(*new_watchdog),
            _ => None,
        })
    };
    assert_eq!(new_watchdog(&r.actions(0)), Some(true));
    r.m.finished(249, item(0), Outcome::Done, 0.0);
    assert_eq!(new_watchdog(&r.actions(249)), Some(false));
    r.m.finished(250, item(1), Outcome::Done, 0.0);
    assert_eq!(new_watchdog(&r.actions(250)), Some(true));
}

#[test]
fn a_short_claim_refunds_what_it_held_and_ends_the_claims() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    // The claim held its statement (now made) and four dispatches.
    assert_eq!(r.budget.ledger().reserved, 4);
    r.m.claimed(0, Ok(items(1..2)));
    assert_eq!(r.budget.ledger().reserved, 1);
    let a = r.actions(0);
    assert_eq!(dispatched(&a), vec![1]);
    assert_eq!(a.last(), Some(&Action::Wait(None)));
    assert_eq!(r.budget.ledger().reserved, 0);
    // One claim statement, one dispatch.
    assert_eq!(r.budget.used(), 2);
    r.m.finished(5, item(1), Outcome::Done, 0.0);
    // Nothing else runs: the outcome is committed at once, without the timer.
    let rows = take_commit(r.actions(5));
    r.m.committed(6, rows, Ok(vec![1]));
    assert_eq!(r.actions(6), vec![Action::Done(StopReason::Drained)]);
}

#[test]
fn a_failed_claim_stops_claiming_but_commits_what_runs() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(1..5)));
    r.actions(0);
    r.m.claimed(1, Err(StoreError::Db("D1: overloaded".into())));
    assert_eq!(
        r.reports(),
        vec![Report::ClaimFailed(StoreError::Db("D1: overloaded".into()))]
    );
    // Nothing held for the failed claim's items any more; two still queued.
    assert_eq!(r.budget.ledger().reserved, 2);
    // Items 1 and 2 answer, 3 and 4 take their slots and answer.
    r.m.finished(2, item(1), Outcome::Done, 0.0);
    r.m.finished(2, item(2), Outcome::Done, 0.0);
    assert_eq!(dispatched(&r.actions(2)), vec![3, 4]);
    r.m.finished(3, item(3), Outcome::Done, 0.0);
    r.m.finished(3, item(4), Outcome::Done, 0.0);
    let rows = take_commit(r.actions(3));
    assert_eq!(ids(&rows), vec![1, 2, 3, 4]);
    r.m.committed(4, rows, Ok(vec![1, 2, 3, 4]));
    assert_eq!(r.actions(4), vec![Action::Done(StopReason::Error)]);
    assert_eq!(r.m.tally().completed, 4);
}

#[test]
fn a_failed_commit_is_retried_once_then_left_to_the_reaper() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(1..2)));
    r.actions(0);
    r.m.finished(1, item(1), Outcome::Done, 0.0);
    let rows = take_commit(r.actions(1));
    r.m.committed(2, rows, Err(StoreError::Db("D1: reset".into())));
    let again = take_commit_again(r.actions(2));
    assert_eq!(ids(&again), vec![1]);
    r.m.committed(3, again, Err(StoreError::Db("D1: reset".into())));
    assert_eq!(r.actions(3), vec![Action::Done(StopReason::Drained)]);
    let reports = r.reports();
    assert!(matches!(reports[0], Report::CommitRetry { rows: 1, .. }));
    assert!(matches!(&reports[1], Report::CommitFailed { item_ids, .. } if item_ids == &[1]));
    assert_eq!(r.m.tally().completed, 0);
}

#[test]
fn a_commit_retry_keeps_the_flush_for_outcomes_buffered_behind_it() {
    // Budget 8: a claim of 3 (1 + 3 + a flush + the
    // retry + the tail) that returns 2.
    let mut r = Run::new(POLICY, 8);
    assert!(matches!(r.actions(0)[0], Action::Claim { limit: 3, .. }));
    r.m.claimed(0, Ok(items(1..3)));
    let a = r.actions(0);
    assert_eq!(dispatched(&a), vec![1, 2]);
    assert_eq!(r.budget.free(), 5);
    // Item 1's commit (5 free: it, a flush for item 2 still running, the retry,
    // the tail).
    r.m.finished(10, item(1), Outcome::Done, 0.0);
    let t = 10 + FLUSH_INTERVAL_MS;
    r.m.timer(t);
    let first = take_commit(r.actions(t));
    assert_eq!(r.budget.free(), 4);
    // Item 2 answers while that commit is out; then the commit fails. Its retry
    // spends the retry kept and still leaves item 2's flush and the tail.
    r.m.finished(t + 5, item(2), Outcome::Done, 0.0);
    r.m.committed(t + 10, first, Err(StoreError::Db("D1: reset".into())));
    let again = take_commit_again(r.actions(t + 10));
    assert_eq!(ids(&again), vec![1]);
    r.m.committed(t + 15, again, Ok(vec![1]));
    let rows = take_commit(r.actions(t + 15));
    assert_eq!(ids(&rows), vec![2]);
    // A second failure has no retry left: item 2 is left to the reaper rather
    // than the tail spent.
    r.m.committed(t + 20, rows, Err(StoreError::Db("D1: reset".into())));
    assert_eq!(r.actions(t + 20), vec![Action::Done(StopReason::Drained)]);
    let reports = r.reports();
    assert!(matches!(reports[0], Report::CommitRetry { rows: 1, .. }));
    assert!(matches!(&reports[1], Report::CommitFailed { item_ids, .. } if item_ids == &[2]));
    assert_eq!(r.m.tally().completed, 1);
    assert_eq!(r.budget.free(), TAIL_SUBREQUESTS);
}

/// The defaults' drain limits (chunk 100 behind 25 slots, 10 s jobs, 50 s
/// deadline, 120 s leases), without the child cap (its own tests set it).
const DEFAULTS: Policy = Policy {
    limits: DrainLimits {
        concurrency: 25,
        claim_chunk: 100,
        per_item_cost: 1,
        job_timeout_ms: 10_000,
        deadline_ms: 50_000,
        lease_ms: 120_000,
        max_children: i64::MAX,
    },
    retry: POLICY.retry,
    refusal_give_up_ms: POLICY.refusal_give_up_ms,
};

/// The Free plan's default budget of 45 after a tick's due-schedules read and its
/// reap (nothing to fire): one claim of 38 items, 25 dispatched at once.
fn free_plan_run() -> Run {
    let mut r = Run::new(DEFAULTS, 45);
    r.budget.charge_call().unwrap();
    r.budget.charge_call().unwrap();
    let a = r.actions(0);
    assert!(matches!(a[0], Action::Claim { limit: 38, .. }), "{a:?}");
    r.m.claimed(10, Ok(items(0..38)));
    assert_eq!(dispatched(&r.actions(10)).len(), 25);
    r
}

#[test]
fn the_free_plan_budget_keeps_a_retry_for_its_one_flush() {
    // With SUBREQUEST_BUDGET=45 every outcome goes in one flush
    // at the end (no budget for a flush while calls run), and a transient error
    // on it costs a retry, not 38 delivered items left to the reaper.
    let mut r = free_plan_run();
    for id in 0..25 {
        r.m.finished(100 + id, item(id), Outcome::Done, 0.0);
    }
    // The timer fires, but a flush now would leave too little for the rest.
    r.m.timer(1_000);
    let a = r.actions(1_000);
    assert_eq!(dispatched(&a).len(), 13);
    assert!(!a.iter().any(|a| matches!(a, Action::Commit(_))), "{a:?}");
    for id in 25..38 {
        r.m.finished(2_000, item(id), Outcome::Done, 0.0);
    }
    let rows = take_commit(r.actions(2_000));
    assert_eq!(rows.len(), 38);
    r.m.committed(2_050, rows, Err(StoreError::Db("D1: reset".into())));
    let again = take_commit_again(r.actions(2_050));
    assert_eq!(again.len(), 38);
    r.m.committed(2_100, again, Ok((0..38).collect()));
    assert_eq!(r.actions(2_100), vec![Action::Done(StopReason::Budget)]);
    assert_eq!(r.m.tally().completed, 38);
    // 1 schedules read + 1 reap + 1 claim + 38 dispatches + 2 commit calls; the
    // tail is left.
    assert_eq!((r.budget.used(), r.budget.free()), (43, TAIL_SUBREQUESTS));
}

#[test]
fn a_retry_counts_what_its_failed_attempt_applied_as_applied() {
    // The failed attempt applied item 1 and lost its answer; the retry applies
    // item 2 and reads item 1 back: both completed, no lost lease.
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(1..3)));
    r.actions(0);
    r.m.finished(1, item(1), Outcome::Done, 0.0);
    r.m.finished(1, item(2), Outcome::Done, 0.0);
    let rows = take_commit(r.actions(1));
    r.m.committed(2, rows, Err(StoreError::Db("D1: answer lost".into())));
    let again = take_commit_again(r.actions(2));
    r.m.committed(3, again, Ok(vec![1, 2]));
    assert_eq!(r.actions(3), vec![Action::Done(StopReason::Drained)]);
    let t = r.m.tally();
    assert_eq!((t.completed, t.lost_leases), (2, 0));
}

#[test]
fn the_last_outcomes_go_out_at_once_in_statements_of_at_most_500() {
    let policy = Policy {
        limits: DrainLimits {
            concurrency: 1_000,
            claim_chunk: 1_000,
            ..POLICY.limits
        },
        ..POLICY
    };
    let mut r = Run::new(policy, 10_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(0..900)));
    r.actions(0);
    // Everything answers: no timer, one statement per 500 outcomes, one at a time.
    for id in 0..900 {
        r.m.finished(1, item(id), Outcome::Done, 0.0);
    }
    let first = take_commit(r.actions(1));
    assert_eq!(first.len(), 500);
    r.m.committed(2, first, Ok((0..500).collect()));
    let rest = take_commit(r.actions(2));
    assert_eq!(ids(&rest), (500..900).collect::<Vec<_>>());
    r.m.committed(3, rest, Ok((500..900).collect()));
    assert_eq!(r.actions(3), vec![Action::Done(StopReason::Drained)]);
    assert_eq!(r.m.tally().completed, 900);
}

#[test]
fn outcomes_of_lost_leases_are_counted_and_reported() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(0, Ok(items(1..3)));
    r.actions(0);
    r.m.finished(1, item(1), Outcome::Done, 0.0);
    r.m.finished(1, item(2), Outcome::Fail("HTTP 400".into()), 0.0);
    let rows = take_commit(r.actions(1));
    r.m.committed(2, rows, Ok(vec![2]));
    let t = r.m.tally();
    assert_eq!((t.completed, t.failed, t.lost_leases), (0, 1, 1));
    let reports = r.reports();
    assert!(matches!(&reports[0], Report::LeaseLost(i) if i.item_id == 1));
    assert!(matches!(&reports[1], Report::Settled(s) if s.transition.status == ItemStatus::Failed));
}

#[test]
fn a_claim_slower_than_its_lease_allows_releases_its_items_unrun() {
    // The claim took 27 s of a 30 s lease; a 3 s call and its
    // commit no longer fit. The items go back unrun (attempt given back) in one
    // commit instead of running under a lease the reaper may take.
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(27_000, Ok(items(1..4)));
    let a = r.actions(27_000);
    assert!(dispatched(&a).is_empty(), "{a:?}");
    assert_eq!(released(&r.reports()), vec![1, 2, 3]);
    let rows = take_commit(a);
    assert!(rows.iter().all(|s| s.transition.is_release()));
    assert_eq!(rows[0].transition.attempt, Some(0));
    assert_eq!(rows[0].lease_expires_at, 30_000);
    // Their dispatches were held by the claim and are given back.
    assert_eq!(r.budget.ledger().reserved, 0);
    r.m.committed(27_010, rows, Ok(vec![1, 2, 3]));
    assert_eq!(r.actions(27_010), vec![Action::Done(StopReason::Drained)]);
    let t = r.m.tally();
    assert_eq!((t.claimed, t.released, t.retried), (3, 3, 0));
}

#[test]
fn a_commit_slower_than_the_wind_down_holds_back_what_could_not_land() {
    // A commit still out after 4.4 s: D1 is that slow now, so an item's commit
    // may take 1 s + 2 × 3 × 4.4 s. Item 3 started before (with time to spare)
    // runs on; item 4 could no longer land before its lease expires and is
    // released when it would have started.
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(10, Ok(items(1..5)));
    assert_eq!(dispatched(&r.actions(10)), vec![1, 2]);
    r.m.finished(500, item(1), Outcome::Done, 0.0);
    assert_eq!(dispatched(&r.actions(500)), vec![3]);
    r.m.timer(500 + FLUSH_INTERVAL_MS);
    let rows = take_commit(r.actions(500 + FLUSH_INTERVAL_MS));
    r.m.finished(5_900, item(2), Outcome::Done, 0.0);
    let a = r.actions(5_900);
    assert!(dispatched(&a).is_empty(), "{a:?}");
    assert_eq!(released(&r.reports()), vec![4]);
    r.m.committed(6_000, rows, Ok(vec![1]));
    r.m.finished(6_100, item(3), Outcome::Done, 0.0);
    let rows = take_commit(r.actions(6_100));
    assert_eq!(ids(&rows), vec![2, 4, 3]);
    r.m.committed(6_200, rows, Ok(vec![2, 3, 4]));
    let t = r.m.tally();
    assert_eq!((t.completed, t.released), (3, 1));
    assert_eq!(r.m.round_trips().commit_ms, 4_500);
}

#[test]
fn a_slow_first_step_shortens_the_first_claim() {
    // The smallest lease for these limits: 3 call times and the 2 s wind-down.
    let lease_ms = crate::core::drain::timing::min_lease_ms(1_000, 4, 2);
    let policy = Policy {
        limits: DrainLimits {
            lease_ms,
            ..POLICY.limits
        },
        ..POLICY
    };
    let first_claim = |prepare_ms: i64| {
        let mut r = Run::new(policy, 1_000);
        r.m.prepared(prepare_ms);
        r.actions(prepare_ms).remove(0)
    };
    // Quick D1: the whole line of 6 fits the lease, a chunk of 4 is claimed.
    assert!(matches!(first_claim(10), Action::Claim { limit: 4, .. }));
    // D1 at 0.6 s: 5.8 s of wind-down leaves one call time, a line of 2.
    assert!(matches!(first_claim(600), Action::Claim { limit: 2, .. }));
    // D1 at 2 s: nothing claimed could be committed within its lease.
    assert_eq!(first_claim(2_000), Action::Done(StopReason::Deadline));
}

#[test]
fn an_outcome_whose_lease_is_near_is_committed_without_waiting_for_the_timer() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    r.m.claimed(10, Ok(items(1..5)));
    r.actions(10);
    r.m.finished(100, item(1), Outcome::Done, 0.0);
    r.actions(100);
    // A commit takes 26 s: D1 is that slow now.
    r.m.timer(100 + FLUSH_INTERVAL_MS);
    let rows = take_commit(r.actions(100 + FLUSH_INTERVAL_MS));
    r.m.committed(27_100, rows, Ok(vec![1]));
    // Item 2 answers; with commits this slow its lease (30 s) is too near for
    // the flush timer: it goes out at once with item 4, released, while item 3
    // still runs.
    r.m.finished(27_200, item(2), Outcome::Done, 0.0);
    let a = r.actions(27_200);
    assert_eq!(released(&r.reports()), vec![4]);
    assert_eq!(ids(&take_commit(a)), vec![2, 4]);
}

#[test]
fn past_the_deadline_nothing_is_claimed() {
    let mut r = Run::new(POLICY, 1_000);
    // 60 s deadline, 3 s calls, 2 s wind-down: 55,001 ms in, no call fits.
    assert_eq!(r.actions(55_001), vec![Action::Done(StopReason::Deadline)]);
    assert_eq!(r.budget.used(), 0);
}

#[test]
fn a_callback_counts_in_no_timeline_and_its_delivery_is_reported() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    let callback = ClaimedItem {
        subject_id: String::new(),
        kind: crate::core::batch::callback::KIND.into(),
        ..item(2)
    };
    r.m.claimed(0, Ok(vec![item(1), callback.clone()]));
    r.actions(0);
    r.m.finished(10, item(1), Outcome::Done, 0.0);
    r.m.finished(20, callback, Outcome::Done, 0.0);
    let rows = take_commit(r.actions(20));
    r.m.committed(30, rows, Ok(vec![1, 2]));
    let tally = r.m.tally();
    assert_eq!((tally.claimed, tally.completed), (2, 2));
    assert_eq!(
        tally.per_batch["b"].completed, 1,
        "the batch's timeline counts its item only"
    );
    let reported: Vec<i64> = r
        .reports()
        .iter()
        .filter_map(|rep| match rep {
            Report::Settled(s) => Some(s.item.item_id),
            _ => None,
        })
        .collect();
    assert_eq!(
        reported,
        vec![2],
        "an item's completion is not reported; a callback's is"
    );
}

#[test]
fn channel_results_are_committed_with_the_outcome() {
    let mut r = Run::new(POLICY, 1_000);
    r.actions(0);
    let multi = ClaimedItem {
        kind: "multi".into(),
        ..item(1)
    };
    r.m.claimed(0, Ok(vec![multi.clone()]));
    r.actions(0);
    let channels = crate::core::batch::receipts::ChannelResults::from([
        ("email".to_string(), Outcome::Done),
        ("push".to_string(), Outcome::Retry("HTTP 503".into())),
    ]);
    let outcome = crate::core::batch::receipts::outcome(&channels);
    let ran = Ran {
        channels: Some(channels),
        ..Ran::from(outcome)
    };
    r.m.finished(10, multi, ran, 0.0);
    let rows = take_commit(r.actions(10));
    let t = &rows[0].transition;
    assert_eq!(t.status, ItemStatus::Pending);
    assert_eq!(
        t.receipts.as_deref(),
        Some(
            r#"{"email":{"status":"delivered","at":10},"push":{"status":"pending","error":"HTTP 503"}}"#
        )
    );
    assert_eq!(
        t.error.as_deref(),
        Some("attempt 1 failed: channel push: HTTP 503")
    );
}

#[test]
fn a_claim_out_keeps_the_flush_for_its_items() {
    // Review of 565e1b0: a flush sent while a claim is out must leave the flush
    // that claim's items were planned with, or the older lease's outcomes can no
    // longer be committed before it expires. One slot, chunk 4, 25 s leases,
    // 1.1 s D1 (a claim outlasts the 1 s flush timer), 13 subrequests: a wind-down
    // of 9.8 s, a commit allowance of 7.6 s.
    let policy = Policy {
        limits: DrainLimits {
            concurrency: 1,
            lease_ms: 25_000,
            ..POLICY.limits
        },
        retry: POLICY.retry,
        refusal_give_up_ms: POLICY.refusal_give_up_ms,
    };
    let mut r = Run::new(policy, 13);
    r.m.prepared(1_100);
    let a = r.actions(0);
    assert!(
        matches!(
            a[0],
            Action::Claim {
                limit: 4,
                lease_expires_at: 25_000
            }
        ),
        "{a:?}"
    );
    r.m.claimed(1_100, Ok(items(1..5)));
    assert_eq!(dispatched(&r.actions(1_100)), vec![1]);
    r.m.finished(4_100, item(1), Outcome::Done, 0.0);
    let a = r.actions(4_100);
    assert_eq!(dispatched(&a), vec![2]);
    assert!(
        a.iter().any(|a| matches!(
            a,
            Action::Claim {
                limit: 2,
                lease_expires_at: 29_100
            }
        )),
        "{a:?}"
    );
    // The flush timer fires while the second claim is out: a commit of item 1
    // now would spend the flush its two items need, and items 2 to 4 could only
    // go in the last flush, after their lease expired.
    r.m.timer(4_100 + FLUSH_INTERVAL_MS);
    let a = r.actions(4_100 + FLUSH_INTERVAL_MS);
    assert!(!a.iter().any(|a| matches!(a, Action::Commit(_))), "{a:?}");
    r.m.claimed(5_200, Ok(items(5..7)));
    r.m.finished(7_100, item(2), Outcome::Done, 0.0);
    assert_eq!(dispatched(&r.actions(7_100)), vec![3]);
    r.m.finished(10_100, item(3), Outcome::Done, 0.0);
    assert_eq!(dispatched(&r.actions(10_100)), vec![4]);
    // The first lease's items have all answered: their commit frees their flush
    // and lands well before 25 s.
    r.m.finished(13_100, item(4), Outcome::Done, 0.0);
    let a = r.actions(13_100);
    assert_eq!(dispatched(&a), vec![5]);
    let rows = take_commit(a);
    assert_eq!(ids(&rows), vec![1, 2, 3, 4]);
    r.m.committed(14_200, rows, Ok(vec![1, 2, 3, 4]));
    r.m.finished(16_100, item(5), Outcome::Done, 0.0);
    assert_eq!(dispatched(&r.actions(16_100)), vec![6]);
    r.m.finished(19_100, item(6), Outcome::Done, 0.0);
    let rows = take_commit(r.actions(19_100));
    assert_eq!(ids(&rows), vec![5, 6]);
    r.m.committed(20_200, rows, Ok(vec![5, 6]));
    assert!(matches!(r.actions(20_200)[..], [Action::Done(_)]));
    assert_eq!(r.m.tally().completed, 6);
    assert_eq!(r.m.tally().lost_leases, 0);
}

fn refused() -> Refused {
    Refused("A single request has a maximum of 32 Worker invocations".into())
}

fn claims(actions: &[Action]) -> Vec<i64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Claim { limit, .. } => Some(*limit),
            _ => None,
        })
        .collect()
}

mod receivers;
mod refusals;
