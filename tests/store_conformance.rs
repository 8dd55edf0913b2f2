//! SQL conformance: the Worker's own `src/sql/*.sql`, through the same `Store`
//! code, on real SQLite with the D1 migrations applied. Time is an argument, so
//! tests move it by hand instead of sleeping.

mod common;

use std::collections::HashSet;

use cron_fanout::core::budget::Budget;
use cron_fanout::core::control::BatchStatus;
use cron_fanout::core::model::{BatchTally, InvocationSummary, StopReason, Tally, Trigger};
use cron_fanout::core::model::{ClaimedItem, ItemStatus, Outcome, Transition};
use cron_fanout::core::requests::{ItemInput, SubjectInput};
use cron_fanout::core::retry::{decide, release};
use cron_fanout::core::schedule::fill::FILL_PAGES_PER_CALL;
use cron_fanout::core::upkeep::{Retention, Upkeep, DAY_MS};
use cron_fanout::store::metered::Metered;
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{BatchSource, Created, Db, Store, StoreError};
use futures::executor::block_on;
use serde_json::json;

use common::*;

fn add_subjects(store: &Store<SqliteDb>, n: usize) {
    add_subjects_to(store, n)
}

fn add_subjects_to<D: Db>(store: &Store<D>, n: usize) {
    let subjects: Vec<SubjectInput> = (0..n).map(|i| subject(&format!("s{i:06}"), true)).collect();
    for chunk in subjects.chunks(1_000) {
        block_on(store.upsert_subjects(chunk, 1)).unwrap();
    }
}

fn commit(store: &Store<SqliteDb>, item: &ClaimedItem, outcome: Outcome, now: i64) -> bool {
    let t = settle(item, outcome, now);
    !block_on(store.commit_outcomes(&[t])).unwrap().is_empty()
}

fn status_of(store: &Store<SqliteDb>, id: i64) -> (String, i64, Option<String>) {
    store
        .db_conn()
        .query_row(
            "SELECT status, attempt, last_error FROM cron_queue WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
}

/// Access to the underlying connection for assertions.
trait Inspect {
    fn db_conn(&self) -> std::cell::Ref<'_, rusqlite::Connection>;
}

impl Inspect for Store<SqliteDb> {
    fn db_conn(&self) -> std::cell::Ref<'_, rusqlite::Connection> {
        self.db().conn()
    }
}

#[test]
fn daily_init_from_subjects_is_idempotent_and_skips_inactive() {
    let store = setup();
    add_subjects(&store, 5);
    block_on(store.upsert_subjects(&[subject("off", false)], 2)).unwrap();

    let first =
        block_on(store.create_batch("b1", "daily:2026-11-21", 10, 5, BatchSource::ActiveSubjects))
            .unwrap();
    let Created::New(row) = first else {
        panic!("expected a new batch")
    };
    assert_eq!((row.total, row.status.as_str()), (5, "running"));

    // Re-fire with a new id and a subject added since: nothing new is created.
    block_on(store.upsert_subjects(&[subject("late", true)], 3)).unwrap();
    let again =
        block_on(store.create_batch("b2", "daily:2026-11-21", 20, 5, BatchSource::ActiveSubjects))
            .unwrap();
    let Created::Existing(row) = again else {
        panic!("expected the existing batch")
    };
    assert_eq!((row.id.as_str(), row.total), ("b1", 5));
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 5);
    assert_eq!(count(&store, "SELECT count(*) FROM batches"), 1);
}

#[test]
fn init_takes_the_same_statements_for_any_number_of_subjects() {
    let statements_for = |n: usize| {
        let db = setup().into_db();
        let budget = Budget::new(1_000);
        let store = Store::new(Metered::new(db, budget.clone()));
        add_subjects_to(&store, n);
        let (calls, before) = (budget.used(), store.usage());
        block_on(store.create_batch("b", "daily:x", 0, 5, BatchSource::ActiveSubjects)).unwrap();
        let after = store.usage();
        assert_eq!(
            block_on(store.get_batch("b")).unwrap().unwrap().total,
            n as i64
        );
        (
            budget.used() - 1 - calls,
            after.statements - before.statements,
        )
    };
    let small = statements_for(10);
    assert_eq!(small, statements_for(5_000));
    // Two calls (subrequests, as the meter charges them): one batch() creating
    // the batch and running its first FILL_PAGES_PER_CALL pages (a page with its
    // mark, the insert for a fill of every group and its cursor: three statements
    // each), then one read of the batch row.
    assert_eq!(small, (2, 1 + 3 * FILL_PAGES_PER_CALL + 1));
}

#[test]
fn explicit_items_are_chunked_and_all_or_nothing() {
    let store = setup();
    let items = items_of(
        1_201,
        |i| format!("u{i}"),
        "webhook",
        &json!({"url": "https://e.com"}),
    );
    let before = store.usage().statements;
    block_on(store.create_batch("b", "adhoc", 0, 3, BatchSource::Items(&items))).unwrap();
    // create + 3 chunks of ≤ 500 + total, then the read-back.
    assert_eq!(store.usage().statements - before, 1 + 3 + 1 + 1);
    assert_eq!(
        block_on(store.get_batch("b")).unwrap().unwrap().total,
        1_201
    );

    // A failure in the last chunk (an item whose kind allows 0 attempts breaks a
    // CHECK) fails the whole transaction: no batch row, no items from the earlier
    // chunks.
    let store = store.with_kind_attempts([("broken".to_string(), 0)].into());
    let mut bad = items.clone();
    bad.push(ItemInput {
        subject_id: "zzz".into(),
        kind: "broken".into(),
        payload: json!({}),
        limits: None,
        keys: Vec::new(),
    });
    assert!(block_on(store.create_batch("b2", "adhoc-2", 0, 3, BatchSource::Items(&bad))).is_err());
    assert_eq!(
        count(&store, "SELECT count(*) FROM batches WHERE key = 'adhoc-2'"),
        0
    );
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE batch_id = 'b2'"
        ),
        0
    );
}

/// A subject twice in one explicit list is refused before anything is sent: no
/// unique index would refuse the second copy (migration 0017).
#[test]
fn a_subject_twice_in_one_batch_is_refused_and_writes_nothing() {
    let store = setup();
    let mut items = items_of(3, |i| format!("u{i}"), "noop", &json!({}));
    items.push(items[1].clone());
    let before = store.usage().statements;
    let err =
        block_on(store.create_batch("b", "dup", 0, 3, BatchSource::Items(&items))).unwrap_err();
    assert!(
        matches!(&err, StoreError::Invalid(m) if m.contains("\"u1\" appears twice")),
        "{err}"
    );
    assert_eq!(store.usage().statements, before);
    assert_eq!(count(&store, "SELECT count(*) FROM batches"), 0);
}

#[test]
fn claims_are_exclusive_under_interleaving() {
    let store = setup();
    batch_of(&store, "x", 300, 5);
    let mut seen = HashSet::new();
    let mut round = 0;
    loop {
        // Three claimers with different window sizes take turns.
        let got: Vec<ClaimedItem> = ["a", "b", "c"]
            .iter()
            .enumerate()
            .flat_map(|(i, p)| claim(&store, 1, 3 + i as i64 * 5, &format!("{p}{round}")))
            .collect();
        if got.is_empty() {
            break;
        }
        for item in got {
            assert!(
                seen.insert((item.item_id, item.attempt)),
                "item {} handed out twice",
                item.item_id
            );
            assert_eq!(item.attempt, 1, "attempt is counted at claim");
            assert_eq!(
                item.lease_token,
                format!(
                    "{}.{}",
                    item.lease_token.split('.').next().unwrap(),
                    item.item_id
                )
            );
        }
        round += 1;
    }
    assert_eq!(seen.len(), 300);
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE status = 'processing'"
        ),
        300
    );
}

