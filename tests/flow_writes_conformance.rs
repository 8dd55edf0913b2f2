//! What flow control writes, on real SQLite with the D1 migrations, through the
//! `Store` code the Worker runs: the limit keys an item holds (copied from its
//! subject by both fill statements, page after page, or taken from the request
//! for explicit items; NULL for none and for completion callbacks) and the
//! priorities of batches (a schedule's fires copy its own).

mod common;

use std::cell::Cell;

use cron_fanout::core::requests::{ItemInput, SubjectInput};
use cron_fanout::core::schedule::body::{validate_schedule, ScheduleBody};
use cron_fanout::core::schedule::plan::next_fire_at;
use cron_fanout::core::schedule::tick::FIRE_PAGE;
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{BatchOptions, BatchSource, FillPages, Store, ITEMS_PER_STATEMENT};
use futures::executor::block_on;
use serde_json::{json, Value};

use common::*;

const MAX_ATTEMPTS: i64 = 3;

/// A store whose fills take 2 subjects a page, one page a call: a fill of a few
/// subjects spans calls (the ticks' `continue_fills`).
fn store() -> Store<SqliteDb> {
    let store = setup().with_fill(FillPages {
        page: 2,
        pages_per_call: 1,
        create_calls: 1,
        ..FillPages::default()
    });
    // The migration's daily schedule fires at noon: not in these tests.
    block_on(store.delete_schedule("daily")).unwrap();
    store
}

fn keys(list: &[&str]) -> Vec<String> {
    list.iter().map(|k| k.to_string()).collect()
}

/// Active subject `id` of `group` holding `held` (as validation sets them: its
/// own and its kind's).
fn keyed_subject(id: &str, group: &str, held: &[&str]) -> SubjectInput {
    SubjectInput {
        group: group.into(),
        keys: keys(held),
        ..subject(id, true)
    }
}

