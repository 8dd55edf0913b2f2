//! SQL conformance of batch control on real SQLite with the D1
//! migrations, through the same `Store` code: paused and cancelled batches are
//! never claimed (and the claim never reads their items), cancel against items in
//! flight, replay, the counters under random mixes of all of it, retention, and
//! the migration that rebuilt the tables. Time is an argument; nothing sleeps.

mod common;

use std::collections::BTreeMap;

use cron_fanout::core::budget::Budget;
use cron_fanout::core::control::{decide as decide_move, BatchStatus, Control, Move, CANCEL_PAGE};
use cron_fanout::core::model::{BatchRow, ClaimedItem, FinishedBatch, Outcome, Transition};
use cron_fanout::core::requests::ItemInput;
use cron_fanout::core::upkeep::{Retention, TickWork, Upkeep, DAY_MS};
use cron_fanout::sql::{self, Statement};
use cron_fanout::store::metered::Metered;
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{BatchSource, Param, Store};
use futures::executor::block_on;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rusqlite::types::ValueRef;
use serde_json::json;

use common::*;

fn commit(store: &Store<SqliteDb>, transitions: &[Transition]) -> usize {
    block_on(store.commit_outcomes(transitions)).unwrap().len()
}

fn status_of(store: &Store<SqliteDb>, batch: &str) -> (String, Option<i64>) {
    store
        .db()
        .conn()
        .query_row(
            "SELECT status, finished_at FROM batches WHERE id = ?1",
            [batch],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

/// A control request as the handler makes it: decide from the status read, then
/// compare-and-set. Returns the move.
fn control(store: &Store<SqliteDb>, batch: &str, c: Control) -> Move {
    let from = BatchStatus::parse(&status_of(store, batch).0).unwrap();
    let m = decide_move(c, from);
    if let Move::To(to) = m {
        assert!(block_on(store.set_batch_status(batch, from, to)).unwrap());
    }
    m
}

/// A claim's parameters as a claimer that knows no limit is defined sends them.
fn claim_params(now: i64, limit: i64) -> Vec<Param> {
    sql::ClaimDueItems {
        now,
        limit,
        token_prefix: "m",
        claimed: "{}",
        per_batch: limit,
        charges: 0,
        lease_expires_at: now + LEASE_MS,
    }
    .params()
}

// ---------------------------------------------------------------- claims

#[test]
fn paused_and_cancelled_batches_are_never_claimed() {
    let store = setup();
    let [running, paused, cancelled] =
        ["run", "paused", "gone"].map(|key| batch_of(&store, key, 5, 3));
    assert_eq!(
        control(&store, &paused, Control::Pause),
        Move::To(BatchStatus::Paused)
    );
    control(&store, &cancelled, Control::Cancel);
    // The cancelled batch's items are still pending (not swept yet): never claimed.
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE status = 'pending'"
        ),
        15
    );
    let got = claim(&store, 1, 100, "a");
    assert_eq!(got.len(), 5);
    assert!(got.iter().all(|i| i.batch_id == running), "{got:?}");
    assert!(claim(&store, 2, 100, "b").is_empty());

    control(&store, &paused, Control::Resume);
    let got = claim(&store, 3, 100, "c");
    assert_eq!(got.len(), 5);
    assert!(got.iter().all(|i| i.batch_id == paused));
    assert!(claim(&store, 4, 100, "d").is_empty());
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE batch_id = 'b-gone' AND status = 'pending'"
        ),
        5
    );
}

/// The claim seeks each running batch from its cursor (primary key) and in the due
/// index and never reads the items of a paused or cancelled one: its plan is
/// seeks only, and it does exactly
/// the same work whether a paused batch holds 10 due items or 20,000.
#[test]
fn the_claim_never_walks_a_paused_batch() {
    let with_paused = |paused_items: usize| {
        let store = setup();
        batch_of(&store, "run", 50, 3);
        let big = batch_of(&store, "big", paused_items, 3);
        control(&store, &big, Control::Pause);
        let params = claim_params(1, 10);
        let steps = vm_steps(&store, sql::CLAIM_DUE_ITEMS, &params);
        (store, params, steps)
    };
    let (store, params, big) = with_paused(20_000);
    let (_, _, small) = with_paused(10);
    eprintln!(
        "claim of 10 with a paused batch of 20,000 due items: {big} VM steps; of 10: {small}"
    );
    assert_eq!(
        big, small,
        "the claim's work depends on the paused batch's size"
    );

    let plan = query_plan(&store, sql::CLAIM_DUE_ITEMS, &params);
    assert!(
        plan.iter()
            .any(|s| s.contains("USING INDEX batches_running (status=?)")),
        "{plan:?}"
    );
    assert!(
        plan.iter().any(|s| s
            .contains("USING INDEX cron_queue_due (batch_id=? AND run_after>? AND run_after<?)")),
        "{plan:?}"
    );
    // Cursor items (due at once, in no index) are read by primary key from the cursor.
    assert!(
        plan.iter()
            .any(|s| s.contains("SEARCH c USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)")),
        "{plan:?}"
    );
    assert!(scans(&plan).is_empty(), "the claim scans: {plan:?}");

    // The same batch running is read: at most a claim's worth of it.
    let running = setup();
    batch_of(&running, "run", 50, 3);
    batch_of(&running, "big", 20_000, 3);
    let both = vm_steps(&running, sql::CLAIM_DUE_ITEMS, &params);
    assert!(both > small, "{both} vs {small}");
    let (_, _, bigger) = with_paused(40_000);
    assert_eq!(bigger, small);
}

