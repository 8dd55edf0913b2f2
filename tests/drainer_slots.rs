//! Elastic drain's statements on real SQLite with the migrations: what the tick
//! counts before starting drainers (`count_drain_work.sql`), a drainer taking a
//! slot (`acquire_drainer_slot.sql`) and handing it on or freeing it
//! (`pass_drainer_slot.sql`), and an item's throws running (`given_back`, kept
//! by the group commit, read by the claim). The rules they serve are
//! `core::drainers` and `core::drain`.

mod common;

use common::*;
use cron_fanout::core::model::Outcome;
use cron_fanout::core::retry::release_refused;
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{DrainWork, SlotPassed, Store};
use futures::executor::block_on;

fn work(store: &Store<SqliteDb>, now: i64, cap: i64) -> DrainWork {
    block_on(store.count_drain_work(now, cap)).unwrap()
}

fn acquire(store: &Store<SqliteDb>, now: i64, holder: &str, max: i64) -> Option<i64> {
    block_on(store.acquire_drainer_slot(now, holder, now + 60_000, max)).unwrap()
}

/// A drainer of capacity 10 hands its slot on.
fn pass(store: &Store<SqliteDb>, now: i64, slot: i64, holder: &str, next: &str) -> SlotPassed {
    block_on(store.pass_drainer_slot(now, (slot, holder), next, now + 60_000, 10)).unwrap()
}

#[test]
fn the_tick_counts_due_items_up_to_its_cap_and_the_live_slots() {
    let store = setup();
    assert_eq!(work(&store, 1_000, 1_550), DrainWork { due: 0, live: 0 });
    batch_of(&store, "a", 40, 3);
    batch_of(&store, "b", 25, 3);
    assert_eq!(work(&store, 1_000, 1_550).due, 65);
    assert_eq!(work(&store, 1_000, 50).due, 50, "counted up to the cap");
    // Items in flight are not due.
    let claimed = claim(&store, 1_000, 10, "c1");
    assert_eq!(claimed.len(), 10);
    assert_eq!(work(&store, 1_000, 1_550).due, 55);
    // Live slots: held ones, not expired or freed ones.
    acquire(&store, 1_000, "h1", 50).unwrap();
    acquire(&store, 1_000, "h2", 50).unwrap();
    assert_eq!(work(&store, 1_000, 1_550).live, 2);
    assert_eq!(work(&store, 61_000, 1_550).live, 0, "their leases ran out");
    // Counting writes nothing and charges no rate.
    assert_eq!(count(&store, "SELECT count(*) FROM limit_state"), 0);
}

#[test]
fn items_held_back_by_limits_are_not_counted_as_due() {
    let store = setup();
    let batch = batch_of(&store, "keyed", 30, 3);
    store
        .db()
        .conn()
        .execute(
            "UPDATE cron_queue SET limits = '[\"github\"]' WHERE batch_id = ?1",
            [&batch],
        )
        .unwrap();
    batch_of(&store, "free", 5, 3);
    limit(&store, "github", None, 1, None, Some(4));
    assert_eq!(
        work(&store, 1_000, 1_550).due,
        5 + 4,
        "the free batch and what the key's concurrency lets through"
    );
}

#[test]
fn a_drainer_takes_the_lowest_free_slot_and_none_past_the_max() {
    let store = setup();
    assert_eq!(acquire(&store, 1_000, "h1", 3), Some(1));
    assert_eq!(acquire(&store, 1_000, "h2", 3), Some(2));
    assert_eq!(acquire(&store, 1_000, "h3", 3), Some(3));
    assert_eq!(acquire(&store, 1_000, "h4", 3), None, "three are live");
    // A raised MAX_DRAINERS has room at once.
    assert_eq!(acquire(&store, 1_000, "h4", 4), Some(4));
    // A freed slot (nothing due) is free again.
    assert_eq!(pass(&store, 2_000, 2, "h2", "h2b"), SlotPassed::Freed);
    assert_eq!(acquire(&store, 2_000, "h5", 4), Some(2));
    // A slot whose drainer died frees itself when its lease runs out.
    assert_eq!(acquire(&store, 61_001, "h6", 4), Some(1));
}

#[test]
fn a_slot_goes_on_while_work_is_due_once_per_holder_and_ends_with_it() {
    let store = setup();
    batch_of(&store, "a", 3, 3);
    let slot = acquire(&store, 1_000, "h1", 50).unwrap();
    assert_eq!(pass(&store, 2_000, slot, "h1", "h2"), SlotPassed::Continue);
    // The queue delivered the message twice: only the first hands it on.
    assert_eq!(pass(&store, 2_000, slot, "h1", "h2x"), SlotPassed::Lost);
    assert_eq!(
        work(&store, 2_000, 1_550).live,
        1,
        "the continuation holds it"
    );
    let items = claim(&store, 2_000, 10, "c1");
    assert_eq!(items.len(), 3);
    // Nothing due: the chain ends and the slot is free.
    assert_eq!(pass(&store, 3_000, slot, "h2", "h3"), SlotPassed::Freed);
    assert_eq!(work(&store, 3_000, 1_550), DrainWork { due: 0, live: 0 });
    // A slot another chain took after its lease ran out is not this one's.
    let again = acquire(&store, 4_000, "other", 50).unwrap();
    assert_eq!(again, slot);
    assert_eq!(pass(&store, 4_000, slot, "h3", "h4"), SlotPassed::Lost);
}