/// Items due at once (explicit items, a fill with no zone times or jitter) are in
/// no index: the claim reads them from their batch's cursor. Claims interleaved
/// with commits in any order hand each out once, a retry or a release comes back
/// through the due index, and the cursor only moves up to what commits settled.
#[test]
fn first_attempts_are_claimed_by_the_cursor_and_come_back_through_the_index() {
    let store = setup();
    let id = batch_of(&store, "x", 40, 5);
    let cursor = || {
        texts(
            &store,
            "SELECT json_array(claim_after, cursor_end) FROM batches WHERE id = 'b-x'",
        )
    };
    assert_eq!(
        due_index_entries(&store),
        0,
        "inserted due at once: no index entry"
    );
    assert_eq!(cursor(), ["[0,40]"]);
    // Two claims before any commit: the second skips what the first holds.
    let a = claim(&store, 10, 10, "a");
    let b = claim(&store, 10, 10, "b");
    let ids = |items: &[ClaimedItem]| items.iter().map(|i| i.item_id).collect::<Vec<_>>();
    assert_eq!(ids(&a), (1..=10).collect::<Vec<_>>());
    assert_eq!(ids(&b), (11..=20).collect::<Vec<_>>());
    // The later claim commits first: one retry, one release, the rest done.
    let mut outcomes = settle_all(&b[2..], Outcome::Done, 20);
    outcomes.push(settle(&b[0], Outcome::Retry("HTTP 503".into()), 20));
    outcomes.push(release(&b[1]));
    assert_eq!(
        block_on(store.commit_outcomes(&outcomes)).unwrap().len(),
        10
    );
    assert_eq!(cursor(), ["[20,40]"], "moved up to the largest id settled");
    assert_eq!(
        due_index_entries(&store),
        2,
        "the retry and the release are indexed"
    );
    // 1-10 are still in flight below the cursor; the next claim starts above it.
    // Cursor items count as due since their batch's creation (0), so they come
    // before the release (due at its claim, 10).
    let c = claim(&store, 30, 5, "c");
    assert_eq!(ids(&c), [21, 22, 23, 24, 25]);
    let done = settle_all(a.iter().chain(&c), Outcome::Done, 40);
    assert_eq!(block_on(store.commit_outcomes(&done)).unwrap().len(), 15);
    // Everything else, the retry once it is due: each item handed out once more
    // at most, and every one completed.
    let rest = claim(&store, 10_000_000, 100, "d");
    let mut rest_ids = ids(&rest);
    rest_ids.sort_unstable();
    let mut want: Vec<i64> = (26..=40).collect();
    want.extend([11, 12]);
    want.sort_unstable();
    assert_eq!(rest_ids, want);
    let done = settle_all(&rest, Outcome::Done, 10_000_001);
    assert_eq!(block_on(store.commit_outcomes(&done)).unwrap().len(), 17);
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE status = 'completed'"
        ),
        40
    );
    assert_eq!(cursor(), ["[40,40]"]);
    common_counters_exact(&store, &[&id]);
    // Every commit gave its item a real run_after (a release its claim's instant).
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE run_after = 0"
        ),
        0
    );
}

/// A first attempt in flight is in no index (migration 0015): the batch's lease
/// window finds it, for the `processing` count and for the reaper, and the window
/// moves up with the commits, never past an item still in flight.
#[test]
fn first_attempts_in_flight_are_found_in_their_batch_lease_window() {
    let store = setup();
    let id = batch_of(&store, "x", 10, 3);
    let leased_entries = || {
        count(
            &store,
            "SELECT count(*) FROM cron_queue INDEXED BY cron_queue_leased
             WHERE status = 'processing' AND run_after > 0",
        )
    };
    let lease_after = || count(&store, "SELECT lease_after FROM batches");
    let processing = || block_on(store.get_batch(&id)).unwrap().unwrap().processing;
    // Two claims, the second's leases a minute later: 7 in flight, none indexed.
    let a = claim(&store, 0, 4, "a");
    let b = claim(&store, LEASE_MS, 3, "b");
    assert_eq!((leased_entries(), processing(), lease_after()), (0, 7, 0));
    // Out of order: 2 settles first, then 1. The window moves with the commits,
    // one flush behind (a flush's own items are in flight when it moves it).
    assert!(commit(&store, &a[1], Outcome::Done, 10));
    assert_eq!((processing(), lease_after()), (6, 0));
    assert!(commit(&store, &a[0], Outcome::Done, 11));
    assert_eq!((processing(), lease_after()), (5, 0));
    // a's leases expire, b's do not: the reaper requeues 3 and 4 from the window,
    // with a real run_after (the due index), and leaves 5-7.
    let reaped = block_on(store.reap_expired_leases(LEASE_MS, 100)).unwrap();
    let reaped: Vec<(i64, &str)> = reaped.iter().map(|r| (r.id, r.status.as_str())).collect();
    assert_eq!(reaped, [(3, "pending"), (4, "pending")]);
    assert_eq!((processing(), due_index_entries(&store)), (3, 2));
    // The next claim takes them from the index (into the leased index) and the
    // cursor's last three (still first attempts: in no index).
    let again = claim(&store, LEASE_MS, 100, "c");
    let mut ids: Vec<i64> = again.iter().map(|i| i.item_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [3, 4, 8, 9, 10]);
    assert_eq!((leased_entries(), processing()), (2, 8));
    // They commit: the window moves past 1-4 (3 and 4 now retries, with a real
    // run_after), up to 5, b's first, in flight.
    let done = settle_all(&again, Outcome::Done, LEASE_MS + 1);
    assert_eq!(block_on(store.commit_outcomes(&done)).unwrap().len(), 5);
    assert_eq!((leased_entries(), processing(), lease_after()), (0, 3, 4));
    // b's commit leaves it there (5 in its own flush); the batch's end closes it.
    let done = settle_all(&b, Outcome::Done, LEASE_MS + 2);
    assert_eq!(block_on(store.commit_outcomes(&done)).unwrap().len(), 3);
    assert_eq!((processing(), lease_after()), (0, 4));
    assert_eq!(
        block_on(store.finish_batches(LEASE_MS + 5)).unwrap().len(),
        1
    );
    assert_eq!(lease_after(), 10);
    common_counters_exact(&store, &[&id]);
    // A later batch's cursor and window start after the rows already there, so
    // neither its claims nor its counts read them.
    batch_of(&store, "y", 5, 3);
    assert_eq!(
        texts(
            &store,
            "SELECT json_array(claim_after, lease_after, cursor_end) FROM batches WHERE id = 'b-y'"
        ),
        ["[10,10,15]"]
    );
}

/// A paused batch's lease window is not read by the reaper (a tick pays nothing per
/// paused batch kept): its first attempts whose leases expired stay in flight
/// until it is resumed, and are reaped then.
#[test]
fn a_paused_batch_first_attempts_are_reaped_once_it_is_resumed() {
    let store = setup();
    let id = batch_of(&store, "x", 3, 3);
    let a = claim(&store, 0, 2, "a");
    assert_eq!(a.len(), 2);
    assert!(
        block_on(store.set_batch_status(&id, BatchStatus::Running, BatchStatus::Paused)).unwrap()
    );
    assert!(block_on(store.reap_expired_leases(LEASE_MS, 100))
        .unwrap()
        .is_empty());
    assert_eq!(
        block_on(store.get_batch(&id)).unwrap().unwrap().processing,
        2
    );
    assert!(
        block_on(store.set_batch_status(&id, BatchStatus::Paused, BatchStatus::Running)).unwrap()
    );
    let reaped = block_on(store.reap_expired_leases(LEASE_MS, 100)).unwrap();
    let reaped: Vec<(i64, &str)> = reaped.iter().map(|r| (r.id, r.status.as_str())).collect();
    assert_eq!(reaped, [(1, "pending"), (2, "pending")]);
    assert_eq!(
        block_on(store.get_batch(&id)).unwrap().unwrap().processing,
        0
    );
}

#[test]
fn claim_skips_items_not_yet_due_and_orders_by_run_after() {
    let store = setup();
    batch_of(&store, "x", 3, 5);
    store
        .db_conn()
        .execute(
            "UPDATE cron_queue SET run_after = 500 WHERE subject_id = 'x-00000'",
            [],
        )
        .unwrap();
    store
        .db_conn()
        .execute(
            "UPDATE cron_queue SET run_after = 100 WHERE subject_id = 'x-00001'",
            [],
        )
        .unwrap();
    let subjects = |items: Vec<ClaimedItem>| -> Vec<String> {
        items.into_iter().map(|i| i.subject_id).collect()
    };
    // Earliest run_after first (RETURNING itself comes back in rowid order).
    assert_eq!(subjects(claim(&store, 200, 1, "t")), vec!["x-00002"]);
    assert_eq!(subjects(claim(&store, 200, 10, "u")), vec!["x-00001"]);
    assert!(claim(&store, 499, 10, "v").is_empty());
    assert_eq!(subjects(claim(&store, 500, 10, "w")), vec!["x-00000"]);
}