#[test]
fn the_claim_keeps_the_global_due_order_across_batches() {
    let store = setup();
    let a = batch_of(&store, "a", 4, 3);
    let b = batch_of(&store, "b", 4, 3);
    // Interleave due times across the two batches.
    store
        .db()
        .conn()
        .execute_batch("UPDATE cron_queue SET run_after = (id * 37) % 11")
        .unwrap();
    let want: Vec<i64> = {
        let conn = store.db().conn();
        let mut stmt = conn
            .prepare("SELECT id FROM cron_queue ORDER BY run_after, id LIMIT 5")
            .unwrap();
        let ids = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        ids
    };
    let mut got: Vec<i64> = claim(&store, 100, 5, "t")
        .iter()
        .map(|i| i.item_id)
        .collect();
    got.sort_unstable();
    let mut want_sorted = want.clone();
    want_sorted.sort_unstable();
    assert_eq!(
        got, want_sorted,
        "the first 5 by (run_after, id) over {a} and {b}"
    );
}

// ---------------------------------------------------------------- cancel

#[test]
fn cancel_moves_pending_items_in_counted_pages_of_one_call_each() {
    let db = setup().into_db();
    let budget = Budget::new(1_000);
    let store = Store::new(Metered::new(db, budget.clone()));
    let items = items_of(25, |i| format!("s{i:03}"), "noop", &json!({}));
    block_on(store.create_batch("b", "k", 0, 3, BatchSource::Items(&items))).unwrap();
    assert!(
        block_on(store.set_batch_status("b", BatchStatus::Running, BatchStatus::Cancelled))
            .unwrap()
    );
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (calls, statements) = (budget.used(), store.usage().statements);
        let row = block_on(store.cancel_pending("b", 10, 7)).unwrap().unwrap();
        assert_eq!(budget.used() - calls, 1, "one call per page");
        assert_eq!(store.usage().statements - statements, 4);
        seen.push((row.cancelled, row.pending()));
    }
    assert_eq!(seen, [(10, 15), (20, 5), (25, 0), (25, 0)]);
    // A batch that is not cancelled is only read.
    block_on(store.create_batch("r", "r", 0, 3, BatchSource::Items(&items))).unwrap();
    let row = block_on(store.cancel_pending("r", 10, 7)).unwrap().unwrap();
    assert_eq!((row.cancelled, row.pending()), (0, 25));
}

/// The tick's sweep moves one page of items in all, however many batches are
/// cancelled (never a page per batch): the batches in id order, each swept whole
/// before the next, the last one of a tick partly; every counter exact after each
/// tick, and each batch ends once.
#[test]
fn the_tick_sweeps_one_page_over_all_cancelled_batches_and_ends_each_once() {
    let store = setup();
    let a = batch_of(&store, "a", 6_000, 3);
    let b = batch_of(&store, "b", 3, 3);
    let c = batch_of(&store, "c", 15_000, 3);
    for id in [&a, &b, &c] {
        control(&store, id, Control::Cancel);
    }
    let cancelled = |store: &Store<SqliteDb>| {
        count(
            store,
            "SELECT count(*) FROM cron_queue WHERE status = 'cancelled'",
        )
    };
    let counters = |store: &Store<SqliteDb>| {
        [&a, &b, &c].map(|id| {
            count(
                store,
                &format!("SELECT cancelled FROM batches WHERE id = '{id}'"),
            )
        })
    };
    let ended_ids = |ended: Vec<FinishedBatch>| -> Vec<(String, i64)> {
        ended.into_iter().map(|e| (e.id, e.cancelled)).collect()
    };
    // Tick 1: a whole (6,000), b whole (3), then c up to the page: 3,997.
    let ended = ended_ids(tail(&store, 10));
    assert_eq!(cancelled(&store), CANCEL_PAGE, "one page in all");
    assert_eq!(counters(&store), [6_000, 3, 3_997]);
    assert_eq!(ended, [(a.clone(), 6_000), (b.clone(), 3)]);
    assert_counters_exact(&store, "after tick 1");
    // Tick 2: the next page, all of c's.
    assert!(tail(&store, 20).is_empty());
    assert_eq!(counters(&store), [6_000, 3, 13_997]);
    assert_counters_exact(&store, "after tick 2");
    // Tick 3: c's last 1,003; it ends, once.
    assert_eq!(ended_ids(tail(&store, 30)), [(c.clone(), 15_000)]);
    assert!(tail(&store, 40).is_empty(), "ended once");
    assert_eq!(status_of(&store, &c), ("cancelled".into(), Some(30)));
    assert_counters_exact(&store, "after the sweep");
}

/// Items in flight when their batch is cancelled commit normally; a retry or an
/// expired lease of one comes back pending and is swept to `cancelled`, never
/// claimed again; the batch ends cancelled once the last of them has ended, and
/// the counters are exact at every step, whatever the order.
#[test]
fn cancel_against_items_in_flight_in_every_order() {
    // Each case: (outcomes committed before the cancel, after it but before the
    // sweep, after the sweep) for the 4 in-flight items; `None` is an item whose
    // runner died (left to the reaper).
    type Plan = [Option<Outcome>; 4];
    let done = || Some(Outcome::Done);
    let retry = || Some(Outcome::Retry("HTTP 503".into()));
    let fail = || Some(Outcome::Fail("HTTP 400".into()));
    let cases: Vec<(&str, Plan, usize)> = vec![
        (
            "all done after the sweep",
            [done(), done(), done(), done()],
            2,
        ),
        ("mixed after the sweep", [done(), retry(), fail(), None], 2),
        ("mixed before the sweep", [retry(), done(), None, fail()], 1),
        ("retries only", [retry(), retry(), retry(), retry()], 2),
        ("runners died", [None, None, None, None], 2),
    ];
    for (name, outcomes, when) in cases {
        let store = setup();
        let id = batch_of(&store, "x", 10, 3);
        let in_flight = claim(&store, 0, 4, "t");
        assert_eq!(in_flight.len(), 4);
        control(&store, &id, Control::Cancel);
        let commit_all = |now: i64| {
            let ts: Vec<Transition> = in_flight
                .iter()
                .zip(&outcomes)
                .filter_map(|(i, o)| o.clone().map(|o| settle(i, o, now)))
                .collect();
            assert_eq!(
                commit(&store, &ts),
                ts.len(),
                "{name}: fenced commits apply"
            );
        };
        let retried = outcomes
            .iter()
            .filter(|o| matches!(o, Some(Outcome::Retry(_))))
            .count() as i64;
        if when == 1 {
            commit_all(5);
        }
        let ended = tail(&store, 10);
        assert_counters_exact(&store, name);
        assert!(ended.is_empty(), "{name}: items still in flight");
        // The 6 pending items, and the retries that came back before the sweep.
        let swept_with = if when == 1 { retried } else { 0 };
        assert_eq!(
            count(&store, "SELECT cancelled FROM batches"),
            6 + swept_with,
            "{name}"
        );
        if when == 2 {
            commit_all(15);
            assert_counters_exact(&store, name);
        }
        // No item of a cancelled batch is claimed again, whatever is due.
        assert!(claim(&store, 10 * LEASE_MS, 100, "u").is_empty(), "{name}");
        // Dead runners' leases expire; the reaper requeues them; a tick sweeps them.
        let reaped = block_on(store.reap_expired_leases(2 * LEASE_MS, 100)).unwrap();
        let dead = outcomes.iter().filter(|o| o.is_none()).count();
        assert_eq!(reaped.len(), dead, "{name}");
        let ended = tail(&store, 2 * LEASE_MS + 1);
        assert_counters_exact(&store, name);
        assert_eq!(ended.len(), 1, "{name}: ends once nothing is in flight");
        assert_eq!(ended[0].status, "cancelled");
        let completed = outcomes.iter().filter(|o| **o == done()).count() as i64;
        let failed = outcomes.iter().filter(|o| **o == fail()).count() as i64;
        assert_eq!(
            (ended[0].completed, ended[0].failed, ended[0].cancelled),
            (completed, failed, 6 + retried + dead as i64),
            "{name}"
        );
        assert_eq!(
            count(
                &store,
                "SELECT count(*) FROM cron_queue WHERE status IN ('pending', 'processing')"
            ),
            0,
            "{name}"
        );
        assert!(tail(&store, 3 * LEASE_MS).is_empty(), "{name}: ended once");
    }
}

