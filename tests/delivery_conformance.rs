//! SQL conformance of delivery on real SQLite with the D1
//! migrations, through the same `Store` code: the completion callback is a queue
//! row enqueued exactly once per end, atomically with it, claimable after its
//! batch ended, counted nowhere, re-armed by an end after a replay, kept from
//! retention until delivered; multi-channel receipts merge in the group commit
//! without ever losing a delivered channel (lost leases, replays, stale commits).
//! Time is an argument; nothing sleeps.

mod common;

use cron_fanout::core::callback::{self, OnFinish};
use cron_fanout::core::control::{BatchStatus, CANCEL_PAGE};
use cron_fanout::core::model::{ClaimedItem, ItemStatus, Outcome, Ran, Transition};
use cron_fanout::core::receipts::{self, ChannelResults, Receipt, Receipts};
use cron_fanout::core::retry::decide;
use cron_fanout::core::target::TargetPolicy;
use cron_fanout::core::upkeep::{Upkeep, DAY_MS};
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{BatchOptions, BatchSource, Created, Store};
use futures::executor::block_on;
use serde_json::{json, Value};

use common::*;

const MAX_ATTEMPTS: i64 = 3;
const HOOK: &str = "https://hooks.example.com/done";

fn on_finish() -> String {
    let policy = TargetPolicy::PUBLIC;
    OnFinish {
        url: HOOK.into(),
        signing_secret: None,
    }
    .validate(&policy)
    .unwrap()
}

/// A batch `key` of `n` noop items created at t=0, calling back when it ends
/// (`with_callback`).
fn batch_of(store: &Store<SqliteDb>, key: &str, n: usize, with_callback: bool) -> String {
    batch_of_kind(store, key, n, "noop", json!({}), with_callback)
}

fn batch_of_kind(
    store: &Store<SqliteDb>,
    key: &str,
    n: usize,
    kind: &str,
    payload: Value,
    with_callback: bool,
) -> String {
    let items = items_of(n, |i| format!("{key}-{i:05}"), kind, &payload);
    let id = format!("b-{key}");
    let hook = with_callback.then(on_finish);
    let created = block_on(store.create_batch_with(
        &id,
        key,
        0,
        MAX_ATTEMPTS,
        BatchSource::Items(&items),
        BatchOptions {
            on_finish: hook.as_deref(),
            priority: 0,
        },
    ))
    .unwrap();
    match created {
        Created::New(row) => row.id,
        Created::Existing(_) => panic!("{key} existed"),
    }
}

/// What the drain commits for a run of a multi-channel item: the outcome the
/// channels make and their receipts.
fn settle_channels(item: &ClaimedItem, channels: &[(&str, Outcome)], now: i64) -> Transition {
    let results: ChannelResults = channels
        .iter()
        .map(|(n, o)| (n.to_string(), o.clone()))
        .collect();
    let outcome = receipts::outcome(&results);
    let ran = Ran {
        channels: Some(results),
        ..Ran::from(outcome)
    };
    let mut t = decide(item, &ran.outcome, POLICY, now, 0.0);
    t.receipts = receipts::settle(item, ran.channels.as_ref(), t.status, now);
    t
}

fn commit(store: &Store<SqliteDb>, transitions: &[Transition]) -> Vec<i64> {
    block_on(store.commit_outcomes(transitions)).unwrap()
}

/// Every claimed item done, committed.
fn complete_all(store: &Store<SqliteDb>, now: i64) {
    loop {
        let items = claim(store, now, 1_000, &format!("c{now}"));
        if items.is_empty() {
            return;
        }
        let ts = settle_all(&items, Outcome::Done, now);
        commit(store, &ts);
    }
}

/// The callback row of `batch`: (status, attempt, max_attempts, payload, run_after).
fn callback_row(store: &Store<SqliteDb>, batch: &str) -> Option<(String, i64, i64, Value, i64)> {
    let conn = store.db().conn();
    let mut stmt = conn
        .prepare(
            "SELECT status, attempt, max_attempts, payload, run_after FROM cron_queue
             WHERE batch_id = ?1 AND subject_id = '' AND kind = 'callback'",
        )
        .unwrap();
    let mut rows = stmt
        .query_map([batch], |r| {
            let payload: String = r.get(3)?;
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                serde_json::from_str(&payload).unwrap(),
                r.get(4)?,
            ))
        })
        .unwrap();
    let first = rows.next().map(Result::unwrap);
    assert!(rows.next().is_none(), "one callback row per batch");
    first
}

fn callbacks(store: &Store<SqliteDb>) -> i64 {
    count(
        store,
        "SELECT count(*) FROM cron_queue WHERE kind = 'callback'",
    )
}

