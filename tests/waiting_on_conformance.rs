//! What holds each pending item (`waiting_on`), on real SQLite with the
//! migrations: one batch with an item in backoff, one behind a rate key, one at
//! a concurrency limit, one behind a receiver's pause and one behind a higher
//! priority; each item's reason, the batch's counts, that the claim agrees
//! (what says `due` is what the claim takes), that nothing is written, and what
//! a page costs.

mod common;

use std::collections::BTreeMap;

use common::*;
use cron_fanout::core::model::{ClaimedItem, ItemStatus, Outcome};
use cron_fanout::core::requests::ItemInput;
use cron_fanout::core::waiting::{keys_held, PendingItem, WaitingCounts, WaitingOn, WaitingRow};
use cron_fanout::sql::{self, Statement};
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{BatchSource, Claimed, LimitsInForce, Store};
use futures::executor::block_on;
use serde_json::json;

/// A claim's size in these tests (CLAIM_CHUNK).
const CLAIM: i64 = 3;
const T0: i64 = 1_000_000;

fn item(subject: &str, keys: &[&str]) -> ItemInput {
    ItemInput {
        subject_id: subject.into(),
        kind: "noop".into(),
        payload: json!({}),
        limits: None,
        keys: keys.iter().map(|k| k.to_string()).collect(),
    }
}

fn batch(store: &Store<SqliteDb>, key: &str, items: &[ItemInput], priority: i64) -> String {
    let id = format!("b-{key}");
    let options = cron_fanout::store::BatchOptions {
        on_finish: None,
        priority,
    };
    block_on(store.create_batch_with(&id, key, 0, 3, BatchSource::Items(items), options)).unwrap();
    id
}

/// A limit with a burst of 1 when it has a rate.
fn limit(store: &Store<SqliteDb>, key: &str, rate: Option<i64>, per: i64, conc: Option<i64>) {
    common::limit(store, key, rate, per, rate.map(|_| 1), conc);
}

const RATES: LimitsInForce = LimitsInForce {
    any: true,
    rates: true,
};

/// A claim as the drain sends it while rates are in force (charged).
fn claim_rated(store: &Store<SqliteDb>, now: i64, limit: i64, prefix: &str) -> Vec<ClaimedItem> {
    let claimed = Claimed::knowing(RATES);
    block_on(store.claim_due_items_after(now, limit, prefix, now + LEASE_MS, &claimed))
        .unwrap()
        .items
}

/// The pending items of `batch` as its listing shows them, by subject.
fn pending(store: &Store<SqliteDb>, batch: &str) -> BTreeMap<String, PendingItem> {
    let page =
        block_on(store.list_batch_items(batch, "", Some(ItemStatus::Pending), 1_000)).unwrap();
    page.items
        .iter()
        .map(|i| (i.subject_id.clone(), PendingItem::from(i)))
        .collect()
}

/// Each pending item of `batch` (by subject) and what holds it at `now`.
fn waiting(store: &Store<SqliteDb>, batch: &str, now: i64) -> BTreeMap<String, WaitingOn> {
    let items = pending(store, batch);
    let by_id: BTreeMap<i64, String> = items.iter().map(|(s, i)| (i.id, s.clone())).collect();
    let all: Vec<PendingItem> = items.into_values().collect();
    let rows: Vec<WaitingRow> = block_on(store.waiting_on_items(batch, &all, now, CLAIM)).unwrap();
    assert_eq!(rows.len(), all.len(), "a row for each pending item");
    rows.iter()
        .map(|r| (by_id[&r.id].clone(), r.view().expect("a known reason")))
        .collect()
}

fn counts(store: &Store<SqliteDb>, batch: &str, now: i64) -> WaitingCounts {
    let rows = block_on(store.waiting_on_counts(batch, now, CLAIM)).unwrap();
    let row = block_on(store.get_batch(batch)).unwrap().unwrap();
    WaitingCounts::of(&rows, row.pending())
}