// ---------------------------------------------------------------- replay

fn failed_batch(store: &Store<SqliteDb>, key: &str, n: usize) -> String {
    let id = batch_of(store, key, n, 2);
    let items = claim(store, 0, n as i64, "f");
    let ts: Vec<Transition> = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let reason = if i % 2 == 0 { "HTTP 500" } else { "HTTP 404" };
            settle(item, Outcome::Fail(reason.into()), 1)
        })
        .collect();
    commit(store, &ts);
    assert_eq!(tail(store, 2).len(), 1);
    id
}

#[test]
fn replay_pages_through_failed_items_reads_only_them_and_reopens_the_batch() {
    let store = setup();
    let id = failed_batch(&store, "r", 9);
    let page = |after: &str, contains: Option<&str>, size: i64| {
        block_on(store.requeue_failed_page(&id, after, contains, size, 100, 2)).unwrap()
    };
    let first = page("", Some("HTTP 500"), 2);
    assert_eq!(
        first
            .iter()
            .map(|r| r.subject_id.as_str())
            .collect::<Vec<_>>(),
        ["r-00000", "r-00002"]
    );
    assert_eq!(status_of(&store, &id), ("running".into(), None));
    assert_counters_exact(&store, "first page");
    let rest = page(&first[1].subject_id, Some("HTTP 500"), 10);
    assert_eq!(rest.len(), 3, "r-00004, 6, 8");
    assert_counters_exact(&store, "second page");
    // Requeued items are pending: a second replay of the same failures finds none.
    assert!(page("", Some("HTTP 500"), 10).is_empty());
    let (status, attempt, max, run_after, error): (String, i64, i64, i64, String) = store
        .db()
        .conn()
        .query_row(
            "SELECT status, attempt, max_attempts, run_after, last_error FROM cron_queue WHERE subject_id = 'r-00004'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        (status.as_str(), attempt, max, run_after, error.as_str()),
        ("pending", 1, 4, 100, "permanent failure: HTTP 500")
    );
    // They are claimed again, with the next attempt number.
    let again = claim(&store, 100, 10, "g");
    assert_eq!(again.len(), 5);
    assert!(again.iter().all(|i| i.attempt == 2 && i.max_attempts == 4));

    // The statements read the failed-items index, never the batch.
    let params: Vec<Param> = vec![id.as_str().into(), "".into(), Param::Null, 10.into()];
    for statement in [sql::REOPEN_FOR_REPLAY, sql::REQUEUE_FAILED_PAGE] {
        let mut p = params.clone();
        if statement == sql::REQUEUE_FAILED_PAGE {
            p.extend([100.into(), 2.into(), "{}".into()]);
        }
        let steps = query_plan(&store, statement, &p);
        assert!(
            steps.iter().any(|s| s.contains("cron_queue_failed")),
            "{steps:?}"
        );
        assert!(scans(&steps).is_empty(), "{steps:?}");
    }
}

#[test]
fn replay_into_a_cancelled_batch_moves_nothing() {
    let store = setup();
    let id = batch_of(&store, "c", 4, 1);
    let items = claim(&store, 0, 2, "t");
    let ts = settle_all(&items, Outcome::Fail("HTTP 400".into()), 1);
    commit(&store, &ts);
    control(&store, &id, Control::Cancel);
    let before = count(&store, "SELECT failed FROM batches");
    assert!(block_on(store.requeue_failed_page(&id, "", None, 10, 5, 1))
        .unwrap()
        .is_empty());
    assert!(!block_on(store.requeue_failed_item(items[0].item_id, 5, 1)).unwrap());
    assert_eq!(count(&store, "SELECT failed FROM batches"), before);
    assert_counters_exact(&store, "cancelled");
}

#[test]
fn item_replay_counts_and_reopens_once() {
    let store = setup();
    let id = failed_batch(&store, "i", 2);
    let item: i64 = count(
        &store,
        "SELECT id FROM cron_queue WHERE subject_id = 'i-00001'",
    );
    assert!(block_on(store.requeue_failed_item(item, 50, 2)).unwrap());
    assert_eq!(status_of(&store, &id), ("running".into(), None));
    assert!(!block_on(store.requeue_failed_item(item, 51, 2)).unwrap());
    assert_counters_exact(&store, "item replay");
    let got = claim(&store, 50, 10, "t");
    assert_eq!(got.len(), 1);
    commit(&store, &[settle(&got[0], Outcome::Done, 60)]);
    let ended = tail(&store, 70);
    assert_eq!(
        (ended.len(), ended[0].completed, ended[0].failed),
        (1, 1, 1)
    );
}