fn receipts_of(store: &Store<SqliteDb>, item: i64) -> Receipts {
    let text: Option<String> = store
        .db()
        .conn()
        .query_row(
            "SELECT receipts FROM cron_queue WHERE id = ?1",
            [item],
            |r| r.get(0),
        )
        .unwrap();
    receipts::parse(text.as_deref())
}

/// The only batch's two items run, one completes, the other fails for good; the
/// tick's tail at t=2 ends the batch.
fn end_with_one_failure(store: &Store<SqliteDb>) {
    let items = claim(store, 0, 10, "first");
    assert_eq!(items.len(), 2);
    commit(
        store,
        &[
            settle(&items[0], Outcome::Done, 1),
            settle(&items[1], Outcome::Fail("HTTP 400".into()), 1),
        ],
    );
    assert_eq!(tail(store, 2).len(), 1);
}

// ---------------------------------------------------------------- callbacks

#[test]
fn the_callback_is_enqueued_exactly_once_per_end_with_the_summary() {
    let store = setup();
    let batch = batch_of(&store, "cb", 3, true);
    let plain = batch_of(&store, "plain", 2, false);
    complete_all(&store, 10);
    assert_eq!(callbacks(&store), 0, "nothing before the end");
    let ended = tail(&store, 20);
    assert_eq!(ended.len(), 2);
    let (status, attempt, max_attempts, payload, run_after) =
        callback_row(&store, &batch).expect("enqueued by the finish");
    assert_eq!(
        (status.as_str(), attempt, max_attempts, run_after),
        ("pending", 0, MAX_ATTEMPTS, 20)
    );
    assert_eq!(
        payload,
        json!({"url": HOOK, "signing_secret": null, "summary": {"batch_id": batch, "key": "cb", "status": "finished",
               "total": 3, "completed": 3, "failed": 0, "cancelled": 0,
               "created_at": 0, "finished_at": 20}})
    );
    let summary = callback::Payload::parse(&payload.to_string())
        .unwrap()
        .summary;
    let mine = ended.iter().find(|b| b.id == batch).unwrap();
    assert_eq!(
        (
            summary.status.as_str(),
            summary.total,
            summary.completed,
            summary.finished_at
        ),
        (
            mine.status.as_str(),
            mine.total,
            mine.completed,
            mine.finished_at
        ),
        "the summary is the batch the finish returned"
    );
    assert_eq!(
        callback_row(&store, &plain),
        None,
        "no on_finish, no callback"
    );
    // Later ticks end nothing and enqueue nothing.
    for now in [30, 40] {
        assert!(tail(&store, now).is_empty());
    }
    assert_eq!(callbacks(&store), 1);
    assert_eq!(callback_row(&store, &batch).unwrap().4, 20);
    assert_counters_exact(&store, "after the end");
}

#[test]
fn the_end_and_its_callback_commit_together_or_not_at_all() {
    let store = setup();
    let batch = batch_of(&store, "atomic", 2, true);
    complete_all(&store, 10);
    // Make the callback's insert fail: the finish must not apply without it.
    store
        .db()
        .conn()
        .execute_batch(
            "CREATE TRIGGER refuse_callbacks BEFORE INSERT ON cron_queue
             WHEN NEW.kind = 'callback' BEGIN SELECT RAISE(ABORT, 'no callbacks today'); END;",
        )
        .unwrap();
    let err = block_on(store.finish_tick(20, &Upkeep::at(20, 0))).unwrap_err();
    assert!(err.to_string().contains("no callbacks today"), "{err}");
    let row = block_on(store.get_batch(&batch)).unwrap().unwrap();
    assert_eq!(
        (row.status.as_str(), row.finished_at),
        ("running", None),
        "not ended without its callback"
    );
    assert_eq!(callbacks(&store), 0);
    store
        .db()
        .conn()
        .execute_batch("DROP TRIGGER refuse_callbacks")
        .unwrap();
    assert_eq!(tail(&store, 30).len(), 1, "the next tick ends it");
    assert_eq!(callback_row(&store, &batch).unwrap().4, 30);
}