#[test]
fn completion_is_fenced_by_the_lease_token() {
    let store = setup();
    batch_of(&store, "x", 1, 5);
    let item = claim(&store, 1, 1, "t").pop().unwrap();

    let mut forged = item.clone();
    forged.lease_token = "someone-else".into();
    assert!(
        !commit(&store, &forged, Outcome::Done, 2),
        "a stale token changes nothing"
    );
    assert_eq!(status_of(&store, item.item_id).0, "processing");

    assert!(commit(&store, &item, Outcome::Done, 3));
    assert_eq!(status_of(&store, item.item_id).0, "completed");
    // Replaying the same outcome finds no processing row: terminal states are final.
    assert!(!commit(&store, &item, Outcome::Retry("late".into()), 4));
    assert_eq!(status_of(&store, item.item_id).0, "completed");
}

#[test]
fn a_reaped_lease_is_lost_for_good() {
    let store = setup();
    batch_of(&store, "x", 1, 5);
    let first = claim(&store, 0, 1, "a").pop().unwrap();

    // Not expired yet: the reaper leaves a live lease alone.
    assert!(block_on(store.reap_expired_leases(LEASE_MS - 1, 100))
        .unwrap()
        .is_empty());
    assert_eq!(status_of(&store, first.item_id).0, "processing");

    let reaped = block_on(store.reap_expired_leases(LEASE_MS, 100)).unwrap();
    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].status, "pending");
    let (_, attempt, error) = status_of(&store, first.item_id);
    assert_eq!(
        (attempt, error.as_deref()),
        (1, Some("lease expired during attempt 1"))
    );

    let second = claim(&store, LEASE_MS, 1, "b").pop().unwrap();
    assert_eq!(second.attempt, 2);
    // The first runner comes back late: its outcome is a lost lease.
    assert!(!commit(&store, &first, Outcome::Done, LEASE_MS + 1));
    assert_eq!(status_of(&store, first.item_id).0, "processing");
    assert!(commit(&store, &second, Outcome::Done, LEASE_MS + 2));
}

#[test]
fn reaper_fails_items_out_of_attempts_and_never_exceeds_max() {
    let store = setup();
    let batch = batch_of(&store, "x", 1, 2);
    for attempt in 1..=2 {
        let item = claim(&store, attempt * LEASE_MS, 1, "t").pop().unwrap();
        assert_eq!(item.attempt, attempt);
        block_on(store.reap_expired_leases((attempt + 1) * LEASE_MS, 100)).unwrap();
    }
    let (status, attempt, error) = status_of(&store, 1);
    assert_eq!((status.as_str(), attempt), ("failed", 2));
    assert_eq!(error.as_deref(), Some("lease expired after 2 attempts"));
    assert!(claim(&store, 10 * LEASE_MS, 10, "z").is_empty());
    let row = block_on(store.get_batch(&batch)).unwrap().unwrap();
    assert_eq!((row.failed, row.completed, row.processing), (1, 0, 0));
}

#[test]
fn exhausted_pending_rows_are_never_claimed() {
    let store = setup();
    batch_of(&store, "x", 1, 3);
    // Only reachable by hand; the claim still refuses to go past max_attempts.
    store
        .db_conn()
        .execute("UPDATE cron_queue SET attempt = 3", [])
        .unwrap();
    assert!(claim(&store, 1, 10, "t").is_empty());
}

#[test]
fn outcomes_follow_the_retry_policy_through_the_store() {
    let store = setup();
    let batch = batch_of(&store, "x", 3, 2);
    let items = claim(&store, 0, 3, "t");
    let transitions: Vec<Transition> = items
        .iter()
        .zip([
            Outcome::Done,
            Outcome::Retry("HTTP 503".into()),
            Outcome::Fail("HTTP 400".into()),
        ])
        .map(|(item, o)| decide(item, &o, POLICY, 10, 0.0))
        .collect();
    let applied = block_on(store.commit_outcomes(&transitions)).unwrap();
    assert_eq!(applied.len(), 3);
    let statuses: Vec<String> = items
        .iter()
        .map(|i| status_of(&store, i.item_id).0)
        .collect();
    assert_eq!(statuses, vec!["completed", "pending", "failed"]);
    assert_eq!(
        status_of(&store, items[2].item_id).2.as_deref(),
        Some("permanent failure: HTTP 400")
    );

    // The retry is not due before its backoff (base 1 s, jitter 0 → 500 ms).
    assert!(claim(&store, 10 + 499, 10, "u").is_empty());
    let retry = claim(&store, 10 + 500, 10, "u").pop().unwrap();
    assert_eq!(retry.attempt, 2);
    assert!(commit(
        &store,
        &retry,
        Outcome::Retry("HTTP 503".into()),
        600
    ));
    let (status, attempt, error) = status_of(&store, retry.item_id);
    assert_eq!((status.as_str(), attempt), ("failed", 2));
    assert_eq!(
        error.as_deref(),
        Some("gave up after 2 attempts; last error: HTTP 503")
    );

    let row = block_on(store.get_batch(&batch)).unwrap().unwrap();
    assert_eq!((row.completed, row.failed, row.total), (1, 2, 3));
}

#[test]
fn group_commit_applies_held_leases_and_reports_lost_ones() {
    let store = setup();
    batch_of(&store, "x", 50, 5);
    let items = claim(&store, 0, 50, "t");
    // Ten of them are reaped and re-claimed by someone else before the flush.
    store
        .db_conn()
        .execute(
            "UPDATE cron_queue SET lease_expires_at = 0 WHERE id <= 10",
            [],
        )
        .unwrap();
    block_on(store.reap_expired_leases(1, 100)).unwrap();
    assert_eq!(claim(&store, 1, 50, "other").len(), 10);

    let transitions = settle_all(&items, Outcome::Done, 5);
    let before = store.usage();
    let applied: HashSet<i64> = block_on(store.commit_outcomes(&transitions))
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(
        store.usage().statements - before.statements,
        2,
        "one call per flush: the batches' counters, then the rows"
    );
    assert_eq!(applied.len(), 40);
    assert!((1..=10).all(|id| !applied.contains(&id)));
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE status = 'processing'"
        ),
        10
    );
}

