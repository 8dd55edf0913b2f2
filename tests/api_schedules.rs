//! `/schedules` on the host: create and replace, next fire time, list, get,
//! delete, and what a fired schedule shows.

mod common;

use cron_fanout::core::time::rfc3339;
use futures::executor::block_on;
use serde_json::{json, Value};

use common::api::*;

// ---------------------------------------------------------------- schedules

/// 2026-11-18T11:06:40.123Z (NOW) in ms, for readable expectations.
fn at(rfc: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc)
        .unwrap()
        .timestamp_millis()
}

#[test]
fn put_schedule_creates_201_then_replaces_200_and_answers_next_fire_at() {
    let host = setup();
    let body = json!({"cron": "0 9 * * *", "timezone": "Europe/Berlin", "group": "digest",
                      "jitter_seconds": 600, "enabled": true});
    let created = host.ok(PUT, "/schedules/digest", Some(body), 201);
    assert_eq!(
        created,
        json!({"id": "digest", "cron": "0 9 * * *", "timezone": "Europe/Berlin",
               "group": "digest", "jitter_seconds": 600, "enabled": true, "priority": 0,
               "next_fire_at": "2026-11-19T08:00:00.000Z", "last_fired_at": null,
               "last_batch_id": null, "created_at": rfc3339(NOW), "updated_at": rfc3339(NOW),
               "on_finish": null, "fire_failures": 0, "retry_at": null})
    );
    host.now.set(NOW + 1_000);
    let replaced = host.ok(
        PUT,
        "/schedules/digest",
        Some(json!({"every_seconds": 900})),
        200,
    );
    assert_eq!(
        (
            replaced["every_seconds"].clone(),
            replaced.get("cron").cloned()
        ),
        (json!(900), None),
        "the replacement says when, and nothing of the old cron"
    );
    // 11:06:41 UTC: the next quarter hour. Defaults filled in; created_at kept.
    assert_eq!(replaced["next_fire_at"], json!("2026-11-18T11:15:00.000Z"));
    assert_eq!(
        fields(&replaced, ["timezone", "group", "jitter_seconds"]),
        [json!("UTC"), Value::Null, json!(0)]
    );
    assert_eq!(
        fields(&replaced, ["created_at", "updated_at"]),
        [json!(rfc3339(NOW)), json!(rfc3339(NOW + 1_000))]
    );
    // A one-off answers its instant, even a past one (it fires on the next tick);
    // a disabled schedule has no next fire.
    let once = host.ok(
        PUT,
        "/schedules/once",
        Some(json!({"at": "2026-11-18T10:00:00+01:00"})),
        201,
    );
    assert_eq!(
        fields(&once, ["at", "next_fire_at"]),
        [
            json!("2026-11-18T09:00:00.000Z"),
            json!("2026-11-18T09:00:00.000Z")
        ]
    );
    let off = host.ok(
        PUT,
        "/schedules/off",
        Some(json!({"cron": "*/5 * * * *", "enabled": false})),
        201,
    );
    assert_eq!(
        fields(&off, ["enabled", "next_fire_at"]),
        [json!(false), Value::Null]
    );
}

#[test]
fn a_schedule_on_subject_time_first_fires_at_the_earliest_zone_of_its_group() {
    let host = setup();
    host.put_subjects(json!([
        {"id": "ber", "kind": "noop", "payload": {}, "group": "digest", "timezone": "Europe/Berlin"},
        {"id": "ny", "kind": "noop", "payload": {}, "group": "digest", "timezone": "America/New_York"},
        {"id": "kir", "kind": "noop", "payload": {}, "group": "other", "timezone": "Pacific/Kiritimati"}
    ]));
    let body = json!({"cron": "0 9 * * *", "timezone": "subject", "group": "digest"});
    let got = host.ok(PUT, "/schedules/digest", Some(body), 201);
    // At 11:06 UTC on 2026-11-18 the 18th's occurrence began at Berlin's 09:00
    // (08:00 UTC), before the schedule existed, so the first is the 19th's, due at
    // its earliest zone: Berlin again. Kiritimati (UTC+14) is in another group.
    assert_eq!(got["next_fire_at"], json!("2026-11-19T08:00:00.000Z"));
    // Over every group, Kiritimati's 09:00 on the 19th comes first: 19:00 UTC today.
    let all = json!({"cron": "0 9 * * *", "timezone": "subject"});
    let got = host.ok(PUT, "/schedules/everyone", Some(all), 201);
    assert_eq!(got["next_fire_at"], json!("2026-11-18T19:00:00.000Z"));
    assert_eq!(got["timezone"], json!("subject"));
}