#[test]
fn the_callback_is_claimed_after_its_batch_ended_and_counts_nowhere() {
    let store = setup();
    let batch = batch_of(&store, "late", 2, true);
    complete_all(&store, 10);
    tail(&store, 20);
    let before = block_on(store.get_batch(&batch)).unwrap().unwrap();
    assert_eq!(before.status, "finished");
    let claimed = claim(&store, 20, 10, "cb");
    assert_eq!(claimed.len(), 1, "a finished batch's callback is claimable");
    let cb = &claimed[0];
    assert!(cb.is_callback());
    assert_eq!(
        (cb.batch_id.as_str(), cb.subject_id.as_str()),
        (batch.as_str(), "")
    );
    let in_flight = block_on(store.get_batch(&batch)).unwrap().unwrap();
    assert_eq!(
        (
            in_flight.processing,
            in_flight.pending(),
            in_flight.callback_status.as_deref()
        ),
        (0, 0, Some("processing")),
        "a callback in flight is no item in flight"
    );
    let listed = block_on(store.list_batch_items(&batch, "", None, 100))
        .unwrap()
        .items;
    assert_eq!(listed.len(), 2, "the callback is not listed");
    assert_eq!(
        commit(&store, &[settle(cb, Outcome::Done, 25)]),
        vec![cb.item_id]
    );
    let after = block_on(store.get_batch(&batch)).unwrap().unwrap();
    assert_eq!(
        (after.total, after.completed, after.failed, after.cancelled),
        (
            before.total,
            before.completed,
            before.failed,
            before.cancelled
        ),
        "the callback's commit touched no counter"
    );
    assert_eq!(
        (after.callback_status.as_deref(), after.callback_attempts),
        (Some("completed"), Some(1))
    );
    assert!(
        claim(&store, 1_000, 10, "again").is_empty(),
        "delivered once"
    );
    assert!(tail(&store, 30).is_empty(), "and nothing ends again");
    assert_counters_exact(&store, "after the delivery");
}

#[test]
fn a_callback_retries_with_the_items_policy_is_reaped_and_may_fail_for_good() {
    let store = setup();
    let batch = batch_of(&store, "retry", 1, true);
    complete_all(&store, 10);
    tail(&store, 20);
    // Attempt 1: a transient failure backs off like an item's.
    let cb = claim(&store, 20, 10, "a1").pop().unwrap();
    let t = settle(&cb, Outcome::Retry("HTTP 503".into()), 21);
    let due = t.run_after.unwrap();
    assert!(due > 21);
    commit(&store, &[t]);
    assert!(
        claim(&store, due - 1, 10, "early").is_empty(),
        "backing off"
    );
    // Attempt 2: its runner dies; the reaper requeues it.
    let cb = claim(&store, due, 10, "a2").pop().unwrap();
    assert_eq!(cb.attempt, 2);
    let reaped = block_on(store.reap_expired_leases(due + LEASE_MS, 100)).unwrap();
    assert_eq!(reaped.len(), 1);
    assert_eq!(
        (reaped[0].status.as_str(), reaped[0].kind.as_str()),
        ("pending", callback::KIND),
        "the reaper says it is a callback (no timeline counts it)"
    );
    // Attempt 3, the last: failed for good, with the reason.
    let cb = claim(&store, due + LEASE_MS, 10, "a3").pop().unwrap();
    assert_eq!(cb.attempt, MAX_ATTEMPTS);
    commit(
        &store,
        &[settle(
            &cb,
            Outcome::Retry("HTTP 500".into()),
            due + LEASE_MS + 1,
        )],
    );
    let row = block_on(store.get_batch(&batch)).unwrap().unwrap();
    let view = callback::CallbackView::from_row(&row).unwrap();
    assert_eq!((view.status, view.attempts), ("failed", MAX_ATTEMPTS));
    assert!(view.last_error.unwrap().contains("HTTP 500"));
    assert_eq!((row.completed, row.failed), (1, 0), "no item failed");
    // A failed callback is no dead letter: no listing, replay or item retry sees it.
    let failed = block_on(store.list_batch_items(&batch, "", Some(ItemStatus::Failed), 100))
        .unwrap()
        .items;
    assert!(failed.is_empty());
    let moved = block_on(store.requeue_failed_page(&batch, "", None, 100, 0, 3)).unwrap();
    assert!(moved.is_empty());
    assert_eq!(block_on(store.get_item(cb.item_id)).unwrap(), None);
    assert!(!block_on(store.requeue_failed_item(cb.item_id, 0, 3)).unwrap());
    assert_eq!(callback_row(&store, &batch).unwrap().0, "failed");
    assert_counters_exact(&store, "after a failed callback");
}