fn lease_of(store: &Store<SqliteDb>, id: i64) -> (Option<String>, Option<i64>) {
    store
        .db_conn()
        .query_row(
            "SELECT lease_token, lease_expires_at FROM cron_queue WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

#[test]
fn the_group_commit_keeps_at_most_1000_characters_of_an_error_it_is_handed() {
    // The backstop for a writer that did not cut (`retry::decide` does): an
    // error passed straight to the statement.
    let store = setup();
    batch_of(&store, "long", 2, 5);
    let items = claim(&store, 0, 2, "t");
    let transitions: Vec<Transition> = items
        .iter()
        .zip(["x".repeat(5_000), "é".repeat(5_000)])
        .map(|(item, error)| Transition {
            error: Some(error),
            ..settle(item, Outcome::Fail("page".into()), 1)
        })
        .collect();
    assert_eq!(
        block_on(store.commit_outcomes(&transitions)).unwrap().len(),
        2
    );
    let stored = texts(&store, "SELECT last_error FROM cron_queue ORDER BY id");
    // Characters, not bytes: what SQLite's substr counts on text.
    let kept: Vec<(usize, bool)> = stored
        .iter()
        .map(|e| (e.chars().count(), e.chars().all(|c| c == 'x' || c == 'é')))
        .collect();
    assert_eq!(kept, vec![(1_000, true), (1_000, true)]);
}

#[test]
fn a_committed_row_keeps_its_token_until_a_claim_or_the_reaper_replaces_it() {
    // "not processing and still my token" = "my commit applied it".
    let store = setup();
    batch_of(&store, "x", 2, 5);
    let items = claim(&store, 0, 2, "t");
    assert!(commit(&store, &items[0], Outcome::Done, 1));
    assert!(commit(&store, &items[1], Outcome::Retry("503".into()), 1));
    for item in &items {
        assert_eq!(
            lease_of(&store, item.item_id),
            (Some(item.lease_token.clone()), None)
        );
    }
    // Out of the index of leased items: the live `processing` count and the
    // reaper never see them.
    assert_eq!(
        block_on(store.get_batch("b-x"))
            .unwrap()
            .unwrap()
            .processing,
        0
    );
    assert!(block_on(store.reap_expired_leases(i64::MAX / 2, 100))
        .unwrap()
        .is_empty());
    // A new claim replaces the retried row's token; the reaper clears it.
    let again = claim(&store, 100_000, 2, "u");
    assert_eq!(again.len(), 1);
    assert_eq!(
        lease_of(&store, again[0].item_id).0.as_deref(),
        Some(again[0].lease_token.as_str())
    );
    block_on(store.reap_expired_leases(100_000 + LEASE_MS, 100)).unwrap();
    assert_eq!(lease_of(&store, again[0].item_id), (None, None));
}

#[test]
fn a_retried_commit_reads_back_what_its_failed_attempt_applied() {
    let store = setup();
    batch_of(&store, "x", 4, 5);
    let items = claim(&store, 0, 4, "t");
    let transitions = settle_all(&items, Outcome::Done, 5);
    // The first attempt applied items 1 and 2, and its answer was lost.
    block_on(store.commit_outcomes(&transitions[..2])).unwrap();
    // Meanwhile item 3's lease expired and another tick's reaper took it.
    store
        .db_conn()
        .execute(
            "UPDATE cron_queue SET lease_expires_at = 1 WHERE id = 3",
            [],
        )
        .unwrap();
    assert_eq!(
        block_on(store.reap_expired_leases(2, 100)).unwrap().len(),
        1
    );
    // The retry: one call of three statements, writing only item 4 (and its
    // batch's counter).
    let before = store.usage();
    let mut applied = block_on(store.recommit_outcomes(&transitions)).unwrap();
    applied.sort_unstable();
    assert_eq!(
        applied,
        vec![1, 2, 4],
        "item 3's lease is lost, the others applied"
    );
    let after = store.usage();
    assert_eq!(after.statements - before.statements, 3);
    let written_once = {
        let fresh = setup();
        batch_of(&fresh, "y", 1, 5);
        let one = claim(&fresh, 0, 1, "t");
        let before = fresh.usage().rows_written;
        let t = decide(&one[0], &Outcome::Done, POLICY, 5, 0.0);
        block_on(fresh.commit_outcomes(&[t])).unwrap();
        fresh.usage().rows_written - before
    };
    assert_eq!(after.rows_written - before.rows_written, written_once);
    assert_eq!(status_of(&store, 3).0, "pending");
    assert_eq!(status_of(&store, 4).0, "completed");
    // Through the metered store it is one subrequest.
    let budget = Budget::new(10);
    let metered = Store::new(Metered::new(store.into_db(), budget.clone()));
    assert_eq!(
        block_on(metered.recommit_outcomes(&transitions))
            .unwrap()
            .len(),
        3
    );
    assert_eq!(budget.used(), 1);
}

#[test]
fn the_read_back_finds_rows_by_primary_key() {
    // It runs after every retried commit: it must read the rows it names, not
    // scan the queue.
    let store = setup();
    let conn = store.db_conn();
    let mut stmt = conn
        .prepare(&format!(
            "EXPLAIN QUERY PLAN {}",
            cron_fanout::sql::COMMITTED_OUTCOMES
        ))
        .unwrap();
    let plan: Vec<String> = stmt
        .query_map(["[]"], |r| r.get::<_, String>(3))
        .unwrap()
        .map(|d| d.unwrap())
        .collect();
    assert!(
        plan.iter()
            .any(|d| d.contains("SEARCH q USING INTEGER PRIMARY KEY")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|d| d.starts_with("SCAN q")), "{plan:?}");
}

#[test]
fn a_released_item_gets_its_attempt_back_and_can_be_claimed_again() {
    // Its last attempt: without the attempt back it could never be claimed again.
    let store = setup();
    let batch = batch_of(&store, "x", 1, 1);
    let item = claim(&store, 0, 1, "t").pop().unwrap();
    assert_eq!(item.attempt, 1);
    assert_eq!(
        block_on(store.commit_outcomes(&[release(&item)])).unwrap(),
        vec![item.item_id]
    );
    let (status, attempt, error) = status_of(&store, item.item_id);
    assert_eq!((status.as_str(), attempt), ("pending", 0));
    assert!(error.unwrap().starts_with("attempt 1 released unrun"));
    let again = claim(&store, 1, 1, "u").pop().unwrap();
    assert_eq!((again.item_id, again.attempt), (item.item_id, 1));
    assert!(commit(&store, &again, Outcome::Done, 2));
    let row = block_on(store.get_batch(&batch)).unwrap().unwrap();
    assert_eq!((row.completed, row.failed), (1, 0));
}

#[test]
fn a_batch_is_marked_finished_exactly_once() {
    let store = setup();
    let batch = batch_of(&store, "x", 2, 5);
    let items = claim(&store, 0, 2, "t");
    assert!(commit(&store, &items[0], Outcome::Done, 1));
    assert!(
        block_on(store.finish_batches(2)).unwrap().is_empty(),
        "one item still processing"
    );
    assert!(commit(
        &store,
        &items[1],
        Outcome::Fail("HTTP 404".into()),
        3
    ));

    let finished = block_on(store.finish_batches(4)).unwrap();
    assert_eq!(finished.len(), 1);
    assert_eq!(
        (
            finished[0].id.as_str(),
            finished[0].completed,
            finished[0].failed
        ),
        (batch.as_str(), 1, 1)
    );
    assert!(
        block_on(store.finish_batches(5)).unwrap().is_empty(),
        "observed once"
    );
    let row = block_on(store.get_batch(&batch)).unwrap().unwrap();
    assert_eq!(
        (row.status.as_str(), row.finished_at),
        ("finished", Some(4))
    );
}

#[test]
fn counters_match_the_rows_after_a_mixed_run() {
    let store = setup();
    let batch = batch_of(&store, "x", 40, 2);
    let mut now = 0;
    for round in 0..6 {
        now += 100_000;
        block_on(store.reap_expired_leases(now, 100)).unwrap();
        let items = claim(&store, now, 40, &format!("r{round}"));
        let transitions: Vec<Transition> = items
            .iter()
            .filter(|i| i.item_id % 7 != 0) // these are "crashed": left to the reaper
            .map(|i| {
                let o = match i.item_id % 3 {
                    0 => Outcome::Done,
                    1 => Outcome::Retry("flaky".into()),
                    _ => Outcome::Fail("bad".into()),
                };
                decide(i, &o, POLICY, now, 0.5)
            })
            .collect();
        block_on(store.commit_outcomes(&transitions)).unwrap();
    }
    let row = block_on(store.get_batch(&batch)).unwrap().unwrap();
    assert_eq!(
        row.completed,
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE status = 'completed'"
        )
    );
    assert_eq!(
        row.failed,
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE status = 'failed'"
        )
    );
    assert_eq!(
        row.processing,
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE status = 'processing'"
        )
    );
    assert_eq!(row.completed + row.failed, 40, "every item ended");
    assert_eq!(count(&store, "SELECT max(attempt) FROM cron_queue"), 2);
}

#[test]
fn progress_counts_processing_per_batch() {
    let store = setup();
    let a = batch_of(&store, "a", 5, 5);
    let b = batch_of(&store, "b", 5, 5);
    let claimed = claim(&store, 0, 7, "t");
    let in_a = claimed.iter().filter(|i| i.batch_id == a).count() as i64;
    assert_eq!(
        block_on(store.get_batch(&a)).unwrap().unwrap().processing,
        in_a
    );
    assert_eq!(
        block_on(store.get_batch(&b)).unwrap().unwrap().processing,
        7 - in_a
    );
    assert!(block_on(store.get_batch("nope")).unwrap().is_none());
}

#[test]
fn items_are_listed_in_pages_with_a_status_filter() {
    let store = setup();
    let batch = batch_of(&store, "x", 5, 5);
    let items = claim(&store, 0, 2, "t");
    assert!(commit(
        &store,
        &items[0],
        Outcome::Fail("HTTP 400".into()),
        1
    ));
    let failed = block_on(store.list_batch_items(&batch, "", Some(ItemStatus::Failed), 10))
        .unwrap()
        .items;
    assert_eq!(failed.len(), 1);
    assert_eq!(
        failed[0].last_error.as_deref(),
        Some("permanent failure: HTTP 400")
    );
    let page1 = block_on(store.list_batch_items(&batch, "", None, 2))
        .unwrap()
        .items;
    let page2 = block_on(store.list_batch_items(&batch, &page1[1].subject_id, None, 10))
        .unwrap()
        .items;
    assert_eq!((page1.len(), page2.len()), (2, 3));
    assert!(page1[1].subject_id < page2[0].subject_id);
}

