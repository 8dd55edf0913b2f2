//! A batch's items without a (batch_id, subject_id) index (migration 0017): each
//! insert records its id range on the batch, ids are in subject order within a
//! batch, and what read the index now reads the ranges: totals, listings (binary
//! search, then a walk by primary key), retention. On real SQLite with the D1
//! migrations, through the same `Store` code.

mod common;

use cron_fanout::core::listing::ITEMS_WALKED_PER_PAGE;
use cron_fanout::core::model::{ItemStatus, Outcome};
use cron_fanout::core::upkeep::{Retention, Upkeep};
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{BatchSource, Created, FillPages, Param, Store};
use futures::executor::block_on;
use serde_json::{json, Value};

use common::*;

/// A store filling batches 7 subjects a page, 2 pages a call, one call at creation.
fn small_pages() -> Store<SqliteDb> {
    setup().with_fill(FillPages {
        page: 7,
        pages_per_call: 2,
        create_calls: 1,
        ..FillPages::default()
    })
}

fn add_subjects(store: &Store<SqliteDb>, ids: &[String]) {
    let subjects: Vec<_> = ids.iter().map(|id| subject(id, true)).collect();
    block_on(store.upsert_subjects(&subjects, 1)).unwrap();
}

fn ranges_of(store: &Store<SqliteDb>, batch: &str) -> Vec<(i64, i64)> {
    let json: Option<String> = store
        .db()
        .conn()
        .query_row(
            "SELECT item_ranges FROM batches WHERE id = ?1",
            [batch],
            |r| r.get(0),
        )
        .unwrap();
    let ranges: Vec<(i64, i64)> = json
        .map(|j| serde_json::from_str(&j).unwrap())
        .unwrap_or_default();
    ranges
}