#[test]
fn an_end_after_a_replay_rearms_the_callback_with_the_new_summary() {
    let store = setup();
    let batch = batch_of(&store, "replay", 2, true);
    end_with_one_failure(&store);
    let cb = claim(&store, 2, 10, "c1").pop().unwrap();
    commit(&store, &[settle(&cb, Outcome::Done, 3)]);
    assert_eq!(callback_row(&store, &batch).unwrap().0, "completed");
    // Replay: the batch runs again; its callback still reports the first end.
    let moved = block_on(store.requeue_failed_page(&batch, "", None, 100, 4, 3)).unwrap();
    assert_eq!(moved.len(), 1, "the item only, not the callback");
    assert!(block_on(store.get_batch(&batch))
        .unwrap()
        .unwrap()
        .finished_at
        .is_none());
    assert_eq!(callback_row(&store, &batch).unwrap().0, "completed");
    complete_all(&store, 5);
    let ended = tail(&store, 6);
    assert_eq!(ended.len(), 1, "it ends again");
    let (status, attempt, _, payload, run_after) = callback_row(&store, &batch).unwrap();
    assert_eq!(
        (status.as_str(), attempt, run_after),
        ("pending", 0, 6),
        "re-armed"
    );
    assert_eq!(
        (
            &payload["summary"]["finished_at"],
            &payload["summary"]["completed"],
            &payload["summary"]["failed"]
        ),
        (&json!(6), &json!(2), &json!(0)),
        "with the new summary"
    );
    assert_eq!(callbacks(&store), 1, "the same row");
    let again = claim(&store, 6, 10, "c2");
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].item_id, cb.item_id);
    assert_counters_exact(&store, "after the second end");
}

/// A callback of an earlier end still waiting (here: for its retry) when a replay
/// reopens the batch is held, not sent, while the batch runs again: what it
/// reports is no longer the batch's state. The next end replaces it, and that
/// delivery carries its own Idempotency-Key, so a receiver that dedupes on the
/// key alone keeps the newer summary.
#[test]
fn a_callback_of_an_earlier_end_is_held_while_a_replay_runs_and_each_end_has_its_own_key() {
    let store = setup();
    let batch = batch_of(&store, "held", 2, true);
    end_with_one_failure(&store);
    let first = claim(&store, 2, 10, "c1").pop().unwrap();
    let first_key = callback::Payload::parse(&first.payload)
        .unwrap()
        .idempotency_key();
    commit(
        &store,
        &[settle(&first, Outcome::Retry("HTTP 503".into()), 3)],
    );
    let (status, _, _, _, retry_at) = callback_row(&store, &batch).unwrap();
    assert_eq!(status, "pending");
    block_on(store.requeue_failed_page(&batch, "", None, 100, 4, 3)).unwrap();
    // Due, but the batch is running again: the claim takes the item, not the callback.
    let later = retry_at.max(4) + 1;
    let claimed = claim(&store, later, 10, "c2");
    assert_eq!(claimed.len(), 1);
    assert!(!claimed[0].is_callback(), "the stale callback went out");
    commit(&store, &[settle(&claimed[0], Outcome::Done, later)]);
    assert_eq!(tail(&store, later + 1).len(), 1, "it ends again");
    let second = claim(&store, later + 1, 10, "c3").pop().unwrap();
    assert!(second.is_callback());
    let second_key = callback::Payload::parse(&second.payload)
        .unwrap()
        .idempotency_key();
    assert_ne!(first_key, second_key, "each end is keyed on its own");
    assert!(
        second_key.starts_with(&format!("batch:{batch}:")),
        "{second_key}"
    );
    assert_counters_exact(&store, "after the second end");
}

#[test]
fn an_end_while_the_last_callback_is_in_flight_fences_that_delivery() {
    let store = setup();
    let batch = batch_of(&store, "inflight", 1, true);
    let item = claim(&store, 0, 10, "i1").pop().unwrap();
    commit(
        &store,
        &[settle(&item, Outcome::Fail("HTTP 400".into()), 1)],
    );
    tail(&store, 2);
    let first = claim(&store, 2, 10, "c1").pop().unwrap();
    // While the first end's callback is out, a replay and the item's success end
    // the batch again.
    block_on(store.requeue_failed_page(&batch, "", None, 100, 3, 3)).unwrap();
    complete_all(&store, 4);
    tail(&store, 5);
    let (status, _, _, payload, _) = callback_row(&store, &batch).unwrap();
    assert_eq!(
        (status.as_str(), &payload["summary"]["finished_at"]),
        ("pending", &json!(5))
    );
    // The older delivery's commit lost its lease: it changes nothing.
    assert!(commit(&store, &[settle(&first, Outcome::Done, 6)]).is_empty());
    assert_eq!(callback_row(&store, &batch).unwrap().0, "pending");
    let second = claim(&store, 6, 10, "c2").pop().unwrap();
    assert_eq!(
        commit(&store, &[settle(&second, Outcome::Done, 7)]),
        vec![second.item_id]
    );
    assert_eq!(callback_row(&store, &batch).unwrap().0, "completed");
}