/// The scenario. Batch `low` (priority 0), each subject for one reason:
/// - `a-backoff`: ran once and asked to retry (backoff until its run_after);
/// - `b-rate-1` spent the only token of `rate:r` (1 a minute), `b-rate-2` waits;
/// - `c-conc-1` is in flight on `conc:c` (concurrency 1), `c-conc-2` waits;
/// - `d-host-1`'s receiver answered 429 with a delay: `host:p` is paused and
///   `d-host-2` waits on the pause (`d-host-1` itself is in backoff);
/// - `e-free` holds nothing.
/// All at `T0`; returns the low batch's id.
fn scenario(store: &Store<SqliteDb>) -> String {
    limit(store, "rate:r", Some(1), 60, None);
    limit(store, "conc:c", None, 1, Some(1));
    let items = [
        item("a-backoff", &[]),
        item("b-rate-1", &["rate:r"]),
        item("b-rate-2", &["rate:r"]),
        item("c-conc-1", &["conc:c"]),
        item("c-conc-2", &["conc:c"]),
        item("d-host-1", &["host:p"]),
        item("d-host-2", &["host:p"]),
        item("e-free", &[]),
    ];
    let low = batch(store, "low", &items, 0);
    // The claim's order: the first unheld ones.
    let first = claim_rated(store, T0, 4, "c1");
    let subjects: Vec<&str> = first.iter().map(|c| c.subject_id.as_str()).collect();
    assert_eq!(subjects, ["a-backoff", "b-rate-1", "c-conc-1", "d-host-1"]);
    let by = |s: &str| first.iter().find(|c| c.subject_id == s).unwrap();
    let mut refusal = settle(
        by("d-host-1"),
        Outcome::Retry("429 Too Many Requests".into()),
        T0,
    );
    cron_fanout::core::retry::defer(&mut refusal, Some(30_000), false, POLICY, T0);
    let transitions = vec![
        settle(
            by("a-backoff"),
            Outcome::Retry("503 Service Unavailable".into()),
            T0,
        ),
        settle(by("b-rate-1"), Outcome::Done, T0),
        refusal,
    ];
    block_on(store.commit_outcomes(&transitions)).unwrap();
    low
}

fn reason(w: &WaitingOn) -> &'static str {
    match w {
        WaitingOn::BatchPaused => "batch_paused",
        WaitingOn::Backoff { .. } => "backoff",
        WaitingOn::Paused { .. } => "paused",
        WaitingOn::Concurrency { .. } => "concurrency",
        WaitingOn::Rate { .. } => "rate",
        WaitingOn::Turn { .. } => "turn",
        WaitingOn::Due => "due",
    }
}

#[test]
fn each_pending_item_says_what_holds_it_first() {
    let store = setup();
    let low = scenario(&store);
    let now = T0 + 10;
    let w = waiting(&store, &low, now);
    let retry_at = |s: &str| {
        count(
            &store,
            &format!("SELECT run_after FROM cron_queue WHERE subject_id = '{s}'"),
        )
    };
    assert_eq!(
        w["a-backoff"],
        WaitingOn::Backoff {
            until: cron_fanout::core::time::rfc3339(retry_at("a-backoff")),
            last_error: Some("attempt 1 failed: 503 Service Unavailable".into()),
        }
    );
    // The token was spent at T0: 1 a minute, a burst of 1.
    assert_eq!(
        w["b-rate-2"],
        WaitingOn::Rate {
            key: "rate:r".into(),
            next_token_at: cron_fanout::core::time::rfc3339(T0 + 60_000),
            learned: false,
        }
    );
    assert_eq!(
        w["c-conc-2"],
        WaitingOn::Concurrency {
            key: "conc:c".into(),
            in_flight: 1,
            concurrency: 1,
        }
    );
    assert_eq!(
        w["d-host-2"],
        WaitingOn::Paused {
            key: "host:p".into(),
            // The pause ends when the refused item's own retry is due.
            until: cron_fanout::core::time::rfc3339(retry_at("d-host-1")),
        }
    );
    // The refused item itself waits for its own retry, first.
    assert_eq!(reason(&w["d-host-1"]), "backoff");
    assert_eq!(w["e-free"], WaitingOn::Due);
    // Items in flight or ended have no row.
    for gone in ["b-rate-1", "c-conc-1"] {
        assert!(!w.contains_key(gone), "{gone}: {w:?}");
    }
}