/// The batch's item ids as the table holds them, in id order (a scan: tests only).
fn item_ids(store: &Store<SqliteDb>, batch: &str) -> Vec<i64> {
    let conn = store.db().conn();
    let mut stmt = conn
        .prepare("SELECT id FROM cron_queue WHERE batch_id = ?1 AND kind <> 'callback' ORDER BY id")
        .unwrap();
    let ids: Vec<i64> = stmt
        .query_map([batch], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    ids
}

/// Every page of the listing, `limit` at a time, as the API pages it: the next
/// page starts at the page's `next_after`, until it has none.
fn list_all(
    store: &Store<SqliteDb>,
    batch: &str,
    status: Option<ItemStatus>,
    limit: i64,
) -> Vec<String> {
    let (mut after, mut all) = (String::new(), Vec::new());
    loop {
        let page = block_on(store.list_batch_items(batch, &after, status, limit)).unwrap();
        all.extend(page.items.iter().map(|i| i.subject_id.clone()));
        match page.next_after {
            Some(next) => after = next,
            None => return all,
        }
    }
}

/// Continues fills, a call at a time, until no batch is filling.
fn fill_all(store: &Store<SqliteDb>) {
    while block_on(store.continue_fills(None))
        .unwrap()
        .is_some_and(|s| s.filling != 0)
    {}
}

/// Batch `b-<key>` of no-op items for `subjects`, in the order given.
fn explicit(store: &Store<SqliteDb>, key: &str, subjects: &[&str]) -> String {
    let items = items_of(
        subjects.len(),
        |i| subjects[i].to_string(),
        "noop",
        &json!({}),
    );
    let id = format!("b-{key}");
    match block_on(store.create_batch(&id, key, 0, 3, BatchSource::Items(&items))).unwrap() {
        Created::New(row) => row.id,
        Created::Existing(_) => panic!("{key} existed"),
    }
}

/// A fill spread over several calls, with other batches inserted between them:
/// each call's pages make one range, the ranges hold exactly the batch's items,
/// the total is exact, and ids are in subject order across the ranges.
#[test]
fn a_fill_between_other_inserts_records_exact_ranges_in_subject_order() {
    let store = small_pages();
    let ids: Vec<String> = (0..50).map(|i| format!("s{i:03}")).collect();
    add_subjects(&store, &ids);
    let created =
        block_on(store.create_batch("b-fill", "fill", 0, 3, BatchSource::ActiveSubjects)).unwrap();
    let Created::New(row) = created else {
        panic!("new batch")
    };
    assert_eq!(row.total, 14, "2 pages of 7 in the first call");
    // Other batches' items land between the fill's calls.
    explicit(&store, "between-1", &["z", "a", "m"]);
    assert!(block_on(store.continue_fills(None)).unwrap().is_some());
    explicit(&store, "between-2", &["q"]);
    fill_all(&store);
    let row = block_on(store.get_batch("b-fill")).unwrap().unwrap();
    assert_eq!((row.total, row.filling), (50, 0));

    let ranges = ranges_of(&store, "b-fill");
    let in_ranges: Vec<i64> = ranges.iter().flat_map(|&(lo, hi)| lo..=hi).collect();
    assert_eq!(in_ranges, item_ids(&store, "b-fill"), "exactly its items");
    let sizes: Vec<i64> = ranges.iter().map(|&(lo, hi)| hi - lo + 1).collect();
    assert_eq!(
        sizes,
        [14, 14, 22],
        "split where other batches were inserted; calls that follow each other merge"
    );
    let subjects_by_id = texts(
        &store,
        "SELECT subject_id FROM cron_queue WHERE batch_id = 'b-fill' ORDER BY id",
    );
    assert_eq!(subjects_by_id, ids, "id order is subject order");
    // An explicit list, given unsorted, is stored sorted as one range.
    let between = item_ids(&store, "b-between-1");
    assert_eq!(ranges_of(&store, "b-between-1"), [(between[0], between[2])]);
    assert_eq!(
        texts(
            &store,
            "SELECT subject_id FROM cron_queue WHERE batch_id = 'b-between-1' ORDER BY id"
        ),
        ["a", "m", "z"]
    );
    let between = block_on(store.get_batch("b-between-1")).unwrap().unwrap();
    assert_eq!(between.total, 3);
}

/// Every page of every listing, for every size and starting point, is the
/// batch's subjects in order: binary search and walk agree with a sort.
#[test]
fn listings_page_through_the_ranges_in_subject_order() {
    let store = small_pages();
    let ids: Vec<String> = (0..40).map(|i| format!("s{:03}", i * 3)).collect();
    add_subjects(&store, &ids);
    block_on(store.create_batch("b-fill", "fill", 0, 3, BatchSource::ActiveSubjects)).unwrap();
    explicit(&store, "other", &["s001", "s050", "zz"]);
    fill_all(&store);
    assert!(ranges_of(&store, "b-fill").len() > 1);

    for limit in [1, 2, 5, 13, 40, 100] {
        assert_eq!(
            list_all(&store, "b-fill", None, limit),
            ids,
            "limit {limit}"
        );
    }
    // From any `after`: a subject of the batch, one between two, one before all,
    // one after all, another batch's.
    let mut afters: Vec<String> = ids.clone();
    afters.extend(["", "s001", "s004", "a", "zzz", "s050"].map(String::from));
    for after in &afters {
        let page = block_on(store.list_batch_items("b-fill", after, None, 6))
            .unwrap()
            .items;
        let got: Vec<&str> = page.iter().map(|i| i.subject_id.as_str()).collect();
        let want: Vec<&str> = ids
            .iter()
            .filter(|s| s.as_str() > after.as_str())
            .take(6)
            .map(String::as_str)
            .collect();
        assert_eq!(got, want, "after {after:?}");
    }

    // A status filter walks on until the page is full.
    let claimed = claim(&store, 0, 100, "t");
    let done: Vec<_> = claimed
        .iter()
        .filter(|i| i.batch_id == "b-fill" && i.subject_id.as_str() >= "s060")
        .collect();
    assert!(!done.is_empty());
    let settled = settle_all(done.iter().copied(), Outcome::Done, 1);
    block_on(store.commit_outcomes(&settled)).unwrap();
    let mut completed: Vec<String> = done.iter().map(|i| i.subject_id.clone()).collect();
    completed.sort();
    assert_eq!(
        list_all(&store, "b-fill", Some(ItemStatus::Completed), 4),
        completed
    );
    assert_eq!(
        list_all(&store, "b-fill", Some(ItemStatus::Processing), 7).len(),
        40 - completed.len()
    );
    assert!(list_all(&store, "missing", None, 10).is_empty());
}

/// A page costs a binary search and the rows it walks: listing far into a big
/// batch costs about what its first page does, not the rows before it.
#[test]
fn a_listing_reads_the_same_wherever_its_page_starts() {
    let store = setup();
    let items = items_of(4_000, |i| format!("u{i:05}"), "noop", &json!({}));
    block_on(store.create_batch("b-big", "big", 0, 3, BatchSource::Items(&items))).unwrap();
    let steps = |after: &str| {
        let params: Vec<Param> = vec![
            "b-big".into(),
            after.into(),
            Param::Null,
            20.into(),
            ITEMS_WALKED_PER_PAGE.into(),
        ];
        vm_steps(&store, cron_fanout::sql::LIST_BATCH_ITEMS, &params)
    };
    let (first, middle, late) = (steps(""), steps("u02000"), steps("u03950"));
    for s in [middle, late] {
        assert!(
            (s - first).abs() * 4 < first,
            "{first} vs {s}: the work depends on where the page starts"
        );
    }
    // A scan of the batch would take several steps per row.
    assert!(late < 4_000, "{late} steps for a page of 20 of 4,000 items");
}

/// Retention deletes an expired batch's items through its ranges (and its
/// callback row), leaving a batch whose ids are interleaved with it alone.
#[test]
fn retention_deletes_a_batch_through_its_ranges_only() {
    let store = small_pages();
    let ids: Vec<String> = (0..30).map(|i| format!("s{i:03}")).collect();
    add_subjects(&store, &ids);
    block_on(store.create_batch("b-old", "old", 0, 3, BatchSource::ActiveSubjects)).unwrap();
    explicit(&store, "kept", &["k1", "k2"]);
    fill_all(&store);
    let kept_ids = item_ids(&store, "b-kept");
    let old_ranges = ranges_of(&store, "b-old");
    assert!(old_ranges[0].1 < kept_ids[0] && kept_ids[1] < old_ranges[1].0);
    store
        .db()
        .conn()
        .execute_batch(
            "UPDATE cron_queue SET status = 'completed' WHERE batch_id = 'b-old';
             UPDATE batches SET status = 'finished', finished_at = 10, completed = 30
               WHERE id = 'b-old';",
        )
        .unwrap();
    let upkeep = Upkeep {
        cancel_page: 10,
        retention: Some(Retention {
            cutoff: 1_000,
            items: 12,
            batches: 5,
            invocations: 5,
        }),
    };
    let mut ticks = 0;
    while block_on(store.get_batch("b-old")).unwrap().is_some() {
        block_on(store.finish_tick(1_000, &upkeep)).unwrap();
        ticks += 1;
        assert!(ticks <= 4, "30 items at 12 a tick");
    }
    assert_eq!(ticks, 3);
    assert!(item_ids(&store, "b-old").is_empty());
    assert_eq!(item_ids(&store, "b-kept"), kept_ids);
    assert_eq!(list_all(&store, "b-kept", None, 10), ["k1", "k2"]);
}

/// Creating a batch again under its key adds nothing, with no unique index on
/// the items to ignore a second copy: the statements act on the fresh id only.
#[test]
fn a_second_create_under_the_same_key_inserts_nothing() {
    let store = small_pages();
    let ids: Vec<String> = (0..10).map(|i| format!("s{i:03}")).collect();
    add_subjects(&store, &ids);
    block_on(store.create_batch("b-1", "same", 0, 3, BatchSource::ActiveSubjects)).unwrap();
    let again =
        block_on(store.create_batch("b-2", "same", 0, 3, BatchSource::ActiveSubjects)).unwrap();
    assert!(matches!(again, Created::Existing(ref row) if row.id == "b-1"));
    let items = items_of(3, |i| format!("x{i}"), "noop", &json!({}));
    let again =
        block_on(store.create_batch("b-3", "same", 0, 3, BatchSource::Items(&items))).unwrap();
    assert!(matches!(again, Created::Existing(_)));
    assert_eq!(count(&store, "SELECT count(*) FROM cron_queue"), 10);
    let batch: Value =
        serde_json::from_str(&texts(&store, "SELECT item_ranges FROM batches WHERE id = 'b-1'")[0])
            .unwrap();
    assert_eq!(batch, json!([[1, 10]]));
}

/// A fresh id another batch holds fails the create, which writes nothing: no item
/// joins that batch, its total and ranges stay, and the caller may draw another
/// id. So does the id of the key's own batch (an ad-hoc key is named after its
/// batch's id). A key that exists under another id is still no error, and adds
/// nothing.
#[test]
fn a_create_whose_id_another_batch_holds_fails_and_writes_nothing() {
    let store = small_pages();
    let ids: Vec<String> = (0..10).map(|i| format!("s{i:03}")).collect();
    add_subjects(&store, &ids);
    let one = explicit(&store, "one", &["a", "b"]);
    let batches = "SELECT json_array(id, key, total, item_ranges, page_mark, cursor_end, fill)
                   FROM batches ORDER BY id";
    let before = (
        texts(&store, batches),
        texts(&store, "SELECT CAST(id AS TEXT) FROM cron_queue"),
    );
    let items = items_of(3, |i| format!("x{i}"), "noop", &json!({}));
    for (key, source) in [
        ("two", BatchSource::Items(&items)),
        ("two", BatchSource::ActiveSubjects),
        ("one", BatchSource::Items(&items)),
    ] {
        let err = block_on(store.create_batch(&one, key, 5, 3, source)).unwrap_err();
        assert!(err.is_batch_id_taken(), "{key}: {err}");
    }
    let after = (
        texts(&store, batches),
        texts(&store, "SELECT CAST(id AS TEXT) FROM cron_queue"),
    );
    assert_eq!(after, before);
    let again =
        block_on(store.create_batch("b-fresh", "one", 5, 3, BatchSource::Items(&items))).unwrap();
    assert!(matches!(again, Created::Existing(ref row) if row.id == one));
    let after = (
        texts(&store, batches),
        texts(&store, "SELECT CAST(id AS TEXT) FROM cron_queue"),
    );
    assert_eq!(after, before);
}

/// AUTOINCREMENT skips the ids of rows deleted at the top of the table, so a
/// page's first id is the first id above its mark, not the mark + 1: totals and
/// ranges hold only the batch's own items after such a delete.
#[test]
fn pages_after_deleted_top_rows_count_only_their_own_items() {
    let store = small_pages();
    explicit(&store, "first", &["a", "b", "c"]);
    store
        .db()
        .conn()
        .execute_batch("DELETE FROM cron_queue WHERE id IN (2, 3)")
        .unwrap();
    let second = explicit(&store, "second", &["x", "y"]);
    assert_eq!(
        block_on(store.get_batch(&second)).unwrap().unwrap().total,
        2
    );
    assert_eq!(ranges_of(&store, &second), [(4, 5)]);
    store
        .db()
        .conn()
        .execute_batch("DELETE FROM cron_queue WHERE id = 5")
        .unwrap();
    let ids: Vec<String> = (0..10).map(|i| format!("s{i:03}")).collect();
    add_subjects(&store, &ids);
    block_on(store.create_batch("b-fill", "fill", 0, 3, BatchSource::ActiveSubjects)).unwrap();
    let fill = block_on(store.get_batch("b-fill")).unwrap().unwrap();
    assert_eq!((fill.total, fill.filling), (10, 0));
    assert_eq!(ranges_of(&store, "b-fill"), [(6, 15)]);
    assert_eq!(list_all(&store, "b-fill", None, 4), ids);
}

/// Explicit batch `b-<key>` of `n` no-op items `u00000`…, all completed but the
/// `pending` ones (by index).
fn completed_but(store: &Store<SqliteDb>, key: &str, n: usize, pending: &[usize]) -> String {
    let items = items_of(n, |i| format!("u{i:05}"), "noop", &json!({}));
    let id = format!("b-{key}");
    block_on(store.create_batch(&id, key, 0, 3, BatchSource::Items(&items))).unwrap();
    let pending: Vec<String> = pending.iter().map(|i| format!("'u{i:05}'")).collect();
    store
        .db()
        .conn()
        .execute_batch(&format!(
            "UPDATE cron_queue SET status = CASE WHEN subject_id IN ({}) THEN 'pending'
                                                ELSE 'completed' END
             WHERE batch_id = '{id}'",
            pending.join(", ")
        ))
        .unwrap();
    id
}

/// The subjects of a batch's items of `status`, by a scan (tests only).
fn scanned(store: &Store<SqliteDb>, batch: &str, status: &str) -> Vec<String> {
    texts(
        store,
        &format!(
            "SELECT subject_id FROM cron_queue
             WHERE batch_id = '{batch}' AND status = '{status}' AND kind <> 'callback'
             ORDER BY subject_id"
        ),
    )
}

/// A page of a status no item has stops walking the batch after
/// `ITEMS_WALKED_PER_PAGE` rows: no items, and the row it stopped on as the next
/// page's start; the next page walks the rest and ends the listing.
#[test]
fn a_page_of_a_status_no_item_has_stops_at_the_walk_bound_with_a_continuation() {
    let store = setup();
    let n = ITEMS_WALKED_PER_PAGE as usize + 2_000;
    let batch = completed_but(&store, "big", n, &[]);
    let page = block_on(store.list_batch_items(&batch, "", Some(ItemStatus::Pending), 20)).unwrap();
    assert!(page.items.is_empty());
    let stop = format!("u{:05}", ITEMS_WALKED_PER_PAGE - 1);
    assert_eq!(page.next_after.as_deref(), Some(stop.as_str()));
    let rest =
        block_on(store.list_batch_items(&batch, &stop, Some(ItemStatus::Pending), 20)).unwrap();
    assert!(rest.items.is_empty());
    assert_eq!(rest.next_after, None);
    // Listing every item still fills each page.
    let page = block_on(store.list_batch_items(&batch, "", None, 1_000)).unwrap();
    assert_eq!(page.items.len(), 1_000);
    assert_eq!(page.next_after.as_deref(), Some("u00999"));
}

/// Following every continuation of a rare status lists exactly what a scan of the
/// batch finds, in order, once each: over id ranges, and over a batch whose rows
/// are partly stored before migration 0017 (legacy, walked in their own index,
/// their subjects between the ranges'), where both walks stop at the bound.
#[test]
fn every_continuation_of_a_rare_status_together_lists_what_a_scan_finds() {
    let store = setup();
    let n = 3 * ITEMS_WALKED_PER_PAGE as usize + 1_500;
    let pending: Vec<usize> = (0..n)
        .filter(|i| i % 997 == 3 || (12_000..12_030).contains(i))
        .chain([n - 1])
        .collect();
    let ranged = completed_but(&store, "ranged", n, &pending);
    let mixed = completed_but(&store, "mixed", n, &pending);
    // A third of `mixed`'s rows (blocks of 1,000 subjects) as a Worker before 0017
    // stored them: legacy, in no range; the ranges are the runs of the others.
    {
        let conn = store.db().conn();
        conn.execute_batch(
            "UPDATE cron_queue SET legacy = 1
             WHERE batch_id = 'b-mixed' AND CAST(substr(subject_id, 2) AS INTEGER) / 1000 % 3 = 1",
        )
        .unwrap();
        record_item_ranges(&conn);
    }
    assert!(ranges_of(&store, &mixed).len() > 10);
    for batch in [&ranged, &mixed] {
        let want = scanned(&store, batch, "pending");
        assert_eq!(want.len(), pending.len());
        for limit in [1, 7, 1_000] {
            assert_eq!(
                list_all(&store, batch, Some(ItemStatus::Pending), limit),
                want,
                "{batch}, {limit} a page"
            );
        }
        assert_eq!(
            list_all(&store, batch, None, 1_000),
            texts(
                &store,
                &format!("SELECT subject_id FROM cron_queue WHERE batch_id = '{batch}' ORDER BY subject_id")
            ),
            "{batch}: every item"
        );
    }
}
