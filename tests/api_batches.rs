//! `/batches` on the host: create (from subjects or items, idempotent by key),
//! list, progress, items, and the rate, ETA and timeline read from the invocation
//! summaries.

mod common;

use cron_fanout::core::listing::ITEMS_WALKED_PER_PAGE;
use cron_fanout::core::requests::ItemInput;
use cron_fanout::core::throughput::MAX_POINTS;
use cron_fanout::core::time::rfc3339;
use cron_fanout::store::BatchSource;
use futures::executor::block_on;
use serde_json::{json, Value};

use common::api::*;

// ---------------------------------------------------------------- batches

#[test]
fn create_batch_from_subjects_is_idempotent_by_key() {
    let host = setup();
    host.put_subjects(json!([subject("a"), subject("b"), {"id": "off", "kind": "noop", "payload": {}, "active": false}]));
    let body = json!({"key": "backfill", "source": "subjects"});
    let created = host.ok(POST, "/batches", Some(body.clone()), 201);
    assert_eq!(
        created,
        json!({"id": "batch-1", "key": "backfill", "status": "running", "total": 2,
               "pending": 2, "processing": 0, "completed": 0, "failed": 0, "cancelled": 0,
               "percent": 0.0, "filling": false, "rate_per_min": null, "eta": null,
               "created_at": "2026-11-18T11:06:40.123Z", "finished_at": null,
               "schedule_id": null, "priority": 0, "on_finish": null, "callback": null})
    );
    // A subject added since is not added to the existing batch: nothing is written.
    host.put_subjects(json!([subject("late")]));
    let before = host.fingerprint();
    let again = host.ok(POST, "/batches", Some(body), 200);
    assert_eq!(
        fields(&again, ["id", "total"]),
        [json!("batch-1"), json!(2)]
    );
    assert_eq!(host.fingerprint(), before);
    let events = host.events.borrow();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["batch_created", "batch_exists"]);
    assert_eq!(
        events[1].1,
        json!({"batch_id": "batch-1", "key": "backfill", "total": 2})
    );
}

#[test]
fn create_batch_from_items_uses_the_settings_and_a_default_key() {
    let host = setup();
    let created = host.create_batch(json!({"items": [item("x"), item("y")]}));
    assert_eq!(
        fields(&created, ["key", "total"]),
        [json!("adhoc:batch-1"), json!(2)]
    );
    let items = host.ok(GET, "/batches/batch-1/items", None, 200);
    let first = &items["items"][0];
    assert_eq!(first["max_attempts"], json!(MAX_ATTEMPTS));
    assert_eq!(first["run_after"], json!(rfc3339(NOW)));
    assert_eq!(
        fields(first, ["status", "attempt"]),
        [json!("pending"), json!(0)]
    );
}

/// The store's batch `id` of no-op items for `subjects`, under `key`.
fn stored_batch(host: &Host, id: &str, key: &str, subjects: &[&str]) {
    let items: Vec<ItemInput> = subjects
        .iter()
        .map(|s| ItemInput {
            subject_id: s.to_string(),
            kind: "noop".into(),
            payload: json!({}),
            limits: None,
            keys: Vec::new(),
        })
        .collect();
    block_on(
        host.store
            .create_batch(id, key, NOW, MAX_ATTEMPTS, BatchSource::Items(&items)),
    )
    .unwrap();
}

/// An id another batch holds is drawn again (the key named after it too): the
/// create answers 201 with a fresh id, and the other batch is left as it was.
#[test]
fn a_batch_id_another_batch_holds_is_drawn_again() {
    let host = setup();
    // The host's ids are batch-1, batch-2, …: the first two are taken.
    stored_batch(&host, "batch-1", "adhoc:batch-1", &["o1"]);
    stored_batch(&host, "batch-2", "other", &["o2"]);
    let before = host.fingerprint();
    let created = host.create_batch(json!({"items": [item("x"), item("y")]}));
    assert_eq!(
        fields(&created, ["id", "key", "total"]),
        [json!("batch-3"), json!("adhoc:batch-3"), json!(2)]
    );
    for (id, subject) in [("batch-1", "o1"), ("batch-2", "o2")] {
        let (subjects, _) = host.page(&format!("/batches/{id}/items"), "items", "subject_id");
        assert_eq!(subjects, [subject], "{id} keeps its one item");
    }
    // Every row but the id high-water mark is still there as it was.
    let after = host.fingerprint();
    let kept = |row: &&String| !row.starts_with("sqlite_sequence");
    assert!(
        before.iter().filter(kept).all(|row| after.contains(row)),
        "nothing else changed"
    );
}