#[test]
fn a_paused_or_cancelled_batch_still_delivers_the_callback_of_its_last_end() {
    let store = setup();
    let batch = batch_of(&store, "ctl", 2, true);
    end_with_one_failure(&store);
    // Reopened, then paused before the callback of its first end went out.
    block_on(store.requeue_failed_page(&batch, "", None, 100, 3, 3)).unwrap();
    assert!(
        block_on(store.set_batch_status(&batch, BatchStatus::Running, BatchStatus::Paused))
            .unwrap()
    );
    assert!(
        claim(&store, 3, 10, "p").is_empty(),
        "neither the paused batch's item nor the callback of an end it has left"
    );
    // Cancelled: the sweep takes the item, never the callback held for the next end.
    assert!(
        block_on(store.set_batch_status(&batch, BatchStatus::Paused, BatchStatus::Cancelled))
            .unwrap()
    );
    let swept = block_on(store.cancel_pending(&batch, CANCEL_PAGE, 5))
        .unwrap()
        .unwrap();
    assert_eq!((swept.cancelled, swept.pending()), (1, 0));
    assert_eq!(callback_row(&store, &batch).unwrap().0, "pending");
    assert_counters_exact(&store, "after the cancel");
    // It ends cancelled: the callback is re-armed with that summary, and goes out.
    let ended = tail(&store, 6);
    assert_eq!((ended.len(), ended[0].status.as_str()), (1, "cancelled"));
    let (status, _, _, payload, _) = callback_row(&store, &batch).unwrap();
    assert_eq!(
        (
            status.as_str(),
            &payload["summary"]["status"],
            &payload["summary"]["cancelled"]
        ),
        ("pending", &json!("cancelled"), &json!(1))
    );
    assert_eq!(claim(&store, 6, 10, "e").len(), 1);
    assert_counters_exact(&store, "after the end");
}

#[test]
fn a_callback_takes_its_turn_beside_the_running_batches_items() {
    let store = setup();
    let early = batch_of(&store, "early", 1, true);
    complete_all(&store, 1);
    tail(&store, 2); // its callback is due at 2
    let later = batch_of(&store, "later", 3, false);
    // Items of `later` were created due at 0, before the callback; but claims take
    // turns between batches (each one's first due item before any one's second),
    // and the callback is its batch's first: it goes in the first claim.
    let mut first: Vec<(String, bool)> = claim(&store, 10, 2, "o1")
        .iter()
        .map(|i| (i.batch_id.clone(), i.is_callback()))
        .collect();
    // The rows come back in no particular order: compare them as a set.
    first.sort();
    assert_eq!(first, [(early, true), (later.clone(), false)]);
    let next = claim(&store, 10, 2, "o2");
    assert!(next.iter().all(|i| i.batch_id == later), "{next:?}");
}

#[test]
fn retention_keeps_a_batch_until_its_callback_is_delivered_or_failed() {
    let store = setup();
    let batch = batch_of(&store, "old", 2, true);
    complete_all(&store, 1);
    tail(&store, 2);
    let cutoff_now = 2 + 31 * DAY_MS;
    let retain = |now: i64| block_on(store.finish_tick(now, &Upkeep::at(now, 30))).unwrap();
    retain(cutoff_now);
    assert_eq!(
        count(&store, "SELECT count(*) FROM cron_queue"),
        3,
        "kept whole while its callback waits"
    );
    let cb = claim(&store, cutoff_now, 10, "r").pop().unwrap();
    retain(cutoff_now + 1);
    assert_eq!(
        count(&store, "SELECT count(*) FROM cron_queue"),
        3,
        "and while in flight"
    );
    commit(&store, &[settle(&cb, Outcome::Done, cutoff_now + 2)]);
    retain(cutoff_now + 3);
    retain(cutoff_now + 4);
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 0);
    assert_eq!(block_on(store.get_batch(&batch)).unwrap(), None);
}

#[test]
fn a_schedule_with_on_finish_fires_batches_that_call_back() {
    use cron_fanout::core::schedule::body::{validate_schedule, ScheduleBody};
    let store = setup();
    store
        .db()
        .conn()
        .execute_batch(
            "DELETE FROM schedules;
             INSERT INTO subjects (id, kind, payload, created_at, updated_at) VALUES ('s', 'noop', '{}', 0, 0);",
        )
        .unwrap();
    let body: ScheduleBody = serde_json::from_value(json!({"at": "2026-11-21T12:00:00Z"})).unwrap();
    let at = 1_795_262_400_000;
    let spec = validate_schedule(body, at - 1).unwrap();
    let hook = on_finish();
    let row = block_on(store.upsert_schedule("nightly", &spec, Some(at), at - 1, Some(&hook)))
        .unwrap()
        .unwrap();
    assert_eq!(row.on_finish.as_deref(), Some(hook.as_str()));
    let ids = std::cell::Cell::new(0);
    let new_id = || {
        ids.set(ids.get() + 1);
        format!("f{}", ids.get())
    };
    block_on(store.fire_due(at, 10, 4, &new_id, None)).unwrap();
    let batch = block_on(store.get_batch("f1")).unwrap().expect("fired");
    assert_eq!(batch.on_finish.as_deref(), Some(hook.as_str()));
    complete_all(&store, at);
    tail(&store, at + 1);
    let (_, _, max_attempts, payload, _) = callback_row(&store, "f1").unwrap();
    assert_eq!(
        (max_attempts, &payload["url"]),
        (4, &json!(HOOK)),
        "the fire's MAX_ATTEMPTS"
    );
}