// ---------------------------------------------------------------- counters under random mixes

/// Random interleavings of everything that moves items or batches — claims,
/// commits, lost runners, the reaper, pause, resume, cancel, sweeps, replays of
/// pages and of single items, the tick's tail — over several batches: after every
/// step the counters equal the real counts, no item of a batch that is not running
/// is claimed, attempts stay within their allowance, and an ended batch has
/// nothing pending or in flight.
#[test]
fn counters_stay_exact_under_random_control_and_replay() {
    // What each kind of step changed, over every seed: each must have happened.
    let mut effects = BTreeMap::<&str, i64>::new();
    for seed in 0..40 {
        let mut rng = StdRng::seed_from_u64(seed);
        let store = setup();
        let batches: Vec<String> = (0..3)
            .map(|b| {
                let n = rng.random_range(1..60);
                batch_of(&store, &format!("m{b}"), n, rng.random_range(1..4))
            })
            .collect();
        let mut now = 1;
        let mut in_flight: Vec<ClaimedItem> = Vec::new();
        for step in 0..400 {
            now += rng.random_range(1..2_000);
            let ctx = format!("seed {seed} step {step}");
            let batch = &batches[rng.random_range(0..batches.len())];
            let moved = |m: Move| i64::from(matches!(m, Move::To(_)));
            let (op, effect) = match rng.random_range(0..100) {
                0..=24 => {
                    let got = claim(&store, now, rng.random_range(1..20), &format!("c{step}"));
                    for item in &got {
                        assert_eq!(status_of(&store, &item.batch_id).0, "running", "{ctx}");
                        assert!(item.attempt <= item.max_attempts, "{ctx}");
                    }
                    let n = got.len() as i64;
                    in_flight.extend(got);
                    ("claim", n)
                }
                25..=49 => {
                    let n = rng.random_range(0..=in_flight.len());
                    let mut ts = Vec::new();
                    for item in in_flight.drain(..n) {
                        let outcome = match rng.random_range(0..10) {
                            0..=4 => Outcome::Done,
                            5..=6 => Outcome::Retry("HTTP 503".into()),
                            7..=8 => Outcome::Fail("HTTP 400".into()),
                            // The runner died: left to the reaper.
                            _ => continue,
                        };
                        ts.push(settle(&item, outcome, now));
                    }
                    ("commit", commit(&store, &ts) as i64)
                }
                50..=57 => {
                    let reaped = block_on(store.reap_expired_leases(now, 1_000)).unwrap();
                    ("reap", reaped.len() as i64)
                }
                58..=63 => ("pause", moved(control(&store, batch, Control::Pause))),
                64..=71 => ("resume", moved(control(&store, batch, Control::Resume))),
                72..=73 => ("cancel", moved(control(&store, batch, Control::Cancel))),
                74..=77 => {
                    let before = count(&store, "SELECT sum(cancelled) FROM batches");
                    block_on(store.cancel_pending(batch, rng.random_range(1..10), now)).unwrap();
                    let after = count(&store, "SELECT sum(cancelled) FROM batches");
                    ("cancel page", after - before)
                }
                78..=85 => {
                    let contains = ["HTTP 400", "gave up", "expired", "x"][rng.random_range(0..4)];
                    let contains = rng.random_bool(0.5).then_some(contains);
                    let requeued = block_on(store.requeue_failed_page(
                        batch,
                        "",
                        contains,
                        rng.random_range(1..10),
                        now,
                        rng.random_range(1..4),
                    ))
                    .unwrap();
                    ("replay", requeued.len() as i64)
                }
                86..=89 => {
                    let failed = texts(
                        &store,
                        "SELECT CAST(id AS TEXT) FROM cron_queue WHERE status = 'failed' LIMIT 1",
                    );
                    let moved = match failed.first() {
                        Some(id) => {
                            block_on(store.requeue_failed_item(id.parse().unwrap(), now, 1))
                                .unwrap()
                        }
                        None => false,
                    };
                    ("item replay", i64::from(moved))
                }
                _ => {
                    let upkeep = Upkeep {
                        cancel_page: rng.random_range(1..20),
                        retention: None,
                    };
                    let ended = block_on(store.finish_tick(now, &upkeep)).unwrap();
                    ("tail", ended.len() as i64)
                }
            };
            *effects.entry(op).or_default() += effect;
            assert_counters_exact(&store, &ctx);
            assert_eq!(
                count(
                    &store,
                    "SELECT count(*) FROM cron_queue WHERE attempt > max_attempts"
                ),
                0,
                "{ctx}"
            );
            assert_eq!(
                count(
                    &store,
                    "SELECT count(*) FROM batches b WHERE b.finished_at IS NOT NULL AND EXISTS
                       (SELECT 1 FROM cron_queue q WHERE q.batch_id = b.id
                        AND q.status IN ('pending', 'processing'))"
                ),
                0,
                "{ctx}: an ended batch has open items"
            );
        }
    }
    eprintln!("effects over 40 seeds: {effects:?}");
    assert_eq!(effects.len(), 10);
    assert!(
        effects.values().all(|&n| n > 0),
        "every step changed something: {effects:?}"
    );
}

// ---------------------------------------------------------------- retention