#[test]
fn what_says_due_is_what_the_claim_takes_and_what_a_key_holds_it_leaves() {
    let store = setup();
    let low = scenario(&store);
    let now = T0 + 10;
    let w = waiting(&store, &low, now);
    let due: Vec<&str> = w
        .iter()
        .filter(|(_, r)| **r == WaitingOn::Due)
        .map(|(s, _)| s.as_str())
        .collect();
    let taken = claim_rated(&store, now, 100, "c2");
    let taken: Vec<&str> = taken.iter().map(|c| c.subject_id.as_str()).collect();
    assert_eq!(taken, due);
}

#[test]
fn a_rate_s_token_within_the_claims_look_ahead_makes_its_item_due_and_the_claim_takes_it() {
    let store = setup();
    let low = scenario(&store);
    // The next token comes at T0 + 60 s; a claim takes starts a second ahead.
    let w = waiting(&store, &low, T0 + 58_999);
    assert_eq!(reason(&w["b-rate-2"]), "rate");
    let w = waiting(&store, &low, T0 + 59_000);
    assert_eq!(w["b-rate-2"], WaitingOn::Due);
    let taken = claim_rated(&store, T0 + 59_000, 100, "c2");
    assert!(
        taken.iter().any(|c| c.subject_id == "b-rate-2"),
        "{taken:?}"
    );
}

#[test]
fn a_higher_priority_with_a_claims_worth_due_makes_the_free_item_wait_its_turn() {
    let store = setup();
    let low = scenario(&store);
    let few: Vec<ItemInput> = (0..CLAIM - 1)
        .map(|i| item(&format!("h{i}"), &[]))
        .collect();
    let high = batch(&store, "high", &few, 5);
    let now = T0 + 10;
    assert_eq!(
        waiting(&store, &low, now)["e-free"],
        WaitingOn::Due,
        "fewer than a claim of a higher priority leave room in the next claim"
    );
    block_on(store.create_batch_with(
        "b-high2",
        "high2",
        0,
        3,
        BatchSource::Items(&[item("h9", &[])]),
        cron_fanout::store::BatchOptions {
            on_finish: None,
            priority: 7,
        },
    ))
    .unwrap();
    let w = waiting(&store, &low, now);
    assert_eq!(
        w["e-free"],
        WaitingOn::Turn {
            batches: 2,
            priority: 7
        }
    );
    // Reasons before the turn still come first.
    assert_eq!(reason(&w["c-conc-2"]), "concurrency");
    let taken = claim_rated(&store, now, CLAIM, "c2");
    assert!(
        taken.iter().all(|c| c.batch_id != low),
        "the claim takes the higher priorities' first: {taken:?} (high {high})"
    );
}

#[test]
fn a_paused_batch_holds_every_pending_item_first() {
    let store = setup();
    let low = scenario(&store);
    store
        .db()
        .conn()
        .execute("UPDATE batches SET status = 'paused' WHERE id = ?1", [&low])
        .unwrap();
    let w = waiting(&store, &low, T0 + 10);
    assert_eq!(w.len(), 6);
    assert!(w.values().all(|r| *r == WaitingOn::BatchPaused), "{w:?}");
    let c = counts(&store, &low, T0 + 10);
    assert_eq!(c.by_reason["batch_paused"], 6);
}