// ---------------------------------------------------------------- receipts

fn multi_payload() -> Value {
    json!({"channels": [{"name": "email", "url": "https://e.example.com"},
                        {"name": "push", "url": "https://p.example.com"}]})
}

fn delivered(r: &Receipts, name: &str) -> bool {
    receipts::is_delivered(r, name)
}

/// A one-item `multi` batch whose first run (claimed at 0) delivered email and
/// not push, committed at `now`. Returns that run's claim.
fn multi_with_email_delivered(store: &Store<SqliteDb>, now: i64) -> ClaimedItem {
    batch_of_kind(store, "m", 1, "multi", multi_payload(), false);
    let item = claim(store, 0, 10, "m1").pop().unwrap();
    let t = settle_channels(
        &item,
        &[
            ("email", Outcome::Done),
            ("push", Outcome::Retry("x".into())),
        ],
        now,
    );
    assert_eq!(commit(store, &[t]), vec![item.item_id]);
    item
}

/// The `multi` item of the store's only batch runs `attempts` times, 100 s apart
/// from t=0: the first delivers email and push answers 503; each later run, whose
/// claim shows email delivered, sends push alone, answered `later`. Returns the
/// time of the next run.
fn push_keeps_failing(store: &Store<SqliteDb>, attempts: i64, later: &str) -> i64 {
    let mut now = 0;
    for attempt in 1..=attempts {
        let item = claim(store, now, 10, &format!("a{attempt}")).pop().unwrap();
        let sent: Vec<(&str, Outcome)> = if attempt == 1 {
            vec![
                ("email", Outcome::Done),
                ("push", Outcome::Retry("HTTP 503".into())),
            ]
        } else {
            let carried = receipts::parse(item.receipts.as_deref());
            assert!(
                delivered(&carried, "email"),
                "attempt {attempt}: {carried:?}"
            );
            vec![("push", Outcome::Retry(later.into()))]
        };
        commit(store, &[settle_channels(&item, &sent, now + 1)]);
        now += 100_000;
    }
    now
}

#[test]
fn receipts_commit_with_the_outcome_and_the_claim_hands_them_back() {
    let store = setup();
    batch_of_kind(&store, "m", 1, "multi", multi_payload(), false);
    let item = claim(&store, 0, 10, "m1").pop().unwrap();
    assert_eq!(item.receipts, None);
    let t = settle_channels(
        &item,
        &[
            ("email", Outcome::Done),
            ("push", Outcome::Retry("HTTP 503".into())),
        ],
        10,
    );
    assert_eq!(t.status, ItemStatus::Pending);
    let rows_before = store.usage().rows_written;
    commit(&store, &[t]);
    let plain = {
        // The same commit without receipts writes as many rows: they are in the row.
        let s = setup();
        batch_of_kind(&s, "m", 1, "multi", multi_payload(), false);
        let i = claim(&s, 0, 10, "m1").pop().unwrap();
        let before = s.usage().rows_written;
        commit(&s, &[settle(&i, Outcome::Retry("HTTP 503".into()), 10)]);
        s.usage().rows_written - before
    };
    assert_eq!(
        store.usage().rows_written - rows_before,
        plain,
        "no extra row written"
    );
    let stored = receipts_of(&store, item.item_id);
    assert_eq!(stored["email"], Receipt::Delivered { at: 10 });
    assert_eq!(
        stored["push"],
        Receipt::Pending {
            error: "HTTP 503".into()
        }
    );
    // The next attempt's claim carries them: the run sends push only.
    let again = claim(&store, 100_000, 10, "m2").pop().unwrap();
    assert_eq!(receipts::parse(again.receipts.as_deref()), stored);
    let t = settle_channels(&again, &[("push", Outcome::Done)], 100_001);
    assert_eq!(t.status, ItemStatus::Completed);
    commit(&store, &[t]);
    let stored = receipts_of(&store, item.item_id);
    assert_eq!(
        (stored["email"].clone(), stored["push"].clone()),
        (
            Receipt::Delivered { at: 10 },
            Receipt::Delivered { at: 100_001 }
        )
    );
}