/// Builds: an old finished batch (3 items), an old cancelled batch that ended (2),
/// a recent finished batch (2), an old batch still running (2), an old paused one
/// (1), and invocation summaries old and new.
fn retention_fixture(store: &Store<SqliteDb>) {
    let conn = store.db().conn();
    conn.execute_batch(
        "INSERT INTO batches (id, key, status, total, completed, failed, cancelled, created_at, finished_at) VALUES
           ('old', 'old', 'finished', 3, 2, 1, 0, 0, 1000),
           ('oldc', 'oldc', 'cancelled', 2, 0, 0, 2, 0, 2000),
           ('new', 'new', 'finished', 2, 2, 0, 0, 0, 90000000),
           ('run', 'run', 'running', 2, 0, 0, 0, 0, NULL),
           ('pause', 'pause', 'paused', 1, 0, 0, 0, 0, NULL);
         INSERT INTO cron_queue (batch_id, subject_id, kind, payload, status, max_attempts, run_after) VALUES
           ('old', 'a', 'noop', '{}', 'completed', 1, 0), ('old', 'b', 'noop', '{}', 'completed', 1, 0),
           ('old', 'c', 'noop', '{}', 'failed', 1, 0),
           ('oldc', 'a', 'noop', '{}', 'cancelled', 1, 0), ('oldc', 'b', 'noop', '{}', 'cancelled', 1, 0),
           ('new', 'a', 'noop', '{}', 'completed', 1, 0), ('new', 'b', 'noop', '{}', 'completed', 1, 0),
           ('run', 'a', 'noop', '{}', 'pending', 1, 0), ('run', 'b', 'noop', '{}', 'pending', 1, 0),
           ('pause', 'a', 'noop', '{}', 'pending', 1, 0);",
    )
    .unwrap();
    record_item_ranges(&conn);
    for (i, started) in [10, 20, 30, 95_000_000].iter().enumerate() {
        conn.execute(
            "INSERT INTO invocations (trigger_kind, started_at, elapsed_ms, batch_ids, claimed,
             completed, retried, failed, lost_leases, reaped, subrequests, subrequest_budget,
             d1_statements, d1_rows_written, stop_reason)
             VALUES ('tick', ?1, 1, '[]', 0, 0, 0, 0, 0, 0, ?2, 45, 1, 1, 'drained')",
            [*started, i as i64],
        )
        .unwrap();
    }
}

#[test]
fn retention_deletes_only_ended_batches_older_than_the_cutoff_in_bounded_pages() {
    let store = setup();
    retention_fixture(&store);
    // Cutoff at 50,000,000 ms: 'old' and 'oldc' ended before it, 'new' after.
    let upkeep = |now| Upkeep {
        cancel_page: 10,
        retention: Some(Retention {
            cutoff: now - 40_000_000,
            items: 2,
            batches: 1,
            invocations: 2,
        }),
    };
    let now = 90_000_000;
    let items = |store: &Store<SqliteDb>| {
        texts(
            store,
            "SELECT batch_id || '/' || subject_id FROM cron_queue ORDER BY batch_id, subject_id",
        )
    };
    let batches = |store: &Store<SqliteDb>| texts(store, "SELECT id FROM batches ORDER BY id");
    let kept_always = ["new/a", "new/b", "pause/a", "run/a", "run/b"];

    let mut deleted_per_tick = Vec::new();
    for tick in 0..5 {
        let before = items(&store).len();
        block_on(store.finish_tick(now + tick, &upkeep(now + tick))).unwrap();
        deleted_per_tick.push(before - items(&store).len());
        for kept in kept_always {
            assert!(items(&store).contains(&kept.to_string()), "{kept} deleted");
        }
    }
    assert_eq!(
        deleted_per_tick,
        [2, 2, 1, 0, 0],
        "at most 2 items per tick"
    );
    assert_eq!(items(&store), kept_always);
    // A batch goes only once its items are gone, one per tick here.
    assert_eq!(batches(&store), ["new", "pause", "run"]);
    let started = texts(
        &store,
        "SELECT CAST(started_at AS TEXT) FROM invocations ORDER BY started_at",
    );
    assert_eq!(
        started,
        ["95000000"],
        "old summaries, 2 per tick, oldest first"
    );
    assert_counters_exact(&store, "retention");

    // Retention off deletes nothing.
    let store = setup();
    retention_fixture(&store);
    block_on(store.finish_tick(now, &Upkeep::at(now, 0))).unwrap();
    assert_eq!(items(&store).len(), 10);
    assert_eq!(count(&store, "SELECT count(*) FROM invocations"), 4);
}

/// Every statement of the tick's tail seeks an index: an idle tick reads nothing
/// of the batches that are running or recently ended, nor of their items.
#[test]
fn the_ticks_upkeep_statements_are_index_seeks() {
    let store = setup();
    retention_fixture(&store);
    let n = Param::Null;
    let cases: Vec<(&str, Vec<Param>)> = vec![
        (sql::COUNT_CANCELLED_PAGE, vec![n.clone(), 10.into()]),
        (sql::CANCEL_PENDING_PAGE, vec![n, 10.into(), 5.into()]),
        (
            sql::DELETE_EXPIRED_ITEMS,
            vec![5.into(), 10.into(), 10.into()],
        ),
        (sql::DELETE_EXPIRED_BATCHES, vec![5.into(), 10.into()]),
        (sql::DELETE_OLD_INVOCATIONS, vec![5.into(), 10.into()]),
        (sql::FINISH_BATCHES, vec![5.into()]),
        (sql::TICK_WORK, vec![5.into()]),
    ];
    for (statement, params) in cases {
        let steps = query_plan(&store, statement, &params);
        assert!(scans(&steps).is_empty(), "{statement}\n{steps:?}");
    }
    // One call, whatever it carries.
    let budget = Budget::new(10);
    let metered = Store::new(Metered::new(store.into_db(), budget.clone()));
    block_on(metered.finish_tick(5, &Upkeep::at(5, 30))).unwrap();
    assert_eq!(budget.used(), 1);
}