#[test]
fn a_tail_of_a_few_items_goes_on_in_the_lowest_live_chains_only() {
    let store = setup();
    for h in ["h1", "h2", "h3"] {
        acquire(&store, 1_000, h, 50).unwrap();
    }
    // 25 due at 10 a drainer: the chains on slots 1 to 3 take them; a fourth
    // would find nothing left.
    batch_of(&store, "tail", 25, 3);
    assert_eq!(acquire(&store, 1_000, "h4", 50), Some(4));
    assert_eq!(pass(&store, 2_000, 4, "h4", "n4"), SlotPassed::Freed);
    assert_eq!(
        pass(&store, 2_000, 3, "h3", "n3"),
        SlotPassed::Continue,
        "25 > 2 × 10"
    );
    assert_eq!(pass(&store, 2_000, 2, "h2", "n2"), SlotPassed::Continue);
    assert_eq!(pass(&store, 2_000, 1, "h1", "n1"), SlotPassed::Continue);
    // 5 left: only the lowest live chain goes on; the others end.
    claim(&store, 2_000, 20, "c1");
    assert_eq!(pass(&store, 3_000, 3, "n3", "m3"), SlotPassed::Freed);
    assert_eq!(pass(&store, 3_000, 2, "n2", "m2"), SlotPassed::Freed);
    assert_eq!(pass(&store, 3_000, 1, "n1", "m1"), SlotPassed::Continue);
    // A higher slot is the lowest live one once the lower chains ended.
    let slot = acquire(&store, 3_000, "h5", 50).unwrap();
    assert_eq!(slot, 2);
    assert_eq!(pass(&store, 3_000, 1, "m1", "o1"), SlotPassed::Continue);
    assert_eq!(
        pass(&store, 3_000, 2, "h5", "o2"),
        SlotPassed::Freed,
        "slot 1 takes the 5"
    );
}

#[test]
fn an_item_s_throws_running_are_kept_by_its_releases_and_cleared_by_a_run() {
    let store = setup();
    batch_of(&store, "t", 2, 3);
    let first = claim(&store, 1_000, 2, "c1");
    assert!(first.iter().all(|i| i.given_back == 0));
    // Item 1's dispatch threw; item 2 was queued behind it.
    let back = [
        release_refused(&first[0], true),
        release_refused(&first[1], false),
    ];
    block_on(store.commit_outcomes(back.iter())).unwrap();
    let again = claim(&store, 2_000, 2, "c2");
    let thrown: Vec<(i64, i64, i64)> = again
        .iter()
        .map(|i| (i.item_id, i.given_back, i.attempt))
        .collect();
    assert_eq!(
        thrown,
        vec![(first[0].item_id, 1, 1), (first[1].item_id, 0, 1)],
        "counted, and no attempt spent"
    );
    let twice = release_refused(&again[0], true);
    block_on(store.commit_outcomes([&twice])).unwrap();
    let third = claim(&store, 3_000, 1, "c3");
    assert_eq!(
        (third[0].item_id, third[0].given_back),
        (first[0].item_id, 2)
    );
    // Any run clears it (here a retry, which spends its attempt).
    let ran = settle(&third[0], Outcome::Retry("HTTP 500".into()), 3_500);
    block_on(store.commit_outcomes([&ran])).unwrap();
    let id = third[0].item_id;
    assert_eq!(
        count(
            &store,
            &format!("SELECT given_back FROM cron_queue WHERE id = {id}")
        ),
        0
    );
}

/// With a limit or a pause kept, claims see a batch's first 128 candidates
/// (core::limits::HELD_WINDOW): the count sees the same, so 200 items paused at
/// a batch's head start no drainer for the free items behind them, which no
/// claim can reach until the head moves.
#[test]
fn the_count_sees_a_batch_as_claims_do_behind_items_held_at_its_head() {
    let store = setup();
    let batch = batch_of(&store, "b", 250, 3);
    store
        .db()
        .conn()
        .execute(
            "UPDATE cron_queue SET limits = '[\"host:paused.example\"]'
             WHERE batch_id = ?1 AND subject_id < 'b-00200'",
            [&batch],
        )
        .unwrap();
    store
        .db()
        .conn()
        .execute(
            "INSERT INTO limit_state (key, tat, basis, paused_until)
             VALUES ('host:paused.example', 0, '', 600000)",
            [],
        )
        .unwrap();
    assert_eq!(work(&store, 1_000, 1_550).due, 0, "no claim would take any");
    assert!(
        claim(&store, 1_000, 50, "c1").is_empty(),
        "as a claim finds: the first 128 are all paused"
    );
    // Once the pause ends, the first 128 count (its ended pause is kept a while:
    // claims still see a window per batch).
    assert_eq!(work(&store, 600_001, 1_550).due, 128);
}