#[test]
fn subjects_upsert_list_and_delete() {
    let store = setup();
    block_on(store.upsert_subjects(&[subject("a", true), subject("b", true)], 1)).unwrap();
    let mut changed = subject("a", false);
    changed.payload = json!({"url": "https://changed.example"});
    block_on(store.upsert_subjects(&[changed], 2)).unwrap();
    let rows = block_on(store.list_subjects("", 10)).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0].active, rows[0].created_at, rows[0].updated_at),
        (0, 1, 2)
    );
    assert_eq!(rows[0].payload, r#"{"url":"https://changed.example"}"#);
    assert_eq!(block_on(store.list_subjects("a", 10)).unwrap().len(), 1);
    assert!(block_on(store.delete_subject("a")).unwrap());
    assert!(!block_on(store.delete_subject("a")).unwrap());
}

#[test]
fn invocation_summaries_round_trip() {
    let store = setup();
    let summary = |started_at: i64, stop_reason| InvocationSummary {
        invocation: Some(format!("inv-{started_at}")),
        trigger: Trigger::Tick,
        started_at,
        elapsed_ms: 12,
        tally: Tally {
            batch_ids: ["b1".to_string(), "b2".to_string()].into(),
            claimed: 3,
            completed: 2,
            retried: 1,
            failed: 0,
            lost_leases: 0,
            released: 5,
            reaped: 4,
            per_batch: [
                (
                    "b1".to_string(),
                    BatchTally {
                        completed: 2,
                        failed: 0,
                        cost: None,
                    },
                ),
                (
                    "b2".to_string(),
                    BatchTally {
                        completed: 0,
                        failed: 3,
                        cost: None,
                    },
                ),
            ]
            .into(),
            queue_operations: 3,
        },
        subrequests: 9,
        subrequest_budget: 45,
        d1_statements: 5,
        d1_rows_written: 20,
        d1_rows_read: Some(0),
        stop_reason,
        drainer: None,
        chain: None,
    };
    // The table keeps milliseconds, the JSON RFC 3339 text: every millisecond
    // survives the trip, including the ones binary floating point cannot hold.
    let times = [
        0,
        1,
        999,
        1_000,
        1_795_262_400_123,
        1_795_305_599_999,
        4_102_444_799_999,
    ];
    let stops = [
        StopReason::Drained,
        StopReason::Budget,
        StopReason::Deadline,
        StopReason::Error,
    ];
    let written: Vec<InvocationSummary> = times
        .iter()
        .zip(stops.iter().cycle())
        .map(|(&t, &stop)| summary(t, stop))
        .collect();
    for s in &written {
        block_on(store.record_invocation(s)).unwrap();
    }
    let rows = block_on(store.list_invocations(100)).unwrap();
    let ids: Vec<i64> = rows.iter().rev().map(|r| r.id).collect();
    assert_eq!(ids, (1..=times.len() as i64).collect::<Vec<_>>());
    let read: Vec<InvocationSummary> = rows.into_iter().rev().map(|r| r.summary).collect();
    assert_eq!(read, written);
    // Stored as Unix milliseconds, the column's type.
    assert_eq!(
        count(&store, "SELECT started_at FROM invocations WHERE id = 5"),
        1_795_262_400_123
    );
}

#[test]
fn the_invocations_json_is_the_documented_one() {
    let store = setup();
    let summary = InvocationSummary {
        invocation: Some("0f3a9c2e".into()),
        trigger: Trigger::Daily,
        started_at: 1_795_262_400_123,
        elapsed_ms: 7,
        tally: Tally::default(),
        subrequests: 3,
        subrequest_budget: 45,
        d1_statements: 3,
        d1_rows_written: 4,
        d1_rows_read: Some(0),
        stop_reason: StopReason::Drained,
        drainer: None,
        chain: None,
    };
    block_on(store.record_invocation(&summary)).unwrap();
    let rows = block_on(store.list_invocations(1)).unwrap();
    // docs/api.md, GET /invocations.
    assert_eq!(
        serde_json::to_value(&rows[0]).unwrap(),
        json!({
            "id": 1, "invocation": "0f3a9c2e", "trigger": "daily",
            "started_at": "2026-11-21T12:00:00.123Z",
            "elapsed_ms": 7, "batch_ids": [], "claimed": 0, "completed": 0, "retried": 0,
            "failed": 0, "lost_leases": 0, "released": 0, "reaped": 0, "subrequests": 3,
            "subrequest_budget": 45, "d1_statements": 3, "d1_rows_written": 4, "d1_rows_read": 0,
            "stop_reason": "drained", "per_batch": {}, "queue_operations": 0
        })
    );
}

#[test]
fn the_meter_refuses_a_call_over_the_budget_with_a_typed_error() {
    let budget = Budget::new(1);
    let store = Store::new(Metered::new(setup().into_db(), budget.clone()));
    assert_eq!(block_on(store.list_batches(10)).unwrap(), vec![]);
    let statements = store.usage().statements;
    match block_on(store.list_batches(10)) {
        Err(StoreError::OverBudget(e)) => assert_eq!((e.limit, e.used, e.wanted), (1, 1, 1)),
        other => panic!("expected OverBudget, got {other:?}"),
    }
    // Refused before it was sent: nothing ran, nothing was charged.
    assert_eq!(store.usage().statements, statements);
    assert_eq!(budget.used(), 1);
}

/// How SQLite plans the statement the store ran last, with the parameters it bound:
/// one `detail` line per step of EXPLAIN QUERY PLAN.
fn plan_of_last_query(store: &Store<SqliteDb>) -> Vec<String> {
    let (sql, params) = store.db().last_query().expect("the store ran a query");
    query_plan(store, &sql, &params)
}

/// `GET /batches/{id}/items?status=failed` on a big batch with few failures must
/// read the failed items, not the batch: the store's statement
/// walks a partial index that holds failed items only, in subject_id order (no
/// sort step), and so costs index writes only when an item fails.
#[test]
fn listing_failed_items_reads_only_the_failed_index() {
    let store = setup();
    let batch = batch_of(&store, "big", 2_000, 1);
    let items = claim(&store, 0, 3, "t");
    for item in &items {
        assert!(commit(&store, item, Outcome::Fail("HTTP 400".into()), 1));
    }
    let failed = block_on(store.list_batch_items(&batch, "", Some(ItemStatus::Failed), 10))
        .unwrap()
        .items;
    assert_eq!(failed.len(), 3);
    let plan = plan_of_last_query(&store);
    assert!(
        plan.iter()
            .any(|step| step.contains("USING INDEX cron_queue_failed")),
        "the failed listing does not use the failed-items index: {plan:?}"
    );
    assert!(
        !plan
            .iter()
            .any(|s| s.starts_with("SCAN") || s.contains("TEMP B-TREE")),
        "the failed listing scans or sorts: {plan:?}"
    );
    // Pages continue after the last subject_id, within the index.
    let rest = block_on(store.list_batch_items(
        &batch,
        &failed[1].subject_id,
        Some(ItemStatus::Failed),
        10,
    ))
    .unwrap()
    .items;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].subject_id, failed[2].subject_id);
    // The other filters still answer from the batch's own index.
    let completed = block_on(store.list_batch_items(&batch, "", Some(ItemStatus::Pending), 5))
        .unwrap()
        .items;
    assert_eq!(completed.len(), 5);
}

/// Rows the store wrote (SQLite's `total_changes`, trigger writes included) while
/// `f` ran: D1 bills each of them, plus every index entry inserted.
fn rows_written_by(store: &Store<SqliteDb>, f: impl FnOnce()) -> i64 {
    let before = store.usage().rows_written;
    f();
    store.usage().rows_written - before
}

#[test]
fn a_group_commit_writes_each_item_once_and_each_batch_once() {
    let store = setup();
    let a = batch_of(&store, "a", 30, 5);
    let b = batch_of(&store, "b", 30, 5);
    let items = claim(&store, 0, 60, "t");
    assert_eq!(items.len(), 60);
    let transitions: Vec<Transition> = items
        .iter()
        .map(|i| {
            let o = if i.item_id % 4 == 0 {
                Outcome::Fail("bad".into())
            } else {
                Outcome::Done
            };
            decide(i, &o, POLICY, 5, 0.0)
        })
        .collect();
    let written = rows_written_by(&store, || {
        assert_eq!(
            block_on(store.commit_outcomes(&transitions)).unwrap().len(),
            60
        );
    });
    // 60 items and the counters of 2 batches: not a counter write per item.
    assert_eq!(written, 60 + 2);
    common_counters_exact(&store, &[&a, &b]);
}