/// The tick reads what its upkeep has to do with its due schedules
/// (`tick_work.sql`), and its tail leaves out what has nothing to do: an idle
/// tick's tail is the finish check alone; what the flags found is done exactly as
/// the whole tail does it.
#[test]
fn the_tail_runs_only_the_upkeep_the_ticks_flags_found_work_for() {
    let now = 90_000_000;
    let cutoff = now - 40_000_000;
    let work = |store: &Store<SqliteDb>, cutoff: Option<i64>| {
        let ids = || "fired".to_string();
        block_on(store.fire_due(now, 10, 3, &ids, cutoff))
            .unwrap()
            .work
    };
    // Statements of one tail.
    let tail_of = |store: &Store<SqliteDb>, upkeep: &Upkeep| {
        let before = store.usage().statements;
        block_on(store.finish_tick(now, upkeep)).unwrap();
        store.usage().statements - before
    };
    let whole = Upkeep {
        cancel_page: 10,
        retention: Some(Retention {
            cutoff,
            items: 2,
            batches: 1,
            invocations: 2,
        }),
    };
    let nothing = TickWork {
        cancelling: false,
        batches_expired: false,
        invocations_expired: false,
    };

    let empty = setup();
    assert_eq!(work(&empty, Some(cutoff)), nothing);
    assert_eq!(tail_of(&empty, &whole), 7);
    assert_eq!(
        tail_of(&empty, &whole.narrowed(nothing)),
        1,
        "the finish check"
    );

    // Expired batches and summaries, nothing cancelled; with retention off (no
    // cutoff) nothing has expired.
    let narrowed = setup();
    retention_fixture(&narrowed);
    let found = work(&narrowed, Some(cutoff));
    assert_eq!(
        found,
        TickWork {
            batches_expired: true,
            invocations_expired: true,
            ..nothing
        }
    );
    assert_eq!(work(&narrowed, None), nothing);
    let full = setup();
    retention_fixture(&full);
    let rows = |store: &Store<SqliteDb>| {
        texts(
            store,
            "SELECT 'item ' || id FROM cron_queue UNION ALL SELECT 'batch ' || id FROM batches
             UNION ALL SELECT 'summary ' || id FROM invocations ORDER BY 1",
        )
    };
    // Tick by tick, the narrowed tail deletes what the whole one does; once the
    // expired rows are gone the flags say so.
    for tick in 0..5 {
        let found = work(&narrowed, Some(cutoff));
        assert!(
            tail_of(&narrowed, &whole.narrowed(found)) < 7,
            "tick {tick}"
        );
        tail_of(&full, &whole);
        assert_eq!(rows(&narrowed), rows(&full), "tick {tick}");
    }
    assert_eq!(work(&narrowed, Some(cutoff)), nothing);

    // Only summaries expired: their statement alone besides the finish check.
    let summaries = setup();
    retention_fixture(&summaries);
    summaries
        .db()
        .conn()
        .execute_batch("DELETE FROM cron_queue; DELETE FROM batches;")
        .unwrap();
    let found = work(&summaries, Some(cutoff));
    assert_eq!(
        found,
        TickWork {
            invocations_expired: true,
            ..nothing
        }
    );
    assert_eq!(tail_of(&summaries, &whole.narrowed(found)), 2);
    assert_eq!(count(&summaries, "SELECT count(*) FROM invocations"), 2);

    // A cancelled batch not yet ended: swept and ended by the narrowed tail.
    let cancelled = setup();
    let b = batch_of(&cancelled, "c", 3, 3);
    control(&cancelled, &b, Control::Cancel);
    let found = work(&cancelled, Some(cutoff));
    assert_eq!(
        found,
        TickWork {
            cancelling: true,
            ..nothing
        }
    );
    assert_eq!(tail_of(&cancelled, &whole.narrowed(found)), 4);
    assert_eq!(status_of(&cancelled, &b), ("cancelled".into(), Some(now)));
    assert_eq!(work(&cancelled, Some(cutoff)), nothing, "ended");
}

/// The due index is keyed by batch now: `/metrics` counts due items and finds the
/// oldest one per running batch (a seek each), not by walking the index, and
/// leaves paused batches' items out.
#[test]
fn metrics_read_the_due_items_of_running_batches_by_seeks() {
    let store = setup();
    let running = batch_of(&store, "run", 5, 3);
    let paused = batch_of(&store, "paused", 2_000, 3);
    control(&store, &paused, Control::Pause);
    let params: Vec<Param> = vec![10.into(), 1_000.into(), 0.into(), 1_000.into()];
    let steps = query_plan(&store, sql::METRICS_SNAPSHOT, &params);
    assert!(scans(&steps).is_empty(), "{steps:?}");
    let (due, oldest): (i64, i64) = store
        .db()
        .conn()
        .query_row(
            &format!(
                "SELECT due, oldest_due FROM ({})",
                sql::METRICS_SNAPSHOT.trim().trim_end_matches(';')
            ),
            rusqlite::params_from_iter(params.iter()),
            |r| Ok((r.get("due")?, r.get("oldest_due")?)),
        )
        .unwrap();
    assert_eq!((due, oldest), (5, 0), "{running}'s items only");
}

#[test]
fn item_ids_are_never_handed_out_again_after_retention() {
    let store = setup();
    let old = batch_of(&store, "old", 3, 1);
    let max_before = count(&store, "SELECT max(id) FROM cron_queue");
    let items = claim(&store, 0, 3, "t");
    let ts = settle_all(&items, Outcome::Done, 1);
    commit(&store, &ts);
    tail(&store, 2);
    let cutoff = 2 + 31 * DAY_MS;
    for _ in 0..2 {
        block_on(store.finish_tick(cutoff, &Upkeep::at(cutoff, 30))).unwrap();
    }
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 0);
    assert!(texts(&store, "SELECT id FROM batches")
        .iter()
        .all(|b| *b != old));
    batch_of(&store, "new", 2, 1);
    assert!(count(&store, "SELECT min(id) FROM cron_queue") > max_before);
}

// ---------------------------------------------------------------- the migration

