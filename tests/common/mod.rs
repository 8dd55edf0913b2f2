//! What the host suites share (`mod common;`): a store on real SQLite with the D1
//! migrations, fixtures (subjects, batches), the drain's steps as the edge takes
//! them (claim, settle, the tick's tail) with one lease and one retry policy, the
//! counters' check and readers for assertions (rows as text, query plans); the API
//! suites' host in [`api`]. Each suite uses a part of it.
#![allow(dead_code)]

pub mod api;

use std::ops::RangeBounds;
use std::path::{Path, PathBuf};

use cron_fanout::core::model::{ClaimedItem, FinishedBatch, Outcome, Transition};
use cron_fanout::core::requests::{ItemInput, SubjectInput};
use cron_fanout::core::retry::{decide, RetryPolicy};
use cron_fanout::core::upkeep::Upkeep;
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{BatchSource, Created, Param, Store};
use futures::executor::block_on;
use serde_json::{json, Value};

/// The lease and retry policy of every host suite: a test that needs others says why.
pub const LEASE_MS: i64 = 60_000;
pub const POLICY: RetryPolicy = RetryPolicy {
    base_ms: 1_000,
    max_ms: 4_000,
};

pub fn migrations() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations")
}

pub fn setup() -> Store<SqliteDb> {
    Store::new(SqliteDb::in_memory(&migrations()).expect("migrations apply"))
}

/// An active or inactive webhook subject `id` in the default group, on UTC.
pub fn subject(id: &str, active: bool) -> SubjectInput {
    SubjectInput {
        id: id.into(),
        kind: "webhook".into(),
        payload: json!({"url": format!("https://example.com/{id}")}),
        active,
        group: "default".into(),
        timezone: "UTC".into(),
        limits: None,
        keys: Vec::new(),
    }
}

/// `n` items of `kind` with `payload`, the `i`th for subject `subject(i)`.
pub fn items_of(
    n: usize,
    subject: impl Fn(usize) -> String,
    kind: &str,
    payload: &Value,
) -> Vec<ItemInput> {
    (0..n)
        .map(|i| ItemInput {
            subject_id: subject(i),
            kind: kind.into(),
            payload: payload.clone(),
            limits: None,
            keys: Vec::new(),
        })
        .collect()
}

/// A batch `key` (id `b-<key>`) of `n` no-op items (subjects `<key>-00000`...)
/// with `max_attempts`, created at t=0.
pub fn batch_of(store: &Store<SqliteDb>, key: &str, n: usize, max_attempts: i64) -> String {
    let items = items_of(n, |i| format!("{key}-{i:05}"), "noop", &json!({}));
    let id = format!("b-{key}");
    match block_on(store.create_batch(&id, key, 0, max_attempts, BatchSource::Items(&items)))
        .unwrap()
    {
        Created::New(row) => row.id,
        Created::Existing(_) => panic!("{key} existed"),
    }
}

/// Claims up to `limit` due items at `now`, leased for [`LEASE_MS`].
pub fn claim(store: &Store<SqliteDb>, now: i64, limit: i64, prefix: &str) -> Vec<ClaimedItem> {
    block_on(store.claim_due_items(now, limit, prefix, now + LEASE_MS)).unwrap()
}

/// What the drain commits for `outcome` at `now` (no jitter).
pub fn settle(item: &ClaimedItem, outcome: Outcome, now: i64) -> Transition {
    decide(item, &outcome, POLICY, now, 0.0)
}

/// What the drain commits for each of `items`, every run ending in `outcome`.
pub fn settle_all<'a>(
    items: impl IntoIterator<Item = &'a ClaimedItem>,
    outcome: Outcome,
    now: i64,
) -> Vec<Transition> {
    items
        .into_iter()
        .map(|item| settle(item, outcome.clone(), now))
        .collect()
}

/// A tick's tail with retention off: sweep, finish.
pub fn tail(store: &Store<SqliteDb>, now: i64) -> Vec<FinishedBatch> {
    block_on(store.finish_tick(now, &Upkeep::at(now, 0))).unwrap()
}

pub fn count(store: &Store<SqliteDb>, sql: &str) -> i64 {
    store.db().conn().query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Pending items with an entry in the due index. Items due at once have none
/// (migration 0014): their batch's cursor finds them.
pub fn due_index_entries(store: &Store<SqliteDb>) -> i64 {
    count(
        store,
        "SELECT count(*) FROM cron_queue INDEXED BY cron_queue_due
         WHERE status = 'pending' AND kind <> 'callback' AND run_after > 0",
    )
}

/// EXPLAIN QUERY PLAN of `sql` with `params`: one detail line per step.
pub fn query_plan(store: &Store<SqliteDb>, sql: &str, params: &[Param]) -> Vec<String> {
    let conn = store.db().conn();
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params.iter()), |r| {
            r.get::<_, String>(3)
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// The first column of every row `sql` reads, as text.
pub fn texts(store: &Store<SqliteDb>, sql: &str) -> Vec<String> {
    let conn = store.db().conn();
    let mut stmt = conn.prepare(sql).unwrap();
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    rows
}

/// Every batch's counters equal the real counts of its items, and `total` their
/// number (a completion callback's row is no item: migration 0007).
pub fn assert_counters_exact(store: &Store<SqliteDb>, ctx: &str) {
    let conn = store.db().conn();
    let mut stmt = conn
        .prepare(
            "SELECT b.id, b.completed, b.failed, b.cancelled, b.total,
                    (SELECT count(*) FROM cron_queue q WHERE q.batch_id = b.id AND q.kind <> 'callback' AND q.status = 'completed'),
                    (SELECT count(*) FROM cron_queue q WHERE q.batch_id = b.id AND q.kind <> 'callback' AND q.status = 'failed'),
                    (SELECT count(*) FROM cron_queue q WHERE q.batch_id = b.id AND q.kind <> 'callback' AND q.status = 'cancelled'),
                    (SELECT count(*) FROM cron_queue q WHERE q.batch_id = b.id AND q.kind <> 'callback')
             FROM batches b",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                [r.get::<_, i64>(1)?, r.get(2)?, r.get(3)?, r.get(4)?],
                [r.get::<_, i64>(5)?, r.get(6)?, r.get(7)?, r.get(8)?],
            ))
        })
        .unwrap();
    for row in rows {
        let (id, counters, real) = row.unwrap();
        assert_eq!(
            counters, real,
            "{ctx}: batch {id} (completed, failed, cancelled, total)"
        );
    }
}