#[test]
fn the_reaper_counts_its_failures_once_per_batch() {
    let store = setup();
    let a = batch_of(&store, "a", 20, 1);
    let b = batch_of(&store, "b", 20, 1);
    assert_eq!(claim(&store, 0, 40, "t").len(), 40);
    let written = rows_written_by(&store, || {
        let reaped = block_on(store.reap_expired_leases(LEASE_MS, 100)).unwrap();
        assert!(reaped.iter().all(|r| r.status == "failed"));
        assert_eq!(reaped.len(), 40);
    });
    assert_eq!(written, 40 + 2);
    common_counters_exact(&store, &[&a, &b]);
}

#[test]
fn a_retried_commit_counts_nothing_its_failed_attempt_already_counted() {
    let store = setup();
    let a = batch_of(&store, "a", 6, 5);
    let items = claim(&store, 0, 6, "t");
    let transitions = settle_all(&items, Outcome::Done, 5);
    // The first attempt applied half of them and its answer was lost.
    block_on(store.commit_outcomes(&transitions[..3])).unwrap();
    common_counters_exact(&store, &[&a]);
    assert_eq!(
        block_on(store.recommit_outcomes(&transitions))
            .unwrap()
            .len(),
        6
    );
    common_counters_exact(&store, &[&a]);
    // And a third time, everything already applied: nothing more is counted.
    assert_eq!(
        block_on(store.recommit_outcomes(&transitions))
            .unwrap()
            .len(),
        6
    );
    common_counters_exact(&store, &[&a]);
    let row = block_on(store.get_batch(&a)).unwrap().unwrap();
    assert_eq!((row.completed, row.failed), (6, 0));
}

/// The batches' completed and failed counters equal the real counts of their items.
/// Read from the table, so it holds on a database of any migration.
fn common_counters_exact(store: &Store<SqliteDb>, batches: &[&str]) {
    for id in batches {
        let (completed, failed) = store
            .db()
            .conn()
            .query_row(
                "SELECT completed, failed FROM batches WHERE id = ?1",
                [id],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )
            .unwrap();
        let real = |status: &str| {
            store
                .db()
                .conn()
                .query_row(
                    "SELECT count(*) FROM cron_queue WHERE batch_id = ?1 AND status = ?2 AND kind <> 'callback'",
                    rusqlite::params![id, status],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap()
        };
        assert_eq!(
            (completed, failed),
            (real("completed"), real("failed")),
            "batch {id}"
        );
    }
}

// ---------------------------------------------------------------- migration 0013

/// A directory holding the migrations whose file names fall in `names`, for a
/// `SqliteDb` built (or carried over) as D1 would at that point.
fn migrations_in(tag: &str, names: impl std::ops::RangeBounds<String>) -> std::path::PathBuf {
    let src = migrations();
    let dir = std::env::temp_dir().join(format!("cron-fanout-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".sql") && names.contains(&name) {
            std::fs::copy(&path, dir.join(&name)).unwrap();
        }
    }
    dir
}

const ITEM_ROWS: &str =
    "SELECT json_array(id, batch_id, subject_id, kind, payload, status, attempt,
                                max_attempts, lease_token, lease_expires_at, run_after, started_at,
                                completed_at, last_error, receipts)
                         FROM cron_queue ORDER BY id";
const BATCH_ROWS: &str = "SELECT json_array(id, key, status, total, completed, failed, cancelled,
                                 created_at, finished_at, schedule_id, on_finish,
                                 callback_max_attempts, fill, fill_after)
                          FROM batches ORDER BY id";

/// What the old code left in a database on 0001..0012, written as it wrote it (the
/// old statements are gone): three batches created at 1,000, every item claimed
/// under "old" (ids 1-10 are A's, 11-15 B's, 16-17 C's), then ended, given back
/// or left in flight; B paused, C ended with its completion callback waiting (id
/// 18). The old trigger counts the moves out of processing.
fn live_database_at_0012() -> Store<SqliteDb> {
    let before_0013 = migrations_in("to-0012", .."0013".to_string());
    let store = Store::new(SqliteDb::in_memory(&before_0013).expect("0001..0012 apply"));
    let expires = 1_000 + LEASE_MS;
    store
        .db()
        .conn()
        .execute_batch(&format!(
            r#"INSERT INTO batches (id, key, status, total, created_at, on_finish, callback_max_attempts)
               VALUES ('A', 'a', 'running', 10, 1000, '{{"url":"https://example.com/done"}}', 3),
                      ('B', 'b', 'running', 5, 1000, NULL, NULL),
                      ('C', 'c', 'running', 2, 1000, '{{"url":"https://example.com/done"}}', 3);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 17)
             INSERT INTO cron_queue (id, batch_id, subject_id, kind, payload, status, attempt,
                                     max_attempts, lease_token, lease_expires_at, run_after, started_at)
             SELECT i, CASE WHEN i <= 10 THEN 'A' WHEN i <= 15 THEN 'B' ELSE 'C' END,
                    CASE WHEN i <= 10 THEN printf('a%02d', i - 1) WHEN i <= 15 THEN printf('b%02d', i - 11)
                         ELSE printf('c%02d', i - 16) END,
                    'webhook', '{{"url":"https://example.com"}}', 'processing', 1,
                    CASE WHEN i BETWEEN 11 AND 15 THEN 1 ELSE 3 END, 'old.' || i, {expires}, 1000, 1000
             FROM n;
             UPDATE cron_queue SET status = 'completed', completed_at = 2000, lease_expires_at = NULL
               WHERE id IN (1, 2, 3, 16, 17);
             UPDATE cron_queue SET status = 'failed', completed_at = 2000,
                                   last_error = 'permanent failure: HTTP 400', lease_expires_at = NULL
               WHERE id IN (4, 5);
             UPDATE cron_queue SET status = 'pending', attempt = 0, lease_token = NULL, lease_expires_at = NULL
               WHERE id IN (8, 9, 10, 12, 13, 14, 15);
             UPDATE batches SET status = 'paused' WHERE id = 'B';
             UPDATE batches SET status = 'finished', finished_at = 3000 WHERE id = 'C';"#
        ))
        .expect("the old state");
    store
}

/// The items 6 and 7 (A's) as the old code's claim handed them out.
fn old_in_flight(store: &Store<SqliteDb>) -> Vec<ClaimedItem> {
    [6, 7]
        .iter()
        .map(|id| {
            store
                .db()
                .conn()
                .query_row(
                    "SELECT lease_token, batch_id, subject_id, attempt, max_attempts, kind, payload
                     FROM cron_queue WHERE id = ?1",
                    [id],
                    |r| {
                        let lease: String = r.get(0)?;
                        let batch: String = r.get(1)?;
                        let subject: String = r.get(2)?;
                        let kind: String = r.get(5)?;
                        let payload: String = r.get(6)?;
                        let mut item = ClaimedItem::new(
                            *id,
                            &batch,
                            &subject,
                            &kind,
                            &payload,
                            r.get(4)?,
                            &lease,
                        );
                        item.attempt = r.get(3)?;
                        Ok(item)
                    },
                )
                .unwrap()
        })
        .collect()
}

/// Applies migration `name` alone (the files from `name` up to `next`, excluded)
/// and requires every item and batch row as it was before.
fn apply_alone_keeping_rows(
    store: &Store<SqliteDb>,
    name: &str,
    next: &str,
    items_before: &[String],
    batches_before: &[String],
) {
    let only = migrations_in(name, name.to_string()..next.to_string());
    store
        .db()
        .apply_migrations(&only)
        .unwrap_or_else(|e| panic!("{name} applies: {e:?}"));
    assert_eq!(
        texts(store, ITEM_ROWS),
        items_before,
        "{name}: no item row changed"
    );
    assert_eq!(
        texts(store, BATCH_ROWS),
        batches_before,
        "{name}: no batch row changed"
    );
}

