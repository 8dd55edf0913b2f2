//! A job kind's own `max_attempts` (`jobs::Policy`) on real SQLite with the D1
//! migrations: applied when its items are enqueued (explicit items, a batch over
//! subjects, a schedule's fire) and when a replay grows their allowance; other
//! kinds keep the global `MAX_ATTEMPTS`.

mod common;

use common::{count, setup};
use cron_fanout::core::requests::{ItemInput, SubjectInput};
use cron_fanout::jobs::{Context, Job, Jobs, Outcome, Policy};
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{BatchSource, Store};
use futures::executor::block_on;
use serde_json::{json, Value};

const MAX_ATTEMPTS: i64 = 5;

/// A kind that wants two attempts per item.
struct Twice;

impl Job for Twice {
    type Payload = Value;

    fn name(&self) -> &'static str {
        "twice"
    }

    async fn run(&self, _ctx: &Context<'_>, _payload: Value) -> Outcome {
        Outcome::Done
    }

    fn policy(&self) -> Policy {
        Policy {
            max_attempts: Some(2),
            ..Policy::default()
        }
    }
}

fn store() -> Store<SqliteDb> {
    let jobs = Jobs::builtin().with(Twice);
    setup().with_kind_attempts(jobs.max_attempts_by_kind())
}

/// subject_id → max_attempts of batch `id`'s items.
fn attempts(store: &Store<SqliteDb>, batch_id: &str) -> Vec<(String, i64)> {
    let conn = store.db().conn();
    let mut stmt = conn
        .prepare(
            "SELECT subject_id, max_attempts FROM cron_queue WHERE batch_id = ?1 ORDER BY subject_id",
        )
        .unwrap();
    let rows = stmt
        .query_map([batch_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    rows.map(Result::unwrap).collect()
}

fn subjects(store: &Store<SqliteDb>) {
    let s = |id: &str, kind: &str| SubjectInput {
        id: id.into(),
        kind: kind.into(),
        payload: json!({"url": "https://example.com/x"}),
        active: true,
        group: "default".into(),
        timezone: "UTC".into(),
        limits: None,
        keys: Vec::new(),
    };
    block_on(store.upsert_subjects(&[s("a", "twice"), s("b", "webhook")], 1)).unwrap();
}

/// Batch `b1` (key `k1`) of `source`, with the global `MAX_ATTEMPTS`.
fn create_b1(store: &Store<SqliteDb>, source: BatchSource) {
    block_on(store.create_batch("b1", "k1", 0, MAX_ATTEMPTS, source)).unwrap();
}

/// [`store`] with [`subjects`] and batch `b1` over them.
fn store_with_a_batch_over_subjects() -> Store<SqliteDb> {
    let store = store();
    subjects(&store);
    create_b1(&store, BatchSource::ActiveSubjects);
    store
}

fn want() -> Vec<(String, i64)> {
    vec![("a".into(), 2), ("b".into(), MAX_ATTEMPTS)]
}

#[test]
fn the_registry_lists_only_kinds_with_their_own_attempts() {
    let map = Jobs::builtin().with(Twice).max_attempts_by_kind();
    assert_eq!(
        map.into_iter().collect::<Vec<_>>(),
        [("twice".to_string(), 2)]
    );
}

#[test]
fn explicit_items_get_their_kinds_attempts() {
    let store = store();
    let item = |id: &str, kind: &str| ItemInput {
        subject_id: id.into(),
        kind: kind.into(),
        payload: json!({"url": "https://example.com/x"}),
        limits: None,
        keys: Vec::new(),
    };
    let items = [item("a", "twice"), item("b", "webhook")];
    create_b1(&store, BatchSource::Items(&items));
    assert_eq!(attempts(&store, "b1"), want());
}

#[test]
fn a_batch_over_subjects_and_a_schedule_fire_give_each_kind_its_attempts() {
    let store = store_with_a_batch_over_subjects();
    assert_eq!(attempts(&store, "b1"), want());
    // The migration's `daily` schedule, fired at its noon.
    let noon = block_on(store.get_schedule("daily"))
        .unwrap()
        .unwrap()
        .next_fire_at
        .unwrap();
    let ids = || "fired".to_string();
    block_on(store.fire_due(noon + 1_000, 100, MAX_ATTEMPTS, &ids, None)).unwrap();
    assert_eq!(attempts(&store, "fired"), want());
}

#[test]
fn a_replay_grows_each_kinds_allowance_by_its_own_attempts() {
    let store = store_with_a_batch_over_subjects();
    // Both used up their attempts and failed.
    store
        .db()
        .conn()
        .execute_batch(
            "UPDATE cron_queue SET status = 'failed', attempt = max_attempts, last_error = 'x'
               WHERE batch_id = 'b1';
             UPDATE batches SET failed = 2 WHERE id = 'b1';",
        )
        .unwrap();
    let moved = block_on(store.requeue_failed_page("b1", "", None, 100, 10, MAX_ATTEMPTS)).unwrap();
    assert_eq!(moved.len(), 2);
    assert_eq!(
        attempts(&store, "b1"),
        [("a".to_string(), 4), ("b".to_string(), 2 * MAX_ATTEMPTS)]
    );
    // One item alone, failed again: grows by its kind's 2.
    store
        .db()
        .conn()
        .execute_batch(
            "UPDATE cron_queue SET status = 'failed', attempt = max_attempts WHERE subject_id = 'a';
             UPDATE batches SET failed = 1 WHERE id = 'b1';",
        )
        .unwrap();
    let id = count(&store, "SELECT id FROM cron_queue WHERE subject_id = 'a'");
    assert!(block_on(store.requeue_failed_item(id, 20, MAX_ATTEMPTS)).unwrap());
    assert_eq!(attempts(&store, "b1")[0], ("a".to_string(), 6));
}