#[test]
fn put_schedule_refuses_every_bad_body_without_writing() {
    let host = setup();
    let put =
        |id: &str, body: Value, code: &str| host.bad(PUT, &format!("/schedules/{id}"), &body, code);
    let every = json!({"every_seconds": 60});
    // The id.
    put("a:b", every.clone(), "invalid_id");
    put("%2E%2E", every.clone(), "invalid_id");
    put(&"i".repeat(201), every.clone(), "invalid_id");
    put("%09", every.clone(), "invalid_id");
    put("adhoc", every.clone(), "reserved_id");
    // Shape.
    put(
        "s",
        json!({"every_seconds": 60, "extra": 1}),
        "invalid_json",
    );
    put("s", json!({"every_seconds": "60"}), "invalid_json");
    put(
        "s",
        json!({"cron": "0 9 * * *", "enabled": "yes"}),
        "invalid_json",
    );
    // What and when.
    put("s", json!({}), "invalid_schedule");
    put(
        "s",
        json!({"cron": "0 9 * * *", "every_seconds": 60}),
        "invalid_schedule",
    );
    put(
        "s",
        json!({"every_seconds": 60, "at": "2026-11-18T12:00:00Z"}),
        "invalid_schedule",
    );
    put("s", json!({"every_seconds": 59}), "invalid_schedule");
    put(
        "s",
        json!({"every_seconds": 31_536_001}),
        "invalid_schedule",
    );
    put("s", json!({"at": "tomorrow"}), "invalid_schedule");
    put(
        "s",
        json!({"every_seconds": 60, "timezone": "Europe/Berlin"}),
        "invalid_schedule",
    );
    put(
        "s",
        json!({"cron": "0 9 * * *", "jitter_seconds": 3_601}),
        "invalid_schedule",
    );
    put(
        "s",
        json!({"cron": "0 9 * * *", "jitter_seconds": -1}),
        "invalid_schedule",
    );
    let message = put(
        "s",
        json!({"cron": "*/30 * * * *", "timezone": "subject"}),
        "invalid_schedule",
    );
    assert!(message.contains("at most once a day"), "{message}");
    put("s", json!({"cron": "0 9 * * *", "group": ""}), "invalid_id");
    // Cron syntax and time zones.
    for cron in [
        "0 9 * *",
        "61 * * * *",
        "0 9 * * 0",
        "@daily",
        "0 9 ? * *",
        "0 0 30 2 *",
    ] {
        put("s", json!({ "cron": cron }), "invalid_cron");
    }
    put(
        "s",
        json!({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}),
        "invalid_timezone",
    );
    // A query on a route that takes none.
    host.refused(
        &admin(PUT, "/schedules/s?enabled=false"),
        every.to_string().as_bytes(),
        400,
        "invalid_query",
    );
    assert_eq!(
        host.count("schedules"),
        1,
        "only the migration's daily schedule"
    );
}

#[test]
fn a_new_schedule_may_not_take_a_key_prefix_that_ad_hoc_batches_use() {
    let host = setup();
    host.create_batch(json!({"key": "backfill:2026-11", "items": [item("a")]}));
    let message = host.bad(
        PUT,
        "/schedules/backfill",
        &json!({"every_seconds": 60}),
        "reserved_id",
    );
    assert!(message.contains("\"backfill:\""), "{message}");
    // A prefix that only starts the same is free; so is replacing an existing
    // schedule (its own batches carry its id).
    host.ok(
        PUT,
        "/schedules/backfil",
        Some(json!({"every_seconds": 60})),
        201,
    );
    host.ok(
        PUT,
        "/schedules/daily",
        Some(json!({"cron": "0 6 * * *"})),
        200,
    );
}

#[test]
fn list_schedules_pages_by_id_and_get_delete_answer_404_when_missing() {
    let host = setup();
    for id in ["c", "a", "b"] {
        host.ok(
            PUT,
            &format!("/schedules/{id}"),
            Some(json!({"every_seconds": 3600})),
            201,
        );
    }
    host.assert_pages(
        "schedules",
        "id",
        &[
            ("/schedules?limit=2", &["a", "b"], json!("b")),
            (
                "/schedules?limit=2&after=b",
                &["c", "daily"],
                json!("daily"),
            ),
            ("/schedules?after=daily", &[], Value::Null),
        ],
    );
    for bad in ["limit=0", "limit=1001", "status=failed", "page=2"] {
        host.get_refused(&format!("/schedules?{bad}"), 400, "invalid_query");
    }
    assert_eq!(
        host.ok(GET, "/schedules/a", None, 200)["every_seconds"],
        json!(3600)
    );
    host.get_refused("/schedules/none", 404, "not_found");
    host.get_refused("/schedules/a?x=1", 400, "invalid_query");
    host.refused(&admin(DELETE, "/schedules/none"), b"", 404, "not_found");
    host.refused(
        &admin(DELETE, "/schedules/a?x=1"),
        b"",
        400,
        "invalid_query",
    );
    host.refused(
        &admin(DELETE, &format!("/schedules/{}", "i".repeat(201))),
        b"",
        400,
        "invalid_id",
    );
    assert_eq!(
        host.ok(DELETE, "/schedules/a", None, 200),
        json!({"deleted": "a"})
    );
    host.get_refused("/schedules/a", 404, "not_found");
}