/// A live database on 0001..0012 (ended, in-flight and pending items, a paused
/// batch, a completion callback waiting for its delivery) comes through 0013 to
/// 0017 with every item row unchanged (0014 adds the batches' empty cursor range,
/// and every pending item keeps its entry in the rebuilt due index; 0015 starts a
/// batch made on 0014 at its first item and keeps its items in flight in the
/// rebuilt leased index; 0016 adds views only; 0017 rebuilds the queue, every row
/// in the legacy index, the id high-water mark kept; 0018 counts each batch's
/// legacy rows), and the new code then ends
/// it all with exact counters (the moves the old trigger counted stay counted, the
/// rest are counted by the group commit and the reaper) and retention deletes it.
#[test]
fn migrations_0013_to_0017_carry_a_live_database_over() {
    let store = live_database_at_0012();
    common_counters_exact(&store, &["A", "B", "C"]);
    let (items_before, batches_before) = (texts(&store, ITEM_ROWS), texts(&store, BATCH_ROWS));
    assert_eq!(items_before.len(), 18, "17 items and C's callback");

    apply_alone_keeping_rows(&store, "0013", "0014", &items_before, &batches_before);
    assert_eq!(
        texts(
            &store,
            "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
        ),
        ["batches_enqueue_callback"],
        "the per-item counter trigger is gone; the callback trigger stays"
    );

    apply_alone_keeping_rows(&store, "0014", "0015", &items_before, &batches_before);
    assert_eq!(
        texts(
            &store,
            "SELECT json_array(id, claim_after, cursor_end) FROM batches ORDER BY id"
        ),
        ["[\"A\",0,0]", "[\"B\",0,0]", "[\"C\",0,0]"],
        "existing batches have an empty cursor range: their items stay indexed"
    );
    assert_eq!(
        due_index_entries(&store),
        7,
        "every pending item is in the rebuilt due index"
    );

    // What the code on 0014 left: batch D, made after it, its 4 items due at once
    // (run_after 0, ids 19-22), the first two claimed by its cursor (that claim gave
    // them run_after = now) and in flight, its claim cursor still at 0.
    store
        .db()
        .conn()
        .execute_batch(&format!(
            "INSERT INTO batches (id, key, status, total, created_at, cursor_end)
               VALUES ('D', 'd', 'running', 4, 1000, 22);
             INSERT INTO cron_queue (id, batch_id, subject_id, kind, payload, max_attempts, run_after)
               VALUES (19, 'D', 'd00', 'noop', '{{}}', 3, 0), (20, 'D', 'd01', 'noop', '{{}}', 3, 0),
                      (21, 'D', 'd02', 'noop', '{{}}', 3, 0), (22, 'D', 'd03', 'noop', '{{}}', 3, 0);
             UPDATE cron_queue SET status = 'processing', attempt = 1, lease_token = 'old.' || id,
                                   lease_expires_at = {}, run_after = 1000, started_at = 1000
               WHERE id IN (19, 20);",
            1_000 + LEASE_MS
        ))
        .expect("the state on 0014");
    let (items_before, batches_before) = (texts(&store, ITEM_ROWS), texts(&store, BATCH_ROWS));
    apply_alone_keeping_rows(&store, "0015", "0016", &items_before, &batches_before);
    assert_eq!(
        texts(
            &store,
            "SELECT json_array(id, claim_after, lease_after, cursor_end) FROM batches ORDER BY id"
        ),
        [
            "[\"A\",22,22,0]",
            "[\"B\",22,22,0]",
            "[\"C\",0,0,0]",
            "[\"D\",18,18,22]"
        ],
        "D's cursor and window start before its first item; A's and B's after every \
         row (they have no cursor items); C has ended"
    );
    assert_eq!(
        texts(
            &store,
            "SELECT CAST(id AS TEXT) FROM cron_queue INDEXED BY cron_queue_leased
             WHERE status = 'processing' AND run_after > 0 ORDER BY id"
        ),
        ["6", "7", "11", "19", "20"],
        "every item in flight is in the rebuilt leased index"
    );
    // 0016 adds views only.
    apply_alone_keeping_rows(&store, "0016", "0017", &items_before, &batches_before);

    // 0017 rebuilds the queue without its (batch_id, subject_id) index: every row
    // kept with its id, marked legacy and in the legacy index; the id high-water
    // mark kept (an item 23 was inserted and deleted).
    store
        .db()
        .conn()
        .execute_batch(
            "INSERT INTO cron_queue (id, batch_id, subject_id, kind, payload, max_attempts, run_after)
               VALUES (23, 'D', 'd04', 'noop', '{}', 3, 0);
             DELETE FROM cron_queue WHERE id = 23;",
        )
        .unwrap();
    apply_alone_keeping_rows(&store, "0017", "0018", &items_before, &batches_before);
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue INDEXED BY cron_queue_legacy
             WHERE legacy = 1 AND batch_id > ''"
        ),
        22,
        "every row stored before is in the legacy index"
    );
    assert_eq!(
        texts(
            &store,
            "SELECT name FROM sqlite_master WHERE tbl_name = 'cron_queue' AND name LIKE 'sqlite_autoindex%'"
        ),
        Vec::<String>::new(),
        "no unique index on (batch_id, subject_id) is left"
    );
    assert_eq!(
        texts(
            &store,
            "SELECT CAST(seq AS TEXT) FROM sqlite_sequence WHERE name = 'cron_queue'"
        ),
        ["23"],
        "the high-water mark moved with the rows"
    );
    // 0018 counts each batch's legacy rows, its callback aside (C's): with its
    // ranges (none) they account for its whole total, so retention may delete it.
    apply_alone_keeping_rows(&store, "0018", "0019", &items_before, &batches_before);
    assert_eq!(
        texts(
            &store,
            "SELECT json_array(id, legacy_items, total) FROM batches ORDER BY id"
        ),
        ["[\"A\",10,10]", "[\"B\",5,5]", "[\"C\",2,2]", "[\"D\",4,4]"]
    );
    // The migrations after it (the callback's own secret, flow control,
    // backpressure, elastic drain, and any later one) keep every row too; the new
    // code below needs them.
    apply_alone_keeping_rows(&store, "0019", "9999", &items_before, &batches_before);
    // Legacy batches list from their own index, in subject order, page by page.
    let page = block_on(store.list_batch_items("A", "a03", None, 3))
        .unwrap()
        .items;
    let subjects: Vec<&str> = page.iter().map(|i| i.subject_id.as_str()).collect();
    assert_eq!(subjects, ["a04", "a05", "a06"]);

    // The new code ends it all: A's two in flight commit, B's one in flight is
    // reaped out of attempts and D's two are requeued, then B is resumed and
    // everything left runs.
    let in_flight = old_in_flight(&store);
    let done = settle_all(&in_flight, Outcome::Done, 4_000);
    assert_eq!(block_on(store.commit_outcomes(&done)).unwrap(), vec![6, 7]);
    let reaped = block_on(store.reap_expired_leases(1_000 + LEASE_MS, 100)).unwrap();
    assert_eq!(
        reaped
            .iter()
            .map(|r| (r.id, r.status.as_str()))
            .collect::<Vec<_>>(),
        [(11, "failed"), (19, "pending"), (20, "pending")]
    );
    common_counters_exact(&store, &["A", "B", "C", "D"]);
    assert!(
        block_on(store.set_batch_status("B", BatchStatus::Paused, BatchStatus::Running)).unwrap()
    );
    let now = 2_000 + LEASE_MS;
    let rest = claim(&store, now, 100, "new");
    let mut ids: Vec<i64> = rest.iter().map(|i| i.item_id).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [8, 9, 10, 12, 13, 14, 15, 18, 19, 20, 21, 22],
        "the pending items, C's callback, D's requeued and its cursor's"
    );
    let done = settle_all(&rest, Outcome::Done, now);
    assert_eq!(block_on(store.commit_outcomes(&done)).unwrap().len(), 12);
    let ended = block_on(store.finish_batches(now + 1)).unwrap();
    let mut ended: Vec<&str> = ended.iter().map(|f| f.id.as_str()).collect();
    ended.sort_unstable();
    assert_eq!(ended, ["A", "B", "D"]);
    common_counters_exact(&store, &["A", "B", "C", "D"]);
    let counts = texts(
        &store,
        "SELECT json_array(id, completed, failed, cancelled, total) FROM batches ORDER BY id",
    );
    assert_eq!(
        counts,
        [
            "[\"A\",8,2,0,10]",
            "[\"B\",4,1,0,5]",
            "[\"C\",2,0,0,2]",
            "[\"D\",4,0,0,4]"
        ]
    );
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE kind = 'callback' AND status = 'pending'"
        ),
        1,
        "A's end enqueued its callback; C's was delivered"
    );
    // New rows take ids above the old high-water mark (23): A's callback 24, then
    // a new batch's items, in one range.
    let e = batch_of(&store, "e", 2, 3);
    assert_eq!(
        texts(&store, "SELECT item_ranges FROM batches WHERE id = 'b-e'"),
        ["[[25,26]]"]
    );
    // Retention empties and deletes the legacy batches (their rows through the
    // legacy index) once their callbacks are delivered, and the new one.
    for item in claim(&store, now + 2, 100, "cb") {
        let done = settle_all([&item], Outcome::Done, now + 2);
        block_on(store.commit_outcomes(&done)).unwrap();
    }
    tail(&store, now + 3);
    assert!(block_on(store.get_batch(&e))
        .unwrap()
        .unwrap()
        .finished_at
        .is_some());
    let upkeep = Upkeep {
        cancel_page: 10,
        retention: Retention::at(now + 100 * DAY_MS, 30),
    };
    block_on(store.finish_tick(now + 100 * DAY_MS, &upkeep)).unwrap();
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 0);
    assert_eq!(count(&store, "SELECT count(*) FROM batches"), 0);
}