#[test]
fn the_batch_counts_each_reason_and_they_add_up_to_its_pending_items() {
    let store = setup();
    let low = scenario(&store);
    let now = T0 + 10;
    let c = counts(&store, &low, now);
    let expected: BTreeMap<String, i64> = [
        ("backoff", 2),
        ("rate", 1),
        ("concurrency", 1),
        ("paused", 1),
        ("turn", 0),
        ("due", 1),
        ("batch_paused", 0),
    ]
    .into_iter()
    .map(|(r, n)| (r.to_string(), n))
    .collect();
    assert_eq!(c.by_reason, expected);
    assert_eq!(c.not_read, 0);
    let pending = block_on(store.get_batch(&low)).unwrap().unwrap().pending();
    assert_eq!(c.by_reason.values().sum::<i64>(), pending);
    // The same reasons the page gives, item by item.
    let mut by_page: BTreeMap<String, i64> = BTreeMap::new();
    for r in waiting(&store, &low, now).values() {
        *by_page.entry(reason(r).to_string()).or_default() += 1;
    }
    by_page.retain(|_, n| *n > 0);
    let mut by_count = c.by_reason.clone();
    by_count.retain(|_, n| *n > 0);
    assert_eq!(by_page, by_count);
}

/// The keys holding the batch's items, each with its state; the paused key
/// with the receiver's word, the last error of the refused item in backoff.
#[test]
fn the_batch_names_the_keys_that_hold_it_with_their_state_and_the_receiver_s_word() {
    let store = setup();
    let low = scenario(&store);
    let now = T0 + 10;
    let rows = block_on(store.waiting_on_counts(&low, now, CLAIM)).unwrap();
    let top = cron_fanout::core::waiting::top_keys(&rows);
    let w = waiting(&store, &low, now);
    let shown: Vec<(&WaitingOn, i64, Option<&str>)> = top
        .iter()
        .map(|k| (&k.on, k.items, k.word.as_deref()))
        .collect();
    // One item each: by key, the same state each item's own reason names.
    assert_eq!(
        shown,
        [
            (&w["c-conc-2"], 1, None),
            (
                &w["d-host-2"],
                1,
                Some("attempt 1 failed: 429 Too Many Requests")
            ),
            (&w["b-rate-2"], 1, None),
        ]
    );
}

/// A pause keeps the receiver's word that set it: an item of another batch
/// waiting on the pause names it too, on its own row and in its batch's keys.
#[test]
fn a_pause_set_by_another_batch_s_item_names_the_receiver_s_word() {
    let store = setup();
    scenario(&store);
    let other = batch(&store, "other", &[item("o-host", &["host:p"])], 0);
    let now = T0 + 10;
    let items: Vec<PendingItem> = pending(&store, &other).into_values().collect();
    let rows = block_on(store.waiting_on_items(&other, &items, now, CLAIM)).unwrap();
    let shown = serde_json::to_value(rows[0].shown().unwrap()).unwrap();
    assert_eq!(shown["reason"], "paused");
    assert_eq!(shown["key"], "host:p");
    assert_eq!(shown["word"], "attempt 1 failed: 429 Too Many Requests");
    let counts = block_on(store.waiting_on_counts(&other, now, CLAIM)).unwrap();
    let top = cron_fanout::core::waiting::top_keys(&counts);
    assert_eq!(
        top[0].word.as_deref(),
        Some("attempt 1 failed: 429 Too Many Requests")
    );
    // Only a pause has a word.
    let free = batch(&store, "free", &[item("f", &[])], 0);
    let items: Vec<PendingItem> = pending(&store, &free).into_values().collect();
    let rows = block_on(store.waiting_on_items(&free, &items, now, CLAIM)).unwrap();
    assert_eq!(
        serde_json::to_value(rows[0].shown().unwrap()).unwrap(),
        json!({"reason": "due"})
    );
}

#[test]
fn past_its_head_a_big_batch_s_pending_items_count_as_not_read() {
    let store = setup();
    let items: Vec<ItemInput> = (0..1_000).map(|i| item(&format!("s{i:04}"), &[])).collect();
    let b = batch(&store, "big", &items, 0);
    let c = counts(&store, &b, T0);
    let head = cron_fanout::core::waiting::HEAD_READ;
    assert_eq!(c.by_reason["due"], head);
    assert_eq!(c.not_read, 1_000 - head);
}

#[test]
fn reading_what_holds_items_writes_nothing() {
    let store = setup();
    let low = scenario(&store);
    let before = store.usage();
    waiting(&store, &low, T0 + 10);
    counts(&store, &low, T0 + 10);
    assert_eq!(store.usage().rows_written, before.rows_written);
}

