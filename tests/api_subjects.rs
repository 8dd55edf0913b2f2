//! `/subjects` on the host: upsert, list, get and delete, and every refusal
//! writing nothing.

mod common;

use cron_fanout::core::time::rfc3339;
use futures::executor::block_on;
use serde_json::{json, Value};

use common::api::*;

// ---------------------------------------------------------------- subjects

#[test]
fn put_subjects_upserts_and_keeps_created_at() {
    let host = setup();
    host.put_subjects(
        json!([subject("a"), {"id": "b", "kind": "noop", "payload": {}, "active": false}]),
    );
    host.now.set(NOW + 1_000);
    host.put_subjects(json!([{"id": "a", "kind": "noop", "payload": {"v": 2}}]));
    let got = host.ok(GET, "/subjects", None, 200);
    let a = &got["subjects"][0];
    assert_eq!(
        (a["id"].clone(), a["kind"].clone(), a["payload"].clone()),
        (json!("a"), json!("noop"), json!({"v": 2}))
    );
    assert_eq!(a["created_at"], json!(rfc3339(NOW)));
    assert_eq!(a["updated_at"], json!(rfc3339(NOW + 1_000)));
    assert_eq!(got["subjects"][1]["active"], json!(false));
    assert_eq!(got["next_after"], Value::Null);
}

#[test]
fn put_subjects_validates_everything_before_writing() {
    let host = setup();
    host.put_subjects(json!([subject("kept")]));
    let put = |subjects: Value, code: &str| {
        host.bad(PUT, "/subjects", &json!({ "subjects": subjects }), code)
    };
    put(json!([]), "empty");
    // The bad subject is the last one: the good ones before it are not written.
    put(json!([subject("a"), subject("")]), "invalid_id");
    put(
        json!([subject("a"), subject(&"i".repeat(201))]),
        "invalid_id",
    );
    put(json!([subject("a"), subject("tab\there")]), "invalid_id");
    put(json!([subject("a"), subject("a")]), "duplicate_id");
    put(
        json!([subject("a"), {"id": "b", "kind": "email", "payload": {}}]),
        "invalid_payload",
    );
    put(
        json!([subject("a"), {"id": "b", "kind": "webhook", "payload": {"url": "ftp://example.com/x"}}]),
        "invalid_payload",
    );
    let many: Vec<Value> = (0..1_001).map(|i| subject(&format!("m{i}"))).collect();
    put(Value::Array(many), "too_many");
    let message = put(
        json!([subject("a"), {"id": "b", "kind": "email", "payload": {}}]),
        "invalid_payload",
    );
    assert!(
        message.contains("subjects[1]") && message.contains("webhook"),
        "{message}"
    );
    assert_eq!(host.count("subjects"), 1, "only the subject written first");
    // 200 characters (not bytes) is the limit.
    host.put_subjects(json!([subject(&"é".repeat(200))]));
}

#[test]
fn list_subjects_pages_by_id() {
    let host = setup();
    host.put_subjects(json!([subject("c"), subject("a"), subject("b")]));
    host.assert_pages(
        "subjects",
        "id",
        &[
            ("/subjects?limit=2", &["a", "b"], json!("b")),
            ("/subjects?limit=2&after=b", &["c"], Value::Null),
        ],
    );
    for bad in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "status=failed",
        "page=2",
    ] {
        host.get_refused(&format!("/subjects?{bad}"), 400, "invalid_query");
    }
}

#[test]
fn delete_subject_answers_what_it_deleted_or_404() {
    let host = setup();
    host.put_subjects(json!([subject("a/b"), subject("keep")]));
    // The id is one percent-decoded path segment.
    assert_eq!(
        host.ok(DELETE, "/subjects/a%2Fb", None, 200),
        json!({"deleted": "a/b"})
    );
    host.refused(&admin(DELETE, "/subjects/a%2Fb"), b"", 404, "not_found");
    host.refused(
        &admin(DELETE, &format!("/subjects/{}", "i".repeat(201))),
        b"",
        400,
        "invalid_id",
    );
    host.refused(&admin(DELETE, "/subjects/%09"), b"", 400, "invalid_id");
    assert_eq!(
        host.ok(GET, "/subjects", None, 200)["subjects"][0]["id"],
        json!("keep")
    );
}

#[test]
fn subjects_carry_a_group_and_a_time_zone() {
    let host = setup();
    host.put_subjects(json!([
        {"id": "ber", "kind": "noop", "payload": {}, "group": "digest", "timezone": "Europe/Berlin"},
        {"id": "kir", "kind": "noop", "payload": {}, "group": "digest", "timezone": "Pacific/Kiritimati"},
        {"id": "plain", "kind": "noop", "payload": {}}
    ]));
    let (ids, _) = host.page("/subjects", "subjects", "id");
    assert_eq!(ids, ["ber", "kir", "plain"]);
    let got = host.ok(GET, "/subjects", None, 200);
    assert_eq!(
        column(&got, "subjects", "group"),
        ["digest", "digest", "default"]
    );
    assert_eq!(
        column(&got, "subjects", "timezone"),
        ["Europe/Berlin", "Pacific/Kiritimati", "UTC"]
    );
    // A PUT replaces the subject: without them, group and zone go back to the defaults.
    host.put_subjects(json!([{"id": "ber", "kind": "noop", "payload": {}}]));
    let ber = host.ok(GET, "/subjects/ber", None, 200);
    assert_eq!(
        (ber["group"].clone(), ber["timezone"].clone()),
        (json!("default"), json!("UTC"))
    );
    // What schedules read: the zones in use per group of active subjects.
    let zones = block_on(host.store.zones_in_use(Some("digest"))).unwrap();
    let zones: Vec<&str> = zones.iter().map(|z| z.timezone.as_str()).collect();
    assert_eq!(zones, ["Pacific/Kiritimati"]);
}