/// The rebuild of migration 0006 keeps every row, id and counter of a database
/// made by the migrations before it, recreates every index and the trigger, and
/// leaves no foreign key dangling.
#[test]
fn the_rebuild_keeps_rows_ids_and_counters() {
    // The ones before it, then 0006 alone (later migrations have tests of their own).
    let conn = database_before("0006");
    conn.execute_batch(
        "INSERT INTO batches (id, key, status, total, completed, failed, created_at, finished_at, schedule_id)
           VALUES ('f', 'daily:2026-01-01', 'finished', 2, 1, 1, 5, 9, 'daily'),
                  ('r', 'adhoc', 'running', 3, 0, 0, 6, NULL, NULL);
         INSERT INTO cron_queue (id, batch_id, subject_id, kind, payload, status, attempt, max_attempts,
                                 lease_token, lease_expires_at, run_after, started_at, completed_at, last_error)
           VALUES (7, 'f', 'a', 'noop', '{}', 'completed', 1, 3, NULL, NULL, 0, 1, 2, NULL),
                  (8, 'f', 'b', 'noop', '{}', 'failed', 3, 3, NULL, NULL, 0, 1, 2, 'gave up'),
                  (9, 'r', 'a', 'noop', '{}', 'pending', 0, 3, NULL, NULL, 4, NULL, NULL, NULL),
                  (10, 'r', 'b', 'noop', '{}', 'processing', 1, 3, 'tok.10', 99, 0, 1, NULL, NULL),
                  (11, 'r', 'c', 'webhook', '{\"url\":\"https://e.com\"}', 'pending', 1, 3, NULL, NULL, 5, 1, NULL, 'attempt 1 failed');",
    )
    .unwrap();
    let dump = |conn: &rusqlite::Connection, sql: &str| -> Vec<String> {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        let rows = stmt
            .query_map([], |r| {
                Ok((0..n)
                    .map(|i| match r.get_ref(i).unwrap() {
                        ValueRef::Null => "NULL".to_string(),
                        ValueRef::Integer(v) => v.to_string(),
                        ValueRef::Real(v) => v.to_string(),
                        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                        ValueRef::Blob(b) => format!("{b:?}"),
                    })
                    .collect::<Vec<_>>()
                    .join("|"))
            })
            .unwrap();
        rows.map(Result::unwrap).collect()
    };
    let items = "SELECT * FROM cron_queue ORDER BY id";
    let batch_cols = "SELECT id, key, status, total, completed, failed, created_at, finished_at, schedule_id FROM batches ORDER BY id";
    let (items_before, batches_before) = (dump(&conn, items), dump(&conn, batch_cols));
    apply_migrations(&conn, "0006".to_string().."0007".to_string());
    assert_eq!(dump(&conn, items), items_before);
    assert_eq!(dump(&conn, batch_cols), batches_before);
    assert_eq!(dump(&conn, "SELECT cancelled FROM batches"), ["0", "0"]);
    assert!(dump(&conn, "PRAGMA foreign_key_check").is_empty());
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    assert_eq!(
        dump(
            &conn,
            "SELECT \"table\" FROM pragma_foreign_key_list('cron_queue')"
        ),
        ["batches"]
    );
    let mut objects = dump(
        &conn,
        "SELECT type || ' ' || name FROM sqlite_master
         WHERE tbl_name IN ('batches', 'cron_queue', 'invocations') AND name NOT LIKE 'sqlite_autoindex%'
         ORDER BY 1",
    );
    objects.sort();
    assert_eq!(
        objects,
        [
            "index batches_running",
            "index batches_status",
            "index cron_queue_due",
            "index cron_queue_failed",
            "index cron_queue_leased",
            "index invocations_started",
            "table batches",
            "table cron_queue",
            "table invocations",
            "trigger cron_queue_count_terminal",
        ]
    );
    // New ids continue after the largest one; the trigger counts.
    conn.execute(
        "INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after)
         VALUES ('r', 'd', 'noop', '{}', 3, 0)",
        [],
    )
    .unwrap();
    assert_eq!(conn.last_insert_rowid(), 12);
    conn.execute(
        "UPDATE cron_queue SET status = 'completed' WHERE id = 10",
        [],
    )
    .unwrap();
    assert_eq!(
        dump(&conn, "SELECT completed FROM batches WHERE id = 'r'"),
        ["1"]
    );
}

// ---------------------------------------------------------------- batch list

/// `n` batches of one item each, created at `from`, `from + 1`, ... (keys
/// `<prefix><i>`).
fn batches_of_one(store: &Store<SqliteDb>, prefix: &str, from: i64, n: i64) {
    for i in 0..n {
        let key = format!("{prefix}{i:04}");
        let items = [ItemInput {
            subject_id: "s".into(),
            kind: "noop".into(),
            payload: json!({}),
            limits: None,
            keys: Vec::new(),
        }];
        block_on(store.create_batch(
            &format!("b-{key}"),
            &key,
            from + i,
            3,
            BatchSource::Items(&items),
        ))
        .unwrap();
    }
}