#[test]
fn a_commit_never_downgrades_a_delivered_channel() {
    let store = setup();
    let item = multi_with_email_delivered(&store, 10);
    // A commit built from a stale view (as if email had not been delivered) that
    // says email failed for good, and push delivered.
    let again = claim(&store, 100_000, 10, "m2").pop().unwrap();
    let mut stale = again.clone();
    stale.receipts = None;
    let t = settle_channels(
        &stale,
        &[
            ("email", Outcome::Fail("HTTP 410".into())),
            ("push", Outcome::Done),
        ],
        100_001,
    );
    assert_eq!(t.status, ItemStatus::Failed);
    assert_eq!(commit(&store, &[t]), vec![item.item_id]);
    let stored = receipts_of(&store, item.item_id);
    assert_eq!(
        stored["email"],
        Receipt::Delivered { at: 10 },
        "kept, with its time"
    );
    assert_eq!(stored["push"], Receipt::Delivered { at: 100_001 });
}

#[test]
fn a_commit_whose_lease_was_lost_applies_no_receipt() {
    let store = setup();
    batch_of_kind(&store, "m", 1, "multi", multi_payload(), false);
    let first = claim(&store, 0, 10, "m1").pop().unwrap();
    // Its lease expires; the reaper requeues it and a second run claims it.
    block_on(store.reap_expired_leases(LEASE_MS, 100)).unwrap();
    let second = claim(&store, LEASE_MS, 10, "m2").pop().unwrap();
    let late = settle_channels(
        &first,
        &[("email", Outcome::Done), ("push", Outcome::Done)],
        LEASE_MS + 1,
    );
    assert!(commit(&store, &[late]).is_empty(), "fenced");
    assert!(
        receipts_of(&store, first.item_id).is_empty(),
        "nothing applied"
    );
    // The lease holder's commit applies; a retry of it (a lost answer) reads it back.
    let t = settle_channels(
        &second,
        &[
            ("email", Outcome::Done),
            ("push", Outcome::Retry("x".into())),
        ],
        LEASE_MS + 2,
    );
    assert_eq!(
        commit(&store, std::slice::from_ref(&t)),
        vec![second.item_id]
    );
    assert_eq!(
        block_on(store.recommit_outcomes([&t])).unwrap(),
        vec![second.item_id]
    );
    let stored = receipts_of(&store, second.item_id);
    assert!(delivered(&stored, "email") && !delivered(&stored, "push"));
}

#[test]
fn a_replay_keeps_delivered_channels_and_sends_only_the_rest() {
    let store = setup();
    let batch = batch_of_kind(&store, "m", 1, "multi", multi_payload(), false);
    // Push answers 503 on every attempt: the item fails once they run out.
    let now = push_keeps_failing(&store, MAX_ATTEMPTS, "HTTP 503");
    let failed = block_on(store.list_batch_items(&batch, "", Some(ItemStatus::Failed), 10))
        .unwrap()
        .items;
    assert_eq!(failed.len(), 1);
    let stored = receipts::parse(failed[0].receipts.as_deref());
    assert_eq!(stored["email"], Receipt::Delivered { at: 1 });
    assert_eq!(
        stored["push"],
        Receipt::Failed {
            error: "HTTP 503".into()
        },
        "the item failed: so did its undelivered channel"
    );
    // Replayed: pending again with its receipts; the run sends push only.
    assert_eq!(
        block_on(store.requeue_failed_page(&batch, "", None, 10, now, 3))
            .unwrap()
            .len(),
        1
    );
    let item = claim(&store, now, 10, "replay").pop().unwrap();
    let carried = receipts::parse(item.receipts.as_deref());
    assert_eq!(carried, stored);
    commit(
        &store,
        &[settle_channels(&item, &[("push", Outcome::Done)], now + 1)],
    );
    let done = receipts_of(&store, item.item_id);
    assert_eq!(
        done["email"],
        Receipt::Delivered { at: 1 },
        "never sent again"
    );
    assert_eq!(done["push"], Receipt::Delivered { at: now + 1 });
    let row = block_on(store.get_batch(&batch)).unwrap().unwrap();
    assert_eq!((row.completed, row.failed), (1, 0));
}

// ---------------------------------------------------------------- the migration