#[test]
fn a_fired_schedule_shows_its_last_fire_and_deleting_it_keeps_its_batch() {
    let host = setup();
    host.put_subjects(json!([subject("s1"), subject("s2")]));
    host.ok(
        PUT,
        "/schedules/daily",
        Some(json!({"cron": "0 6 * * *", "enabled": false})),
        200,
    );
    host.ok(
        PUT,
        "/schedules/hourly",
        Some(json!({"cron": "0 * * * *"})),
        201,
    );
    // The tick's firing, through the store call the Worker makes, at 12:00:05.
    let now = at("2026-11-18T12:00:05Z");
    let ids = || "fired-1".to_string();
    let report = block_on(host.store.fire_due(now, 100, MAX_ATTEMPTS, &ids, None)).unwrap();
    assert_eq!(report.plan.keys(), ["hourly:2026-11-18T12:00:00.000Z"]);
    let batch = host.ok(GET, "/batches/fired-1", None, 200);
    assert_eq!(
        fields(&batch, ["key", "schedule_id", "total"]),
        [
            json!("hourly:2026-11-18T12:00:00.000Z"),
            json!("hourly"),
            json!(2)
        ]
    );
    let hourly = host.ok(GET, "/schedules/hourly", None, 200);
    assert_eq!(
        fields(&hourly, ["last_fired_at", "last_batch_id", "next_fire_at"]),
        [
            json!("2026-11-18T12:00:05.000Z"),
            json!("fired-1"),
            json!("2026-11-18T13:00:00.000Z")
        ]
    );
    let items = host.ok(GET, "/batches/fired-1/items", None, 200);
    assert_eq!(
        items["items"][0]["run_after"],
        json!("2026-11-18T12:00:00.000Z")
    );
    host.ok(DELETE, "/schedules/hourly", None, 200);
    assert_eq!(
        host.ok(GET, "/batches/fired-1", None, 200)["total"],
        json!(2)
    );
}

#[test]
fn a_schedule_has_a_priority_that_its_batches_get() {
    let host = setup();
    host.put_subjects(json!([subject("s1")]));
    let created = host.ok(
        PUT,
        "/schedules/hourly",
        Some(json!({"cron": "0 * * * *", "priority": 5})),
        201,
    );
    assert_eq!(created["priority"], json!(5));
    assert_eq!(
        host.ok(GET, "/schedules/hourly", None, 200)["priority"],
        json!(5)
    );
    let listed = host.ok(GET, "/schedules", None, 200);
    assert_eq!(
        (
            listed["schedules"][0]["id"].clone(),
            listed["schedules"][0]["priority"].clone()
        ),
        (json!("daily"), json!(0)),
        "the migration's daily schedule: the default"
    );
    assert_eq!(listed["schedules"][1]["priority"], json!(5));
    // Its fire's batch gets it.
    let now = at("2026-11-18T12:00:05Z");
    let ids = || "fired-1".to_string();
    block_on(host.store.fire_due(now, 100, MAX_ATTEMPTS, &ids, None)).unwrap();
    let batch = host.ok(GET, "/batches/fired-1", None, 200);
    assert_eq!(
        fields(&batch, ["schedule_id", "priority"]),
        [json!("hourly"), json!(5)]
    );
    // A replace changes the priority of the batches it fires next, not of those
    // fired already.
    let replaced = host.ok(
        PUT,
        "/schedules/hourly",
        Some(json!({"cron": "0 * * * *"})),
        200,
    );
    assert_eq!(replaced["priority"], json!(0));
    assert_eq!(
        host.ok(GET, "/batches/fired-1", None, 200)["priority"],
        json!(5)
    );
}

#[test]
fn a_bad_priority_on_a_schedule_is_refused_writing_nothing() {
    let host = setup();
    for priority in [
        json!(11),
        json!(-11),
        json!(0.5),
        json!("high"),
        json!(false),
    ] {
        let message = host.bad(
            PUT,
            "/schedules/s",
            &json!({"every_seconds": 60, "priority": priority}),
            "invalid_priority",
        );
        assert!(message.contains("-10 to 10"), "{message}");
    }
    // A replace too: the schedule keeps its priority.
    host.ok(
        PUT,
        "/schedules/s",
        Some(json!({"every_seconds": 60, "priority": 2})),
        201,
    );
    host.bad(
        PUT,
        "/schedules/s",
        &json!({"every_seconds": 60, "priority": 12}),
        "invalid_priority",
    );
    assert_eq!(
        host.ok(GET, "/schedules/s", None, 200)["priority"],
        json!(2)
    );
}