/// The dashboard's batch list (`GET /batches?limit=50`, every 3 s) costs the page,
/// not the table: it reads the newest batches from an index (no scan of the
/// batches, no sort of them) and counts the items in flight once per refresh, not
/// once per batch: the leased index once, and each listed batch's lease window
/// (its first attempts in flight) by primary key. Measured in SQLite's VM steps (a stand-in for D1's rows read):
/// 400 more batches, or 150 more items in flight, change the cost of a 50-batch
/// page by a constant per added item in flight and nothing per added batch.
#[test]
fn the_batch_list_reads_a_page_and_the_items_in_flight_once() {
    let store = setup();
    let page = [Param::from(50_i64)];
    let steps = |store: &Store<SqliteDb>| vm_steps(store, sql::LIST_BATCHES, &page);
    batches_of_one(&store, "old", 0, 400);
    let base = steps(&store);
    // 400 more batches: the page is another 50, the cost the same.
    batches_of_one(&store, "new", 10_000, 400);
    let more_batches = steps(&store);
    assert!(
        more_batches <= base + base / 20,
        "400 more batches cost {more_batches} VM steps instead of {base}"
    );

    // 150 items in flight, one per batch: a constant per item (about 40 steps:
    // read, group, look up), not a walk of them per listed batch (about 5 steps
    // per item and listed batch: 250 for a page of 50).
    assert_eq!(claim(&store, 20_000, 150, "t").len(), 150);
    let in_flight = steps(&store);
    let per_item = (in_flight - more_batches) / 150;
    assert!(
        per_item <= 100,
        "each item in flight costs {per_item} VM steps per refresh (once per listed batch?)"
    );
    // 150 more, and the counts are right.
    assert_eq!(claim(&store, 20_000, 150, "t").len(), 150);
    let listed = block_on(store.list_batches(800)).unwrap();
    assert_eq!(listed.len(), 800);
    assert_eq!(
        (listed[0].key.as_str(), listed[799].key.as_str()),
        ("new0399", "old0000"),
        "newest first"
    );
    let in_flight = |b: &&BatchRow| b.processing == 1;
    assert_eq!(listed.iter().filter(in_flight).count(), 300);
    assert!(listed.iter().all(|b| b.processing <= 1));

    let conn = store.db().conn();
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", sql::LIST_BATCHES))
        .unwrap();
    let plan: Vec<String> = stmt
        .query_map([50_i64], |r| r.get(3))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(
        plan.iter()
            .any(|s| s.contains("SCAN batches USING INDEX batches_created")),
        "the page does not come from batches_created: {plan:?}"
    );
    // The leased index is walked once (not per batch); per listed batch, only its
    // lease window (its first attempts in flight) is read, by primary key.
    let scans: Vec<&String> = plan.iter().filter(|s| s.starts_with("SCAN")).collect();
    assert_eq!(
        scans,
        [
            "SCAN batches USING INDEX batches_created",
            "SCAN q USING INDEX cron_queue_leased",
            "SCAN b",
            // The lease window's reach: whether any limit is defined (a constant
            // subquery over a small table, migration 0020).
            "SCAN CONSTANT ROW",
            "SCAN limits",
        ],
        "{plan:?}"
    );
    let per_batch = plan
        .iter()
        .skip_while(|s| !s.starts_with("CORRELATED"))
        .filter(|s| !s.starts_with("CORRELATED") && !s.starts_with("USE TEMP B-TREE FOR ORDER BY"))
        // The lease window's reach is one constant subquery (whether any limit is
        // defined), evaluated once, not per batch.
        // So is whether a pause is kept (migration 0021: its partial index).
        .filter(|s| {
            !s.starts_with("SCALAR SUBQUERY")
                && *s != "SCAN CONSTANT ROW"
                && *s != "SCAN limits"
                && !s.starts_with("SEARCH limit_state USING COVERING INDEX limit_state_paused")
        });
    for step in per_batch {
        assert!(
            step.contains("USING PRIMARY KEY") || step.contains("USING INTEGER PRIMARY KEY"),
            "a listed batch's count reads more than its lease window: {step} in {plan:?}"
        );
    }
}

/// `n` batches that ended long ago, each with `items` items (0: emptied by an
/// earlier tick, not deleted yet), then one with 3 items that ended later.
fn expired_backlog(store: &Store<SqliteDb>, n: i64, items: i64) {
    store
        .db()
        .conn()
        .execute_batch(&format!(
            "WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < {n})
             INSERT INTO batches (id, key, status, total, completed, created_at, finished_at)
             SELECT printf('x%06d', n), printf('x%06d', n), 'finished', {items}, {items}, 0, 1000 + n
             FROM i;
             WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < {n}),
                            k(j) AS (SELECT 1 UNION ALL SELECT j + 1 FROM k WHERE j < {items})
             INSERT INTO cron_queue (batch_id, subject_id, kind, payload, status, max_attempts, run_after)
             SELECT printf('x%06d', n), printf('s%03d', j), 'noop', '{{}}', 'completed', 1, 0
             FROM i, k WHERE {items} > 0;
             INSERT INTO batches (id, key, status, total, completed, created_at, finished_at)
             VALUES ('last', 'last', 'finished', 3, 3, 0, 500000);
             INSERT INTO cron_queue (batch_id, subject_id, kind, payload, status, max_attempts, run_after)
             VALUES ('last', 'a', 'noop', '{{}}', 'completed', 1, 0),
                    ('last', 'b', 'noop', '{{}}', 'completed', 1, 0),
                    ('last', 'c', 'noop', '{{}}', 'completed', 1, 0);"
        ))
        .unwrap();
    record_item_ranges(&store.db().conn());
}

/// Work of one tick's retention statements (VM steps, rolled back) over a backlog.
fn retention_work(n: i64, items: i64) -> (i32, i32) {
    let store = setup();
    expired_backlog(&store, n, items);
    let r = Retention::at(DAY_MS * 100, 30).unwrap();
    (
        vm_steps(
            &store,
            sql::DELETE_EXPIRED_ITEMS,
            &[r.cutoff.into(), r.items.into(), r.batches.into()],
        ),
        vm_steps(
            &store,
            sql::DELETE_EXPIRED_BATCHES,
            &[r.cutoff.into(), r.batches.into()],
        ),
    )
}

#[test]
fn a_ticks_retention_costs_its_page_whatever_the_backlog_of_emptied_batches() {
    // Emptied batches waiting for deletion: the items step used to walk them all
    // to find the one batch with items left.
    assert_eq!(retention_work(300, 0), retention_work(5_000, 0));
}

#[test]
fn a_ticks_retention_costs_its_page_whatever_the_backlog_of_full_batches() {
    // Expired batches that still have items: the batch step used to walk them all
    // looking for empty ones.
    assert_eq!(retention_work(300, 1), retention_work(3_000, 1));
}

#[test]
fn retention_empties_and_deletes_a_page_of_batches_in_the_same_tick() {
    let store = setup();
    expired_backlog(&store, 250, 2);
    let now = DAY_MS * 100;
    let mut batches_left = Vec::new();
    for _ in 0..4 {
        block_on(store.finish_tick(now, &Upkeep::at(now, 30))).unwrap();
        batches_left.push(count(&store, "SELECT count(*) FROM batches"));
    }
    // 100 a tick (their 200 items fit the item cap), then the rest with 'last'.
    assert_eq!(batches_left, [151, 51, 0, 0]);
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 0);
}