#[test]
fn put_subjects_refuses_unknown_time_zones_and_bad_groups_without_writing() {
    let host = setup();
    host.put_subjects(json!([subject("kept")]));
    let with = |field: &str, value: Value| {
        let mut bad = json!({"id": "b", "kind": "noop", "payload": {}});
        bad[field] = value;
        json!({"subjects": [subject("a"), bad]})
    };
    for zone in ["Mars/Olympus", "europe/berlin", "", "subject", "CEST"] {
        let message = host.bad(
            PUT,
            "/subjects",
            &with("timezone", json!(zone)),
            "invalid_timezone",
        );
        assert!(message.contains("subjects[1].timezone"), "{message}");
    }
    for group in ["", "tab\there", &"g".repeat(201)] {
        let message = host.bad(PUT, "/subjects", &with("group", json!(group)), "invalid_id");
        assert!(message.contains("subjects[1].group"), "{message}");
    }
    host.bad(
        PUT,
        "/subjects",
        &with("timezone", json!(1)),
        "invalid_json",
    );
    assert_eq!(host.count("subjects"), 1, "only the subject written first");
}

#[test]
fn get_subject_answers_one_or_404() {
    let host = setup();
    host.put_subjects(json!([subject("a/b")]));
    let got = host.ok(GET, "/subjects/a%2Fb", None, 200);
    assert_eq!(
        (got["id"].clone(), got["payload"]["data"].clone()),
        (json!("a/b"), json!({"n": 1}))
    );
    host.get_refused("/subjects/none", 404, "not_found");
    host.get_refused(&format!("/subjects/{}", "i".repeat(201)), 400, "invalid_id");
    host.get_refused("/subjects/a%2Fb?verbose=1", 400, "invalid_query");
}

// ---------------------------------------------------------------- limit keys

#[test]
fn subjects_hold_their_limit_keys_and_listings_show_them() {
    let host = setup();
    let mut limited = subject("a");
    limited["limits"] = json!(["tenant:acme", "github"]);
    host.put_subjects(json!([limited, subject("b")]));
    let got = host.ok(GET, "/subjects", None, 200);
    // A webhook also holds its receiver's implicit key, shown after its own.
    assert_eq!(
        got["subjects"][0]["limits"],
        json!(["tenant:acme", "github", "host:example.com"])
    );
    assert_eq!(
        got["subjects"][1]["limits"],
        json!(["host:example.com"]),
        "none of its own: the implicit key only"
    );
    assert_eq!(
        host.ok(GET, "/subjects/a", None, 200)["limits"],
        json!(["tenant:acme", "github", "host:example.com"])
    );
    // A PUT replaces the subject whole: without limits it holds the implicit key only.
    host.put_subjects(json!([subject("a")]));
    assert_eq!(
        host.ok(GET, "/subjects/a", None, 200)["limits"],
        json!(["host:example.com"])
    );
    let stored = host.fingerprint();
    assert!(
        stored.iter().all(|r| !r.contains("tenant:acme")),
        "nothing of the old keys is left"
    );
}

#[test]
fn bad_limits_on_a_subject_are_refused_writing_nothing() {
    let host = setup();
    host.put_subjects(json!([subject("kept")]));
    let with = |limits: Value| {
        let mut bad = subject("b");
        bad["limits"] = limits;
        json!({"subjects": [subject("a"), bad]})
    };
    for limits in [
        json!(["a", "b", "c", "d", "e"]),
        json!(["github", "github"]),
        json!(["has space"]),
        json!(["tenant:*"]),
        json!([""]),
        json!(["k".repeat(129)]),
        json!(["é"]),
        json!([7]),
        json!("github"),
        json!({"github": 1}),
    ] {
        let message = host.bad(PUT, "/subjects", &with(limits.clone()), "invalid_limits");
        assert!(
            message.starts_with("subjects[1].limits"),
            "{limits}: {message}"
        );
    }
    assert_eq!(host.count("subjects"), 1, "only the subject written first");
}

#[test]
fn a_subject_holds_its_kinds_limit_keys_after_its_own() {
    let host = setup_with_github_calls();
    host.put_subjects(json!([
        {"id": "a", "kind": "github_calls", "payload": {"account": "acme"},
         "limits": ["tenant:acme", "github"]},
        {"id": "b", "kind": "github_calls", "payload": {"account": "bolt"}},
        subject("c"),
    ]));
    let got = host.ok(GET, "/subjects", None, 200);
    let limits: Vec<&Value> = got["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["limits"])
        .collect();
    assert_eq!(
        limits,
        [
            &json!(["tenant:acme", "github", "github:acme"]),
            &json!(["github", "github:bolt"]),
            &json!(["host:example.com"]),
        ]
    );
    // Four of its own and the kind's two: the kind's are not counted.
    host.put_subjects(
        json!([{"id": "a", "kind": "github_calls", "payload": {"account": "acme"},
                              "limits": ["k1", "k2", "k3", "k4"]}]),
    );
    assert_eq!(
        host.ok(GET, "/subjects/a", None, 200)["limits"],
        json!(["k1", "k2", "k3", "k4", "github", "github:acme"])
    );
}

#[test]
fn a_key_its_kind_adds_that_is_no_key_is_refused_writing_nothing() {
    let host = setup_with_github_calls();
    let body = json!({"subjects": [
        {"id": "a", "kind": "github_calls", "payload": {"account": "acme"}},
        {"id": "b", "kind": "github_calls", "payload": {"account": "has space"}},
    ]});
    let message = host.bad(PUT, "/subjects", &body, "invalid_limits");
    assert!(
        message.starts_with("subjects[1].limits") && message.contains("github:has space"),
        "{message}"
    );
}