/// Migration 0007 on a database of every migration before it: rows unchanged
/// (new columns NULL), the due index rebuilt without callbacks, the callbacks
/// index and both triggers there.
#[test]
fn migration_0007_keeps_rows_and_adds_what_delivery_needs() {
    let conn = database_before("0007");
    conn.execute_batch(
        "INSERT INTO batches (id, key, status, total, created_at) VALUES ('r', 'k', 'running', 2, 1);
         INSERT INTO cron_queue (batch_id, subject_id, kind, payload, max_attempts, run_after)
           VALUES ('r', 'a', 'noop', '{}', 3, 0), ('r', 'b', 'webhook', '{}', 3, 5);",
    )
    .unwrap();
    let dump = |sql: &str| -> Vec<String> {
        let mut stmt = conn.prepare(sql).unwrap();
        stmt.query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let rows = "SELECT id || '|' || batch_id || '|' || subject_id || '|' || status || '|' || run_after FROM cron_queue ORDER BY id";
    let before = dump(rows);
    apply_migrations(&conn, "0007".to_string().."0008".to_string());
    assert_eq!(dump(rows), before);
    assert_eq!(
        dump("SELECT coalesce(receipts, 'NULL') FROM cron_queue ORDER BY id"),
        ["NULL", "NULL"]
    );
    assert_eq!(
        dump("SELECT coalesce(on_finish, 'NULL') || '|' || coalesce(callback_max_attempts, 'NULL') FROM batches"),
        ["NULL|NULL"]
    );
    let due: i64 = conn
        .query_row(
            "SELECT count(*) FROM cron_queue INDEXED BY cron_queue_due
             WHERE batch_id = 'r' AND status = 'pending' AND kind <> 'callback'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(due, 2, "the rebuilt due index holds the pending items");
    let mut objects = dump(
        "SELECT type || ' ' || name FROM sqlite_master
         WHERE tbl_name IN ('batches', 'cron_queue') AND type IN ('index', 'trigger')
           AND name NOT LIKE 'sqlite_autoindex%' ORDER BY 1",
    );
    objects.sort();
    assert_eq!(
        objects,
        [
            "index batches_running",
            "index batches_status",
            "index cron_queue_callbacks",
            "index cron_queue_due",
            "index cron_queue_failed",
            "index cron_queue_leased",
            "trigger batches_enqueue_callback",
            "trigger cron_queue_count_terminal",
        ]
    );
    // A batch cannot carry on_finish without its callback's attempts.
    assert!(conn
        .execute(
            "INSERT INTO batches (id, key, created_at, on_finish) VALUES ('x', 'x', 0, '{}')",
            [],
        )
        .is_err());
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
}

#[test]
fn the_reaper_failing_an_item_out_of_attempts_fails_its_undelivered_channels() {
    let store = setup();
    batch_of_kind(&store, "m", 1, "multi", multi_payload(), false);
    let now = push_keeps_failing(&store, MAX_ATTEMPTS - 1, "HTTP 502");
    // The last attempt's runner dies: the reaper ends the item.
    let last = claim(&store, now, 10, "last").pop().unwrap();
    assert_eq!(last.attempt, MAX_ATTEMPTS);
    let reaped = block_on(store.reap_expired_leases(now + LEASE_MS, 100)).unwrap();
    assert_eq!(reaped[0].status, "failed");
    let stored = receipts_of(&store, last.item_id);
    assert_eq!(stored["email"], Receipt::Delivered { at: 1 });
    assert_eq!(
        stored["push"],
        Receipt::Failed {
            error: "HTTP 502".into()
        }
    );
    // A requeue by the reaper (attempts left) leaves them as they were.
    let store = setup();
    let item = multi_with_email_delivered(&store, 1);
    let again = claim(&store, 100_000, 10, "y").pop().unwrap();
    block_on(store.reap_expired_leases(100_000 + LEASE_MS, 100)).unwrap();
    assert_eq!(
        receipts::parse(again.receipts.as_deref()),
        receipts_of(&store, item.item_id)
    );
}

#[test]
fn cancelling_a_batch_fails_the_undelivered_channels_of_its_cancelled_items() {
    let store = setup();
    // Email delivered, push answered a retryable error: the item waits pending.
    let item = multi_with_email_delivered(&store, 1);
    let batch = item.batch_id.clone();
    assert!(
        block_on(store.set_batch_status(&batch, BatchStatus::Running, BatchStatus::Cancelled))
            .unwrap()
    );
    let swept = block_on(store.cancel_pending(&batch, CANCEL_PAGE, 5))
        .unwrap()
        .unwrap();
    assert_eq!(swept.cancelled, 1);
    let stored = receipts_of(&store, item.item_id);
    assert_eq!(stored["email"], Receipt::Delivered { at: 1 });
    assert_eq!(
        stored["push"],
        Receipt::Failed {
            error: "x; batch cancelled".into()
        },
        "no receipt stays pending once its item is cancelled"
    );
    assert_counters_exact(&store, "after the cancel");
}