/// A database of every migration before `name`, foreign keys on: a migration's
/// own test writes its rows there, then applies it.
pub fn database_before(name: &str) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    apply_migrations(&conn, ..name.to_string());
    conn
}

/// Applies, in name order, the migration files whose names fall in `names`
/// (`.."0007".into()`: every one before 0007), as D1 would: a migration's own test
/// builds the database before it, writes rows, then applies it.
pub fn apply_migrations(conn: &rusqlite::Connection, names: impl RangeBounds<String>) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(migrations())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .filter(|p| names.contains(&p.file_name().unwrap().to_str().unwrap().to_string()))
        .collect();
    files.sort();
    for f in files {
        conn.execute_batch(&std::fs::read_to_string(&f).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
}

/// Gives every batch the id ranges of its items (`batches.item_ranges`, migration
/// 0017) as the statements that insert them record them, for fixtures that insert
/// rows by hand: runs of consecutive ids of the batch, each in subject order (a
/// fixture inserts a batch's rows in subject order). Rows marked legacy and
/// callback rows are in no range.
pub fn record_item_ranges(conn: &rusqlite::Connection) {
    conn.execute_batch(
        "UPDATE batches SET item_ranges = (
           SELECT json_group_array(json_array(lo, hi)) FROM (
             SELECT min(id) AS lo, max(id) AS hi FROM (
               SELECT id, id - row_number() OVER (ORDER BY id) AS run FROM cron_queue AS q
               WHERE q.batch_id = batches.id AND q.kind <> 'callback' AND q.legacy IS NULL)
             GROUP BY run ORDER BY lo))
         WHERE EXISTS (SELECT 1 FROM cron_queue AS q
                       WHERE q.batch_id = batches.id AND q.kind <> 'callback' AND q.legacy IS NULL)",
    )
    .expect("item ranges recorded");
}

/// Virtual machine steps SQLite takes to run `sql` once (rolled back afterwards):
/// the work a statement does, the same on every run of the same data. A stand-in
/// for D1's rows read, which SQLite does not report.
pub fn vm_steps(store: &Store<SqliteDb>, sql: &str, params: &[Param]) -> i32 {
    let conn = store.db().conn();
    conn.execute_batch("SAVEPOINT measure").unwrap();
    let steps = {
        let mut stmt = conn.prepare(sql).unwrap();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params.iter()))
            .unwrap();
        while rows.next().unwrap().is_some() {}
        drop(rows);
        stmt.get_status(rusqlite::StatementStatus::VmStep)
    };
    conn.execute_batch("ROLLBACK TO measure; RELEASE measure")
        .unwrap();
    steps
}

/// The steps of a plan that read a table (by name or by the aliases the
/// statements use) from end to end instead of seeking an index. Walking the
/// partial index of leased items is allowed: it holds the items in flight only;
/// so is the failed-items one (failed rows only; the dead-letter count is capped).
pub fn scans(plan: &[String]) -> Vec<&String> {
    const TABLES: [&str; 7] = ["cron_queue", "batches", "invocations", "b", "c", "q", "d"];
    plan.iter()
        .filter(|s| {
            s.strip_prefix("SCAN ")
                .and_then(|rest| rest.split_whitespace().next())
                .is_some_and(|object| TABLES.contains(&object))
                && !s.ends_with("INDEX cron_queue_leased")
                // Failed rows only, and the metrics' dead-letter count stops at its cap.
                && !s.ends_with("INDEX cron_queue_failed")
                // Batches still filling only (tick_work.sql asks whether it is empty).
                && !s.ends_with("INDEX batches_filling")
        })
        .collect()
}

/// Defines (or redefines) the limit `key` as `PUT /limits/{key}` would store it.
pub fn limit(
    store: &Store<SqliteDb>,
    key: &str,
    rate: Option<i64>,
    per: i64,
    burst: Option<i64>,
    conc: Option<i64>,
) {
    store
        .db()
        .conn()
        .execute(
            "INSERT INTO limits (key, rate, per_seconds, burst, concurrency, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 0, 0)
             ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, per_seconds = excluded.per_seconds,
               burst = excluded.burst, concurrency = excluded.concurrency",
            rusqlite::params![key, rate, per, burst, conc],
        )
        .unwrap();
}