/// The claim's rules and keys' state, its very text: the statement that says
/// why items wait and every claim statement read key_rules.sql and
/// key_state.sql, and `force` is the same.
#[test]
fn the_rules_it_reads_are_the_claims_own_text() {
    let rules = include_str!("../src/sql/key_rules.sql");
    let state = include_str!("../src/sql/key_state.sql");
    for statement in [
        sql::WAITING_KEYS,
        sql::CLAIM_HELD,
        sql::CHARGE_RATE_LIMITS,
        sql::CLAIM_DUE_ITEMS,
        sql::CLAIM_DUE_ITEMS_AT_SLOTS,
    ] {
        assert!(statement.contains(rules), "{statement}");
        assert!(statement.contains(state), "{statement}");
    }
    let block = |sql: &'static str| {
        let start = sql.find("\nforce AS MATERIALIZED (").expect("force");
        let end = start + sql[start..].find("\n),").unwrap();
        &sql[start..end]
    };
    assert_eq!(
        block(include_str!("../src/sql/waiting_held_keys.sql")),
        block(include_str!("../src/sql/claim_selection.sql"))
    );
}

// ---------------------------------------------------------------- cost

/// A batch of `n` items, each holding a concurrency key, 20 of them in flight,
/// and a page of `page` pending ones, as listed.
fn page_setup(n: usize, page: usize) -> (Store<SqliteDb>, String, Vec<PendingItem>) {
    let store = setup();
    limit(&store, "host:*", None, 1, Some(20));
    let items: Vec<ItemInput> = (0..n)
        .map(|i| item(&format!("s{i:05}"), &[&format!("host:h{}", i % 3)]))
        .collect();
    let b = batch(&store, "b", &items, 0);
    claim_rated(&store, T0, 60, "c1");
    let listed =
        block_on(store.list_batch_items(&b, "s00100", Some(ItemStatus::Pending), page as i64))
            .unwrap();
    let page: Vec<PendingItem> = listed.items.iter().map(PendingItem::from).collect();
    (store, b, page)
}

fn page_statement(b: &str, page: &[PendingItem]) -> (&'static str, Vec<cron_fanout::store::Param>) {
    sql::WaitingKeys {
        now: T0 + 10,
        batch_id: b,
        keys: serde_json::to_string(&keys_held(page)).unwrap(),
        claim: 100,
    }
    .bind()
}

#[test]
fn a_page_s_reasons_seek_every_table_they_read_and_scan_none() {
    let (store, b, page) = page_setup(2_000, 100);
    let (sql, params) = page_statement(&b, &page);
    let plan = query_plan(&store, sql, &params);
    assert!(scans(&plan).is_empty(), "{:#?}", scans(&plan));
    let head = sql::WaitingHead {
        batch_id: &b,
        head: cron_fanout::core::waiting::HEAD_READ,
    }
    .bind();
    assert!(scans(&query_plan(&store, head.0, &head.1)).is_empty());
}

/// What a page's reasons cost does not grow with its batch nor with the page:
/// its keys, the items in flight; never an item of the page or the rest of
/// the batch.
#[test]
fn a_page_s_reasons_cost_as_much_in_a_batch_of_20000_as_in_one_of_500_and_for_3_items_as_for_100() {
    let steps = |n, size| {
        let (store, b, page) = page_setup(n, size);
        assert_eq!(page.len(), size);
        let (sql, params) = page_statement(&b, &page);
        let rows: Vec<WaitingRow> =
            block_on(store.waiting_on_items(&b, &page, T0 + 10, 100)).unwrap();
        assert_eq!(rows.len(), size);
        assert!(rows.iter().all(|r| r.reason == "concurrency"), "{rows:?}");
        vm_steps(&store, sql, &params)
    };
    let (small, big, few) = (steps(500, 100), steps(20_000, 100), steps(20_000, 3));
    assert_eq!(small, big, "VM steps");
    assert_eq!(few, big, "VM steps");
}