/// The statements of a Worker built before migration 0017, as it ran them: a
/// batch with no page mark, its items inserted with no id range recorded (and
/// `legacy` NULL: the column is new to it), its total counted by batch.
const OLD_CREATE_BATCH: &str =
    "INSERT OR IGNORE INTO batches (id, key, status, created_at, on_finish, callback_max_attempts,
                                   fill, fill_after, claim_after, lease_after)
     SELECT ?1, ?2, 'running', ?3, NULL, NULL, NULL, NULL, m.id, m.id
     FROM (SELECT coalesce(max(id), 0) AS id FROM cron_queue) AS m";
const OLD_ENQUEUE_ITEM: &str =
    "INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after)
     SELECT b.id, ?2, 'noop', '{}', 3, 0 FROM batches AS b WHERE b.id = ?1";
const OLD_SET_BATCH_TOTAL: &str =
    "UPDATE batches SET total = (SELECT count(*) FROM cron_queue WHERE batch_id = ?1) WHERE id = ?1";

/// Between `migrations apply` (0017 and on) and `deploy`, the Worker built before
/// 0017 still runs: it continues the fill of batch F (made before 0017: its first
/// rows are legacy) and creates batch W, their new items in no id range and not
/// in the legacy index. Retention cannot account for them, so it keeps F and W
/// whole (their items, their rows: none stranded without its batch) and is no
/// work for the tick, while it still deletes what it can account for: a batch
/// stored before 0017 (L) and one of the new code (N).
#[test]
fn retention_keeps_a_batch_whose_items_an_old_worker_inserted_after_0017() {
    let before_0017 = migrations_in("to-0016", .."0017".to_string());
    let store = Store::new(SqliteDb::in_memory(&before_0017).expect("0001..0016 apply"));
    store
        .db()
        .conn()
        .execute_batch(
            "INSERT INTO batches (id, key, status, total, created_at)
               VALUES ('L', 'l', 'running', 2, 1000), ('F', 'f', 'running', 2, 1000);
             INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after)
               VALUES ('L', 'l0', 'noop', '{}', 3, 0), ('L', 'l1', 'noop', '{}', 3, 0),
                      ('F', 'f0', 'noop', '{}', 3, 0), ('F', 'f1', 'noop', '{}', 3, 0);",
        )
        .unwrap();
    let from_0017 = migrations_in("from-0017", "0017".to_string()..);
    store
        .db()
        .apply_migrations(&from_0017)
        .expect("0017 and on apply");

    // The old Worker, after the migrations: F's fill goes on, W is made.
    {
        let conn = store.db().conn();
        for subject in ["f2", "f3"] {
            conn.execute(OLD_ENQUEUE_ITEM, ["F", subject]).unwrap();
        }
        conn.execute(OLD_SET_BATCH_TOTAL, ["F"]).unwrap();
        conn.execute(OLD_CREATE_BATCH, rusqlite::params!["W", "w", 2_000])
            .unwrap();
        for subject in ["w0", "w1", "w2"] {
            conn.execute(OLD_ENQUEUE_ITEM, ["W", subject]).unwrap();
        }
        conn.execute(OLD_SET_BATCH_TOTAL, ["W"]).unwrap();
    }
    // The new Worker, deployed.
    let n = batch_of(&store, "n", 2, 3);
    store
        .db()
        .conn()
        .execute_batch(
            "UPDATE cron_queue SET status = 'completed';
             UPDATE batches SET status = 'finished', finished_at = 5000,
                                completed = total;",
        )
        .unwrap();
    let items_of_batch = |id: &str| {
        count(
            &store,
            &format!("SELECT count(*) FROM cron_queue WHERE batch_id = '{id}'"),
        )
    };
    assert_eq!(
        ["L", "F", "W", n.as_str()].map(items_of_batch),
        [2, 4, 3, 2]
    );

    let now = 5_000 + 31 * DAY_MS;
    let upkeep = Upkeep {
        cancel_page: 10,
        retention: Retention::at(now, 30),
    };
    for _ in 0..3 {
        block_on(store.finish_tick(now, &upkeep)).unwrap();
    }
    assert_eq!(
        texts(&store, "SELECT id FROM batches ORDER BY id"),
        ["F", "W"],
        "L and N deleted, F and W kept"
    );
    assert_eq!(["F", "W"].map(items_of_batch), [4, 3], "kept whole");
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue AS q
             WHERE NOT EXISTS (SELECT 1 FROM batches AS b WHERE b.id = q.batch_id)"
        ),
        0,
        "no item left without its batch"
    );
    let work: Vec<serde_json::Value> = block_on(store.db().run(cron_fanout::sql::ReadTickWork {
        retention_cutoff: Some(now - 30 * DAY_MS),
    }))
    .unwrap();
    assert_eq!(
        work[0]["batches_expired"], 0,
        "what retention keeps is no work"
    );
}

/// Migration 0012 on a database of every migration before it: the summaries
/// stored before keep every column, their `invocation` is NULL and
/// `GET /invocations` lists it as null.
#[test]
fn migration_0012_keeps_summaries_and_lists_their_invocation_as_null() {
    let dir = tempfile_dir("m0012");
    for entry in std::fs::read_dir(migrations()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.as_str() < "0012" && name.ends_with(".sql") {
            std::fs::copy(&path, dir.join(&name)).unwrap();
        }
    }
    let db = SqliteDb::in_memory(&dir).unwrap();
    let old = InvocationSummary {
        invocation: None,
        trigger: Trigger::Tick,
        started_at: 1_795_262_400_123,
        elapsed_ms: 7,
        tally: Tally::default(),
        subrequests: 3,
        subrequest_budget: 45,
        d1_statements: 3,
        d1_rows_written: 4,
        // Stored before migration 0024: not known.
        d1_rows_read: None,
        stop_reason: StopReason::Drained,
        drainer: None,
        chain: None,
    };
    // As the statement before the column existed wrote it.
    db.conn()
        .execute(
            "INSERT INTO invocations (trigger_kind, started_at, elapsed_ms, batch_ids, claimed,
               completed, retried, failed, lost_leases, released, reaped, subrequests,
               subrequest_budget, d1_statements, d1_rows_written, stop_reason, per_batch)
             VALUES ('tick', 1795262400123, 7, '[]', 0, 0, 0, 0, 0, 0, 0, 3, 45, 3, 4, 'drained', '{}')",
            [],
        )
        .unwrap();
    std::fs::copy(
        migrations().join("0012_invocation_ids.sql"),
        dir.join("0012_invocation_ids.sql"),
    )
    .unwrap();
    db.conn()
        .execute_batch(&std::fs::read_to_string(dir.join("0012_invocation_ids.sql")).unwrap())
        .unwrap();
    // And the ones after it, which the new code's statements need.
    apply_migrations(&db.conn(), "0013".to_string()..);
    let store = Store::new(db);
    let new = InvocationSummary {
        invocation: Some("0f3a9c2e".into()),
        d1_rows_read: Some(17),
        ..old.clone()
    };
    block_on(store.record_invocation(&new)).unwrap();
    let rows = block_on(store.list_invocations(10)).unwrap();
    let read: Vec<InvocationSummary> = rows.into_iter().rev().map(|r| r.summary).collect();
    assert_eq!(read, [old, new]);
    std::fs::remove_dir_all(&dir).ok();
}

/// A fresh directory under the system's temp dir.
fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cron-fanout-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