/// subject_id → the limits column of batch `batch`'s items, in subject order.
fn item_keys(store: &Store<SqliteDb>, batch: &str) -> Vec<(String, Option<String>)> {
    let conn = store.db().conn();
    let mut stmt = conn
        .prepare(
            "SELECT subject_id, limits FROM cron_queue
             WHERE batch_id = ?1 AND kind <> 'callback' ORDER BY subject_id",
        )
        .unwrap();
    let rows = stmt
        .query_map([batch], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// The subjects of [`subjects_with_keys`], as their items must hold them.
fn held(rows: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
    rows.iter()
        .map(|(s, k)| (s.to_string(), k.map(str::to_string)))
        .collect()
}

/// Five subjects in group `g` (two with keys, one without, one inactive, one in
/// another group): what every fill below covers.
fn subjects_with_keys(store: &Store<SqliteDb>) {
    let subjects = [
        keyed_subject("s1", "g", &["tenant:acme", "github"]),
        keyed_subject("s2", "g", &[]),
        keyed_subject("s3", "g", &["github"]),
        SubjectInput {
            active: false,
            ..keyed_subject("s4", "g", &["off"])
        },
        keyed_subject("s5", "other", &["tenant:bolt"]),
    ];
    block_on(store.upsert_subjects(&subjects, 1)).unwrap();
}

/// Saves schedule `id` as `PUT /schedules/{id}` does, then fires what is due at
/// `now` and continues the fills until none is left: the batches made.
fn put_and_fire(store: &Store<SqliteDb>, id: &str, body: Value, now: i64) {
    let body: ScheduleBody = serde_json::from_value(body).unwrap();
    let spec = validate_schedule(body, 0).unwrap();
    let next = next_fire_at(&spec, 0, &[]);
    block_on(store.upsert_schedule(id, &spec, next, 0, None)).unwrap();
    let n = Cell::new(0);
    let ids = || {
        n.set(n.get() + 1);
        format!("{id}-{}", n.get())
    };
    let report = block_on(store.fire_due(now, FIRE_PAGE, MAX_ATTEMPTS, &ids, None)).unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    while block_on(store.continue_fills(None)).unwrap().is_some() {}
}

#[test]
fn subjects_store_the_keys_they_hold_and_null_for_none() {
    let store = store();
    subjects_with_keys(&store);
    assert_eq!(
        texts(
            &store,
            "SELECT id || ' ' || coalesce(limits, 'NULL') FROM subjects ORDER BY id"
        ),
        [
            r#"s1 ["tenant:acme","github"]"#,
            "s2 NULL",
            r#"s3 ["github"]"#,
            r#"s4 ["off"]"#,
            r#"s5 ["tenant:bolt"]"#,
        ]
    );
    // A subject written again holds what it holds now.
    block_on(store.upsert_subjects(&[keyed_subject("s1", "g", &[])], 2)).unwrap();
    assert_eq!(
        texts(
            &store,
            "SELECT coalesce(limits, 'NULL') FROM subjects WHERE id = 's1'"
        ),
        ["NULL"]
    );
}

#[test]
fn a_fill_of_one_group_copies_each_subjects_keys_on_every_page() {
    let store = store();
    subjects_with_keys(&store);
    put_and_fire(
        &store,
        "hourly",
        json!({"every_seconds": 3600, "group": "g"}),
        3_600_000,
    );
    assert_eq!(
        item_keys(&store, "hourly-1"),
        held(&[
            ("s1", Some(r#"["tenant:acme","github"]"#)),
            ("s2", None),
            ("s3", Some(r#"["github"]"#)),
        ])
    );
}

#[test]
fn a_fill_of_every_group_copies_each_subjects_keys_on_every_page() {
    let store = store();
    subjects_with_keys(&store);
    block_on(store.create_batch("b1", "all", 0, MAX_ATTEMPTS, BatchSource::ActiveSubjects))
        .unwrap();
    while block_on(store.continue_fills(None)).unwrap().is_some() {}
    let want = held(&[
        ("s1", Some(r#"["tenant:acme","github"]"#)),
        ("s2", None),
        ("s3", Some(r#"["github"]"#)),
        ("s5", Some(r#"["tenant:bolt"]"#)),
    ]);
    assert_eq!(item_keys(&store, "b1"), want);
    // A schedule over every group fills through the same statement.
    put_and_fire(&store, "all", json!({"every_seconds": 3600}), 3_600_000);
    assert_eq!(item_keys(&store, "all-1"), want);
}

#[test]
fn an_item_keeps_the_keys_it_was_enqueued_with() {
    let store = store();
    subjects_with_keys(&store);
    block_on(store.create_batch("b1", "all", 0, MAX_ATTEMPTS, BatchSource::ActiveSubjects))
        .unwrap();
    while block_on(store.continue_fills(None)).unwrap().is_some() {}
    // Like the payload: a subject written since changes the next batch only.
    block_on(store.upsert_subjects(&[keyed_subject("s1", "g", &["new"])], 2)).unwrap();
    assert_eq!(
        item_keys(&store, "b1")[0],
        (
            "s1".to_string(),
            Some(r#"["tenant:acme","github"]"#.to_string())
        )
    );
}

#[test]
fn explicit_items_store_their_keys_and_null_for_none() {
    let store = store();
    let item = |id: &str, held: &[&str]| ItemInput {
        keys: keys(held),
        ..items_of(1, |_| id.to_string(), "noop", &json!({})).remove(0)
    };
    // More than one statement's worth, so every chunk carries its keys.
    let mut items: Vec<ItemInput> = (0..ITEMS_PER_STATEMENT + 1)
        .map(|i| item(&format!("x{i:04}"), &["bulk"]))
        .collect();
    items.push(item("a", &["tenant:acme", "github", "github:acme"]));
    items.push(item("b", &[]));
    block_on(store.create_batch("b1", "k1", 0, MAX_ATTEMPTS, BatchSource::Items(&items))).unwrap();
    let stored = item_keys(&store, "b1");
    assert_eq!(
        stored[..2],
        held(&[
            ("a", Some(r#"["tenant:acme","github","github:acme"]"#)),
            ("b", None),
        ])
    );
    assert!(
        stored[2..]
            .iter()
            .all(|(_, k)| k.as_deref() == Some(r#"["bulk"]"#)),
        "every chunk's items hold their keys"
    );
}

#[test]
fn a_completion_callback_holds_only_the_host_key_of_its_url() {
    let store = store();
    let items = vec![ItemInput {
        keys: keys(&["github"]),
        ..items_of(1, |_| "a".into(), "noop", &json!({})).remove(0)
    }];
    let options = BatchOptions {
        on_finish: Some(r#"{"url":"https://example.com/done"}"#),
        priority: 0,
    };
    block_on(store.create_batch_with(
        "b1",
        "k1",
        0,
        MAX_ATTEMPTS,
        BatchSource::Items(&items),
        options,
    ))
    .unwrap();
    let claimed = claim(&store, 1, 10, "t");
    block_on(store.commit_outcomes(&settle_all(
        &claimed,
        cron_fanout::core::model::Outcome::Done,
        2,
    )))
    .unwrap();
    tail(&store, 3);
    assert_eq!(
        texts(
            &store,
            "SELECT kind || ' ' || coalesce(limits, 'NULL') FROM cron_queue ORDER BY id"
        ),
        [r#"noop ["github"]"#, r#"callback ["host:example.com"]"#]
    );
}

#[test]
fn a_batch_stores_its_priority_and_a_schedules_batch_gets_the_schedules() {
    let store = store();
    subjects_with_keys(&store);
    let options = BatchOptions {
        on_finish: None,
        priority: -4,
    };
    block_on(store.create_batch_with(
        "b1",
        "k1",
        0,
        MAX_ATTEMPTS,
        BatchSource::ActiveSubjects,
        options,
    ))
    .unwrap();
    put_and_fire(
        &store,
        "urgent",
        json!({"every_seconds": 3600, "priority": 7}),
        3_600_000,
    );
    put_and_fire(&store, "plain", json!({"every_seconds": 3600}), 3_600_000);
    assert_eq!(
        texts(
            &store,
            "SELECT id || ' ' || priority FROM batches ORDER BY id"
        ),
        ["b1 -4", "plain-1 0", "urgent-1 7"]
    );
    // Read back as the API reads it.
    let row = block_on(store.get_batch("urgent-1")).unwrap().unwrap();
    assert_eq!(row.priority, 7);
    let listed = block_on(store.list_batches(10)).unwrap();
    let mut priorities: Vec<(String, i64)> =
        listed.into_iter().map(|b| (b.id, b.priority)).collect();
    priorities.sort();
    assert_eq!(
        priorities,
        [
            ("b1".to_string(), -4),
            ("plain-1".to_string(), 0),
            ("urgent-1".to_string(), 7)
        ]
    );
}
