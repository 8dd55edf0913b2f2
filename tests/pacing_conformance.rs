//! Pacing from a receiver's announced budget on real SQLite with the
//! migrations: an answer that spent the budget pauses its keys until the reset
//! and teaches them the announced rate, in the commit's own `batch()`; an answer
//! with budget left, or none announced, writes nothing. The rule is
//! `core::flow::pace`; the learning `core::learn` (source `headers`).

mod common;

use common::*;
use cron_fanout::core::flow::pace::{self, Paced};
use cron_fanout::core::model::{ClaimedItem, Outcome, Transition};
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{Claimed, LimitsInForce, Store};
use futures::executor::block_on;

const KEY: &str = "host:api.example";

/// A batch of `n` items, each holding [`KEY`].
fn batch(store: &Store<SqliteDb>, n: usize) {
    let b = batch_of(store, "b", n, 3);
    store
        .db()
        .conn()
        .execute(
            "UPDATE cron_queue SET limits = ?1 WHERE batch_id = ?2",
            rusqlite::params![format!("[\"{KEY}\"]"), b],
        )
        .unwrap();
}

/// A claim by a claimer that knows rates are in force (it charges at once),
/// as a drain does once a learned rate is.
fn claim_rated(store: &Store<SqliteDb>, now: i64, limit: i64, prefix: &str) -> Vec<ClaimedItem> {
    let claimed = Claimed::knowing(LimitsInForce {
        any: true,
        rates: true,
    });
    let claim = block_on(store.claim_due_items_after(now, limit, prefix, now + LEASE_MS, &claimed))
        .unwrap();
    claim.items
}

/// A success whose answer's budget asked `paced` of its keys.
fn done_paced(item: &ClaimedItem, paced: Paced, now: i64) -> Transition {
    let mut t = settle(item, Outcome::Done, now);
    pace::apply(&mut t, paced, now);
    t
}

/// A 429 refusing `item` at `now`, asking to wait `wait_ms` (as the drain
/// settles one: its keys paused until then).
fn refused_429(item: &ClaimedItem, now: i64, wait_ms: i64) -> Transition {
    let mut t = settle(item, Outcome::Retry("HTTP 429".into()), now);
    t.refused_at = Some(now);
    t.paused_until = Some(now + wait_ms);
    t
}

/// The key's (paused until, learned, learned before, learned from, refusals).
type KeyState = (i64, Option<i64>, Option<i64>, Option<String>, Option<i64>);

/// The key's state as stored, `None` without a row.
fn state(store: &Store<SqliteDb>) -> Option<KeyState> {
    store
        .db()
        .conn()
        .query_row(
            "SELECT paused_until, learned, learned_before, learned_from, refusals
             FROM limit_state WHERE key = ?1",
            [KEY],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .ok()
}

#[test]
fn a_spent_budget_pauses_the_key_until_the_reset_and_learns_the_announced_rate() {
    let store = setup();
    batch(&store, 20);
    let now = 1_000_000;
    let items = claim(&store, now, 4, "c1");
    assert_eq!(items.len(), 4);
    // The fourth answer says nothing remains, resetting in 3 s, 10 per 5 s.
    let spent = Paced {
        until: Some(now + 3_000),
        per_minute: Some(120),
        ..Paced::default()
    };
    let mut outcomes: Vec<Transition> = items[..3]
        .iter()
        .map(|i| settle(i, Outcome::Done, now))
        .collect();
    outcomes.push(done_paced(&items[3], spent, now));
    block_on(store.commit_outcomes(&outcomes)).unwrap();
    assert_eq!(
        state(&store),
        Some((
            now + 3_000,
            Some(120),
            Some(120),
            Some("headers".into()),
            Some(0)
        )),
        "paused to the reset, the announced rate learned, no refusal counted"
    );
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE status = 'completed'"
        ),
        4
    );
    assert_eq!(claim(&store, now + 2_999, 10, "c2").len(), 0, "paused");
    // After the reset: the learned rate, two a second, from an empty bucket
    // (no burst into the receiver's fresh window): one each 500 ms.
    let starts: Vec<i64> = claim_rated(&store, now + 3_000, 10, "c3")
        .iter()
        .map(|i| i.start_at)
        .collect();
    assert_eq!(
        starts,
        [now + 3_500, now + 4_000],
        "a second's tokens, each at its slot"
    );
}

#[test]
fn a_spent_budget_whose_reset_gives_calls_back_starts_with_one_at_the_reset() {
    // The IETF fields of a fixed window (its reset gives the quota back): one
    // start at the reset, then the learned rate; not the whole quota at once.
    let store = setup();
    batch(&store, 20);
    let now = 1_000_000;
    let items = claim(&store, now, 1, "c1");
    let spent = Paced {
        until: Some(now + 3_000),
        per_minute: Some(120),
        refill: Some(10),
        ..Paced::default()
    };
    block_on(store.commit_outcomes(&[done_paced(&items[0], spent, now)])).unwrap();
    let starts: Vec<i64> = claim_rated(&store, now + 3_000, 10, "c2")
        .iter()
        .map(|i| i.start_at)
        .collect();
    assert_eq!(
        starts,
        [now + 3_000, now + 3_500, now + 4_000],
        "one at the reset, then one each 500 ms"
    );
}