/// Three ids in a row that other batches hold: the create gives up with a 500
/// that names no SQL, and writes nothing.
#[test]
fn a_create_gives_up_after_three_taken_ids_and_writes_nothing() {
    let host = setup();
    for n in 1..=3 {
        stored_batch(&host, &format!("batch-{n}"), &format!("k{n}"), &["o"]);
    }
    let before = host.fingerprint();
    let (status, body) = host.call(
        &admin(POST, "/batches"),
        json!({"key": "mine", "items": [item("x")]})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(status, 500, "{body}");
    assert!(!body.to_string().contains("UNIQUE"), "{body}");
    assert_eq!(host.fingerprint(), before);
    assert_eq!(host.ids.get(), 3, "three ids drawn");
}

#[test]
fn create_batch_refuses_every_bad_shape_without_writing() {
    let host = setup();
    host.put_subjects(json!([subject("a")]));
    let post = |body: Value, code: &str| host.bad(POST, "/batches", &body, code);
    post(json!({}), "invalid_batch");
    post(
        json!({"source": "subjects", "items": [item("a")]}),
        "invalid_batch",
    );
    post(json!({"source": "users"}), "invalid_source");
    post(json!({"items": []}), "empty");
    post(
        json!({"key": "daily:2026-11-18", "source": "subjects"}),
        "reserved_key",
    );
    post(json!({"key": "", "source": "subjects"}), "invalid_id");
    post(json!({"items": [item("a"), item("")]}), "invalid_id");
    post(json!({"items": [item("a"), item("a")]}), "duplicate_id");
    post(
        json!({"items": [item("a"), {"subject_id": "b", "kind": "email", "payload": {}}]}),
        "invalid_payload",
    );
    host.refused(
        &admin(POST, "/batches?key=x"),
        br#"{"source": "subjects"}"#,
        400,
        "invalid_query",
    );
}

#[test]
fn create_batch_refuses_keys_that_belong_to_a_schedule() {
    let host = setup();
    host.ok(
        PUT,
        "/schedules/digest",
        Some(json!({"cron": "0 9 * * *"})),
        201,
    );
    let post = |key: &str| json!({"key": key, "items": [item("a")]});
    let message = host.bad(POST, "/batches", &post("digest:2026-11-18"), "reserved_key");
    assert!(message.contains("\"digest:\""), "{message}");
    // daily: is reserved even without the `daily` schedule.
    host.ok(DELETE, "/schedules/daily", None, 200);
    host.bad(POST, "/batches", &post("daily:2026-11-18"), "reserved_key");
    // Only the prefix up to the first ':' names a schedule.
    host.create_batch(post("digest"));
    host.create_batch(post("digest-x:1"));
    host.create_batch(post("other:digest:1"));
    // Once the schedule is gone its prefix is free again.
    host.ok(DELETE, "/schedules/digest", None, 200);
    host.create_batch(post("digest:adhoc"));
}

#[test]
fn list_batches_is_newest_first_and_not_paged_by_after() {
    let host = setup();
    for key in ["k1", "k2", "k3"] {
        host.now.set(host.now.get() + 1);
        host.create_batch(json!({"key": key, "items": [item("x")]}));
    }
    let got = host.ok(GET, "/batches?limit=2", None, 200);
    assert_eq!(column(&got, "batches", "key"), ["k3", "k2"]);
    host.get_refused("/batches?after=k1", 400, "invalid_query");
    host.get_refused("/batches?limit=0", 400, "invalid_query");
    host.get_refused("/batches?status=failed", 400, "invalid_query");
}

#[test]
fn get_batch_answers_progress_or_404() {
    let host = setup();
    host.create_batch(json!({"key": "k", "items": [item("x")]}));
    let got = host.ok(GET, "/batches/batch-1", None, 200);
    assert_eq!(
        fields(&got, ["key", "pending", "percent"]),
        [json!("k"), json!(1), json!(0.0)]
    );
    host.get_refused("/batches/none", 404, "not_found");
    host.get_refused("/batches/batch-1?verbose=1", 400, "invalid_query");
}

#[test]
fn list_items_filters_by_status_and_pages_by_subject() {
    let host = setup();
    host.create_batch(json!({"items": [item("c"), item("a"), item("b")]}));
    host.store
        .db()
        .conn()
        .execute(
            "UPDATE cron_queue SET status = 'failed', last_error = 'boom' WHERE subject_id = 'b'",
            [],
        )
        .unwrap();
    host.assert_pages(
        "items",
        "subject_id",
        &[
            ("/batches/batch-1/items?limit=2", &["a", "b"], json!("b")),
            ("/batches/batch-1/items?after=b", &["c"], Value::Null),
            ("/batches/batch-1/items?status=failed", &["b"], Value::Null),
        ],
    );
    let failed = host.ok(GET, "/batches/batch-1/items?status=failed", None, 200);
    assert_eq!(failed["items"][0]["last_error"], json!("boom"));
    host.get_refused("/batches/none/items", 404, "not_found");
    for bad in ["status=done", "limit=1001", "page=2"] {
        host.get_refused(
            &format!("/batches/batch-1/items?{bad}"),
            400,
            "invalid_query",
        );
    }
}

/// A page of a status few items have stops walking a big batch after
/// `ITEMS_WALKED_PER_PAGE` rows: it answers the items it found (none here) and a
/// `next_after` to go on from, until the listing ends.
#[test]
fn a_listing_by_a_rare_status_answers_a_continuation_where_it_stopped_walking() {
    let host = setup();
    let n = ITEMS_WALKED_PER_PAGE as usize + 10;
    let subjects: Vec<String> = (0..n).map(|i| format!("u{i:05}")).collect();
    let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
    stored_batch(&host, "big", "big", &subjects);
    host.store
        .db()
        .conn()
        .execute(
            "UPDATE cron_queue SET status = CASE subject_id WHEN ?1 THEN 'pending'
                                                         ELSE 'completed' END",
            [subjects[n - 5]],
        )
        .unwrap();
    let stop = subjects[ITEMS_WALKED_PER_PAGE as usize - 1];
    host.assert_pages(
        "items",
        "subject_id",
        &[
            (
                "/batches/big/items?status=pending&limit=5",
                &[],
                json!(stop),
            ),
            (
                &format!("/batches/big/items?status=pending&limit=5&after={stop}"),
                &[subjects[n - 5]],
                Value::Null,
            ),
        ],
    );
}

// ---------------------------------------------------------------- rate, ETA, timeline

#[test]
fn a_running_batch_has_a_rate_and_eta_from_recent_summaries() {
    let host = setup();
    // The batch was created 10 minutes ago; in the last 5 minutes the summaries
    // ended 3 of its items (and 7 of another batch's), earlier ones 2 more.
    batch_under_way(&host, 10, 600_000, 5);
    host.invocation(400_000, &[("batch-1", 2, 0)]);
    host.invocation(200_000, &[("batch-1", 2, 1), ("other", 7, 0)]);
    host.invocation(60_000, &[("other", 1, 0)]);
    let got = host.ok(GET, "/batches/batch-1", None, 200);
    // 3 in 5 minutes: 0.6 a minute; 5 left: 500 s from now.
    assert_eq!(got["rate_per_min"], json!(0.6));
    assert_eq!(got["eta"], json!(rfc3339(NOW + 600_000 + 500_000)));
    let listed = host.ok(GET, "/batches", None, 200);
    assert_eq!(listed["batches"][0]["rate_per_min"], json!(0.6));
    assert_eq!(listed["batches"][0]["eta"], got["eta"]);
}

#[test]
fn rate_and_eta_are_null_when_unknown() {
    let host = setup();
    host.create_batch(json!({"items": [item("x")]}));
    // Just created: no span to measure a rate over.
    let got = host.ok(GET, "/batches/batch-1", None, 200);
    assert_eq!(
        fields(&got, ["rate_per_min", "eta"]),
        [json!(null), json!(null)]
    );
    // Running for a minute with nothing ended: a rate of zero, no ETA.
    host.now.set(NOW + 60_000);
    let got = host.ok(GET, "/batches/batch-1", None, 200);
    assert_eq!(
        fields(&got, ["rate_per_min", "eta"]),
        [json!(0.0), json!(null)]
    );
    // Finished: neither.
    host.store
        .db()
        .conn()
        .execute(
            "UPDATE batches SET status = 'finished', finished_at = ?1",
            [NOW],
        )
        .unwrap();
    let got = host.ok(GET, "/batches/batch-1", None, 200);
    assert_eq!(
        fields(&got, ["rate_per_min", "eta"]),
        [json!(null), json!(null)]
    );
}

#[test]
fn the_timeline_sums_summaries_per_bucket_within_the_batch_life() {
    let host = setup();
    host.create_batch(json!({"items": [item("x")]}));
    // Before the batch: never counted, even under its id.
    host.invocation(30_000, &[("batch-1", 99, 0)]);
    host.now.set(NOW + 180_000);
    // NOW is 40.123 s into its minute: buckets start on whole minutes.
    let minute = |n: i64| NOW - 40_123 + n * 60_000;
    host.invocation(180_000 - 30_000, &[("batch-1", 4, 1)]); // NOW + 30 s: minute 1
    host.invocation(180_000 - 50_000, &[("batch-1", 2, 0), ("other", 5, 5)]); // minute 1
    host.invocation(180_000 - 130_000, &[("other", 8, 0)]); // minute 2, other batch
    host.invocation(180_000 - 170_000, &[("batch-1", 6, 2)]); // minute 3
    let got = host.ok(GET, "/batches/batch-1/timeline", None, 200);
    assert_eq!(got["batch_id"], json!("batch-1"));
    assert_eq!(got["bucket_seconds"], json!(60));
    assert_eq!(got["from"], json!(rfc3339(minute(0))));
    assert_eq!(got["to"], json!(rfc3339(NOW + 180_000)));
    assert_eq!(
        got["points"],
        json!([
            {"at": rfc3339(minute(1)), "completed": 6, "failed": 1},
            {"at": rfc3339(minute(3)), "completed": 6, "failed": 2},
        ])
    );
    // Finer buckets split the first minute; `since` answers only from its bucket.
    let fine = host.ok(
        GET,
        "/batches/batch-1/timeline?bucket_seconds=10",
        None,
        200,
    );
    assert_eq!(column(&fine, "points", "completed").len(), 3);
    let since = rfc3339(minute(2));
    let recent = host.ok(
        GET,
        &format!("/batches/batch-1/timeline?since={since}"),
        None,
        200,
    );
    assert_eq!(
        recent["points"],
        json!([{"at": rfc3339(minute(3)), "completed": 6, "failed": 2}])
    );
}

/// More buckets with data than an answer carries: the newest are kept (the
/// chart's right edge, what a refreshing client asks for), the oldest dropped.
#[test]
fn a_timeline_with_more_buckets_than_it_carries_keeps_the_newest() {
    let host = setup();
    host.create_batch(json!({"items": [item("x")]}));
    let n = MAX_POINTS + 5;
    // NOW is 0.123 s into its 10 s bucket; invocation k ends 1.9 s after the
    // start of bucket k.
    let bucket = |k: i64| NOW - 123 + k * 10_000;
    host.now.set(bucket(n) + 5_000);
    for k in 0..n {
        let ago = host.now.get() - (bucket(k) + 1_000);
        host.invocation(ago, &[("batch-1", k + 1, 0)]);
    }
    let got = host.ok(
        GET,
        "/batches/batch-1/timeline?bucket_seconds=10",
        None,
        200,
    );
    let points = got["points"].as_array().unwrap();
    assert_eq!(points.len() as i64, MAX_POINTS);
    assert_eq!(
        points[0],
        json!({"at": rfc3339(bucket(5)), "completed": 6, "failed": 0})
    );
    assert_eq!(
        points[points.len() - 1],
        json!({"at": rfc3339(bucket(n - 1)), "completed": n, "failed": 0})
    );
    assert_eq!(got["from"], json!(rfc3339(bucket(0))));
}

#[test]
fn the_timeline_refuses_bad_queries_and_unknown_batches() {
    let host = setup();
    host.create_batch(json!({"items": [item("x")]}));
    for bad in [
        "bucket_seconds=5",
        "bucket_seconds=3601",
        "bucket_seconds=x",
        "since=yesterday",
        "limit=10",
    ] {
        let m = host.get_refused(
            &format!("/batches/batch-1/timeline?{bad}"),
            400,
            "invalid_query",
        );
        assert!(!m.is_empty());
    }
    host.get_refused("/batches/none/timeline", 404, "not_found");
    let empty = host.ok(GET, "/batches/batch-1/timeline", None, 200);
    assert_eq!(empty["points"], json!([]));
}

// ---------------------------------------------------------------- limit keys and priority

#[test]
fn explicit_items_hold_their_limit_keys_and_the_listing_shows_them() {
    let host = setup_with_github_calls();
    host.create_batch(json!({"items": [
        {"subject_id": "a", "kind": "noop", "payload": {}, "limits": ["tenant:acme"]},
        {"subject_id": "b", "kind": "github_calls", "payload": {"account": "bolt"},
         "limits": ["tenant:bolt", "github"]},
        item("c"),
    ]}));
    let items = host.ok(GET, "/batches/batch-1/items", None, 200);
    assert_eq!(column(&items, "items", "subject_id"), ["a", "b", "c"]);
    let limits: Vec<&Value> = items["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["limits"])
        .collect();
    assert_eq!(
        limits,
        [
            &json!(["tenant:acme"]),
            &json!(["tenant:bolt", "github", "github:bolt"]),
            &json!([]),
        ]
    );
}

#[test]
fn bad_limits_on_an_item_are_refused_writing_nothing() {
    let host = setup_with_github_calls();
    let with = |limits: Value| {
        let mut bad = item("b");
        bad["limits"] = limits;
        json!({"items": [item("a"), bad]})
    };
    for limits in [
        json!(["a", "b", "c", "d", "e"]),
        json!(["github", "github"]),
        json!(["a/b"]),
        json!(["tenant:*"]),
        json!([null]),
        json!(5),
    ] {
        let message = host.bad(POST, "/batches", &with(limits.clone()), "invalid_limits");
        assert!(
            message.starts_with("items[1].limits"),
            "{limits}: {message}"
        );
    }
    let kinds_bad_key = json!({"items": [
        {"subject_id": "a", "kind": "github_calls", "payload": {"account": "ok"}},
        {"subject_id": "b", "kind": "github_calls", "payload": {"account": "not/ok"}},
    ]});
    host.bad(POST, "/batches", &kinds_bad_key, "invalid_limits");
    assert_eq!(host.count("batches"), 0);
}

#[test]
fn a_batch_has_a_priority_that_get_and_list_show() {
    let host = setup();
    host.put_subjects(json!([subject("a")]));
    let urgent = host.create_batch(json!({"key": "urgent", "items": [item("x")], "priority": 10}));
    assert_eq!(urgent["priority"], json!(10));
    let low = host.create_batch(json!({"key": "low", "source": "subjects", "priority": -10}));
    assert_eq!(low["priority"], json!(-10));
    let plain = host.create_batch(json!({"key": "plain", "items": [item("x")], "priority": null}));
    assert_eq!(plain["priority"], json!(0), "null: the default");
    assert_eq!(batch_json(&host, "batch-1")["priority"], json!(10));
    let listed = host.ok(GET, "/batches", None, 200);
    let by_key: Vec<(String, Value)> = listed["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["key"].as_str().unwrap().to_string(),
                b["priority"].clone(),
            )
        })
        .collect();
    assert_eq!(
        by_key,
        [
            ("plain".to_string(), json!(0)),
            ("low".to_string(), json!(-10)),
            ("urgent".to_string(), json!(10)),
        ]
    );
    // The existing batch of a key keeps its own.
    let again = host.ok(
        POST,
        "/batches",
        Some(json!({"key": "urgent", "items": [item("x")], "priority": 1})),
        200,
    );
    assert_eq!(again["priority"], json!(10));
}

#[test]
fn a_bad_priority_is_refused_writing_nothing() {
    let host = setup();
    host.put_subjects(json!([subject("a")]));
    for priority in [
        json!(11),
        json!(-11),
        json!(2.5),
        json!("5"),
        json!(true),
        json!([1]),
    ] {
        for body in [
            json!({"items": [item("x")], "priority": priority}),
            json!({"source": "subjects", "priority": priority}),
        ] {
            let message = host.bad(POST, "/batches", &body, "invalid_priority");
            assert!(message.contains("-10 to 10"), "{message}");
        }
    }
    assert_eq!(host.count("batches"), 0);
}