/// The key's stored state as an instant (ms): its tat over the rate of its basis.
fn next_instant(store: &Store<SqliteDb>) -> i64 {
    store
        .db()
        .conn()
        .query_row(
            "SELECT (tat + CAST(substr(basis, 1, instr(basis, '/') - 1) AS INTEGER) - 1)
                    / CAST(substr(basis, 1, instr(basis, '/') - 1) AS INTEGER)
             FROM limit_state WHERE key = ?1",
            [KEY],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn a_rate_announced_anew_keeps_the_starts_claimed_ahead_under_the_one_before() {
    let store = setup();
    batch(&store, 20);
    let now = 1_000_000;
    let items = claim(&store, now, 2, "c1");
    let spent = Paced {
        until: Some(now + 3_000),
        per_minute: Some(120),
        ..Paced::default()
    };
    block_on(store.commit_outcomes(&[done_paced(&items[0], spent, now)])).unwrap();
    // Two a second: the next second's slots, claimed ahead.
    let ahead: Vec<ClaimedItem> = claim_rated(&store, now + 3_000, 10, "c2");
    let starts: Vec<i64> = ahead.iter().map(|i| i.start_at).collect();
    assert_eq!(starts, [now + 3_500, now + 4_000]);
    let charged = next_instant(&store);
    // The other item's answer spends the budget again, announcing 3 a second,
    // resetting before those slots: they stay charged, in the new rate's units.
    let again = Paced {
        until: Some(now + 3_200),
        per_minute: Some(180),
        ..Paced::default()
    };
    block_on(store.commit_outcomes(&[done_paced(&items[1], again, now + 3_100)])).unwrap();
    assert_eq!(state(&store).unwrap().1, Some(180));
    assert!(
        next_instant(&store) >= charged,
        "the key's next start went back from {} to {}",
        charged - now,
        next_instant(&store) - now
    );
    let next: Vec<i64> = claim_rated(&store, now + 3_200, 10, "c3")
        .iter()
        .map(|i| i.start_at)
        .collect();
    assert!(
        next.iter().all(|&s| s > now + 3_500),
        "{next:?}: none before or with the first slot claimed ahead"
    );
}

#[test]
fn a_spent_budget_without_a_window_pauses_and_learns_nothing() {
    // GitHub's x-ratelimit-*: a reset and what remains, but no window.
    let store = setup();
    batch(&store, 10);
    let now = 1_000_000;
    let items = claim(&store, now, 2, "c1");
    let spent = Paced {
        until: Some(now + 30_000),
        per_minute: None,
        ..Paced::default()
    };
    let outcomes = [
        settle(&items[0], Outcome::Done, now),
        done_paced(&items[1], spent, now),
    ];
    block_on(store.commit_outcomes(&outcomes)).unwrap();
    assert_eq!(state(&store), Some((now + 30_000, None, None, None, None)));
    assert_eq!(claim(&store, now + 29_999, 10, "c2").len(), 0);
    assert_eq!(
        claim(&store, now + 30_000, 10, "c3").len(),
        8,
        "no rate: all due"
    );
}

#[test]
fn answers_with_budget_left_write_no_state() {
    let store = setup();
    batch(&store, 10);
    let now = 1_000_000;
    let items = claim(&store, now, 5, "c1");
    // Budget left: core::flow::pace pauses nothing; a rate alone on a success
    // is not carried to the commit.
    let left = Paced {
        until: None,
        per_minute: Some(120),
        ..Paced::default()
    };
    let outcomes: Vec<Transition> = items.iter().map(|i| done_paced(i, left, now)).collect();
    block_on(store.commit_outcomes(&outcomes)).unwrap();
    assert_eq!(state(&store), None);
    assert_eq!(count(&store, "SELECT count(*) FROM limit_state"), 0);
}

#[test]
fn a_refusal_with_an_announced_rate_learns_it_instead_of_what_was_taken() {
    let store = setup();
    batch(&store, 40);
    let now = 1_000_000;
    let items = claim(&store, now, 30, "c1");
    // 29 taken in a second would teach 1,740 a minute; the receiver said 120.
    let mut refused = refused_429(&items[0], now, 2_000);
    pace::apply(
        &mut refused,
        Paced {
            until: None,
            per_minute: Some(120),
            ..Paced::default()
        },
        now,
    );
    let mut outcomes = vec![refused];
    outcomes.extend(items[1..].iter().map(|i| settle(i, Outcome::Done, now)));
    block_on(store.commit_outcomes(&outcomes)).unwrap();
    let (_, learned, before, from, refusals) = state(&store).unwrap();
    assert_eq!(
        (learned, before, from.as_deref(), refusals),
        (Some(120), Some(120), Some("headers"), Some(1))
    );
}

#[test]
fn a_refusal_after_an_empty_window_learns_from_its_wait_not_the_floor() {
    let store = setup();
    batch(&store, 10);
    let now = 1_000_000;
    let items = claim(&store, now, 1, "c1");
    // Nothing taken: the receiver refused the first call, asking for 1 s.
    block_on(store.commit_outcomes(&[refused_429(&items[0], now, 1_000)])).unwrap();
    let (_, learned, before, from, _) = state(&store).unwrap();
    assert_eq!(
        (learned, before, from.as_deref()),
        (Some(60), None, Some("retry_after"))
    );
}
