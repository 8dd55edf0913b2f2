//! The route table on the host (`cron_fanout::api::routes`): every route of
//! `ROUTES` answers its documented success shape, and unknown paths and methods are
//! 404 and 405. A route added to the table without a success case here fails
//! `every_route_in_the_table_answers_its_success_shape`; its errors go in the
//! suite of its resource (`tests/api_*.rs`, helpers in `tests/common/api.rs`).
//!
//! Not on the host, because they need the Workers runtime: `POST /internal/run`
//! (signature and outcome: e2e, `core::signature` tests), the probe's SELF calls
//! (e2e), reading the body from the runtime (`edge::http::WorkerBody`: the e2e suite
//! streams bodies at it) and reading settings from the Worker's env (`edge::config`;
//! who sees a `misconfigured` detail is `api::misconfigured`, in `api_edges.rs`).

mod common;

use cron_fanout::api::probe::ProbeRequest;
use cron_fanout::api::routes::{self, ROUTES};
use cron_fanout::api::{self, App, Method, Served};
use cron_fanout::jobs::Jobs;
use futures::executor::block_on;
use serde_json::json;

use common::api::*;

const PROGRESS_KEYS: [&str; 19] = [
    "callback",
    "cancelled",
    "completed",
    "created_at",
    "eta",
    "failed",
    "filling",
    "finished_at",
    "id",
    "key",
    "on_finish",
    "pending",
    "percent",
    "priority",
    "processing",
    "rate_per_min",
    "schedule_id",
    "status",
    "total",
];

const SUBJECT_KEYS: [&str; 9] = [
    "active",
    "created_at",
    "group",
    "id",
    "kind",
    "limits",
    "payload",
    "timezone",
    "updated_at",
];

/// A schedule's keys in answers (one of cron / every_seconds / at besides these).
const SCHEDULE_KEYS: [&str; 15] = [
    "created_at",
    "enabled",
    "fire_failures",
    "group",
    "id",
    "jitter_seconds",
    "last_batch_id",
    "last_fired_at",
    "next_fire_at",
    "on_finish",
    "priority",
    "retry_at",
    "timezone",
    "updated_at",
    "cron",
];

// ---------------------------------------------------------------- every route

/// Each route of the table answers a well-formed request with its documented
/// shape. A route added to the table without a case here fails this test.
#[test]
fn every_route_in_the_table_answers_its_success_shape() {
    let host = setup();
    host.put_subjects(json!([subject("s1"), subject("s2")]));
    host.create_batch(json!({"key": "k1", "source": "subjects"}));
    host.store
        .db()
        .conn()
        .execute(
            "INSERT INTO invocations (trigger_kind, started_at, elapsed_ms, batch_ids, claimed,
             completed, retried, failed, lost_leases, reaped, subrequests, subrequest_budget,
             d1_statements, d1_rows_written, stop_reason)
             VALUES ('tick', ?1, 5, '[\"batch-1\"]', 2, 2, 0, 0, 0, 0, 5, 45, 4, 20, 'drained')",
            [NOW],
        )
        .unwrap();

    // A call that must answer 200 with a batch's progress.
    let progress = |method: Method, target: &str| {
        let got = host.ok(method, target, None, 200);
        assert_eq!(keys(&got), PROGRESS_KEYS, "{target}");
        got
    };
    for route in ROUTES {
        let (method, path) = (route.method, route.path);
        match (method, path) {
            (GET, "/health") => {
                let req = request(GET, "/health", None, None);
                assert_eq!(host.call(&req, b""), (200, json!({"ok": true})));
            }
            // Needs the runtime: the e2e suite sends it signed, unsigned and forged.
            (POST, "/internal/run") => {}
            // Needs the runtime: the e2e suite runs each probe mode, and sends it unsigned.
            (POST, "/internal/probe") => {}
            (PUT, "/subjects") => {
                let got = host.ok(PUT, path, Some(json!({"subjects": [subject("s3")]})), 200);
                assert_eq!(got, json!({"upserted": 1}));
            }
            (GET, "/subjects") => {
                let got = host.ok(GET, path, None, 200);
                assert_eq!(keys(&got), ["next_after", "subjects"]);
                let first = &got["subjects"][0];
                assert_eq!(keys(first), SUBJECT_KEYS);
                assert_eq!(
                    fields(first, ["group", "timezone"]),
                    [json!("default"), json!("UTC")]
                );
                assert_eq!(
                    first["payload"]["data"],
                    json!({"n": 1}),
                    "payload is JSON, not text"
                );
                assert_eq!(first["active"], json!(true));
                assert_eq!(first["created_at"], json!("2026-11-18T11:06:40.123Z"));
            }
            (GET, "/subjects/{id}") => {
                let got = host.ok(GET, "/subjects/s1", None, 200);
                assert_eq!(keys(&got), SUBJECT_KEYS);
                assert_eq!(got["id"], json!("s1"));
            }
            (DELETE, "/subjects/{id}") => {
                let got = host.ok(DELETE, "/subjects/s3", None, 200);
                assert_eq!(got, json!({"deleted": "s3"}));
            }
            (POST, "/batches") => {
                let got = host.ok(POST, path, Some(json!({"items": [item("x")]})), 201);
                assert_eq!(keys(&got), PROGRESS_KEYS);
            }
            (GET, "/batches") => {
                let got = host.ok(GET, path, None, 200);
                assert_eq!(keys(&got), ["batches"]);
                assert_eq!(keys(&got["batches"][0]), PROGRESS_KEYS);
            }
            (GET, "/batches/{id}") => {
                // One batch only: its pending items counted by what holds them,
                // the keys holding most, and what it cost (migration 0026).
                let got = host.ok(GET, "/batches/batch-1", None, 200);
                let mut expected = PROGRESS_KEYS.to_vec();
                expected.extend(["cost", "waiting_keys", "waiting_on"]);
                expected.sort_unstable();
                assert_eq!(keys(&got), expected);
                assert_eq!(
                    keys(&got["cost"]),
                    [
                        "d1_rows_read",
                        "d1_rows_written",
                        "d1_statements",
                        "free_quota_used_percent",
                        "paid_included_used_percent",
                        "paid_usd_beyond_included",
                        "prices_as_of",
                        "queue_operations",
                        "subrequests",
                        "worker_requests"
                    ]
                );
            }
            (GET, "/batches/{id}/items") => {
                let got = host.ok(GET, "/batches/batch-1/items", None, 200);
                assert_eq!(keys(&got), ["items", "next_after"]);
                assert_eq!(
                    keys(&got["items"][0]),
                    [
                        "attempt",
                        "completed_at",
                        "id",
                        "kind",
                        "last_error",
                        "limits",
                        "max_attempts",
                        "receipts",
                        "run_after",
                        "started_at",
                        "status",
                        "subject_id",
                        "waiting_on"
                    ]
                );
            }
            (GET, "/" | "/dashboard") => {
                let t = host.text(&request(GET, path, None, None));
                assert_eq!(t.content_type, "text/html; charset=utf-8");
                assert!(t.body.starts_with("<!doctype html>"));
            }
            (GET, "/dashboard/app.js" | "/dashboard/app.css" | "/dashboard/icon.svg") => {
                let t = host.text(&request(GET, path, None, None));
                assert_eq!(t.status, 200);
                assert!(!t.body.is_empty());
            }
            (GET, "/openapi.json") => {
                let t = host.text(&request(GET, path, None, None));
                assert_eq!(t.content_type, "application/json");
                let doc: serde_json::Value = serde_json::from_str(&t.body).unwrap();
                assert_eq!(doc["openapi"], json!("3.1.0"));
            }
            (GET, "/batches/{id}/timeline") => {
                let got = host.ok(GET, "/batches/batch-1/timeline", None, 200);
                assert_eq!(
                    keys(&got),
                    ["batch_id", "bucket_seconds", "from", "points", "to"]
                );
            }
            (GET, "/metrics") => {
                let t = host.text(&admin(GET, path));
                assert_eq!(t.content_type, "text/plain; version=0.0.4; charset=utf-8");
                // k1, and the batch of the POST /batches case above.
                assert!(
                    t.body.contains("\ncron_fanout_batches_running 2\n"),
                    "{}",
                    t.body
                );
            }
            (POST, "/batches/{id}/pause") => {
                let got = progress(POST, "/batches/batch-1/pause");
                assert_eq!(got["status"], json!("paused"));
            }
            (POST, "/batches/{id}/resume") => {
                let got = progress(POST, "/batches/batch-1/resume");
                assert_eq!(got["status"], json!("running"));
            }
            (POST, "/batches/{id}/cancel") => {
                let made = json!({"key": "to-cancel", "items": [item("y")]});
                let id = host.create_batch(made)["id"].clone();
                let got = progress(POST, &format!("/batches/{}/cancel", id.as_str().unwrap()));
                assert_eq!(
                    fields(&got, ["status", "cancelled"]),
                    [json!("cancelled"), json!(1)]
                );
            }
            (POST, "/batches/{id}/retry") => {
                let body = json!({"status": "failed"});
                let got = host.ok(POST, "/batches/batch-1/retry", Some(body), 200);
                assert_eq!(got, json!({"requeued": 0}));
            }
            (POST, "/items/{id}/retry") => {
                let got = host.ok(POST, "/items/1/retry", None, 200);
                assert_eq!(got, json!({"requeued": 0}), "item 1 is pending");
            }
            (GET, "/invocations") => {
                let got = host.ok(GET, path, None, 200);
                let inv = &got["invocations"][0];
                assert_eq!(inv["started_at"], json!("2026-11-18T11:06:40.123Z"));
                assert_eq!(inv["batch_ids"], json!(["batch-1"]));
                assert_eq!(inv["stop_reason"], json!("drained"));
            }
            (PUT, "/schedules/{id}") => {
                let body = json!({"cron": "0 9 * * *", "timezone": "Europe/Berlin"});
                let got = host.ok(PUT, "/schedules/digest", Some(body), 201);
                let mut want = SCHEDULE_KEYS.to_vec();
                want.sort_unstable();
                assert_eq!(keys(&got), want);
                // 2026-11-18T11:06 UTC is 12:06 in Berlin: tomorrow 09:00 CET.
                assert_eq!(got["next_fire_at"], json!("2026-11-19T08:00:00.000Z"));
            }
            (GET, "/schedules") => {
                let got = host.ok(GET, path, None, 200);
                assert_eq!(keys(&got), ["next_after", "schedules"]);
                assert_eq!(
                    column(&got, "schedules", "id"),
                    ["daily", "digest"],
                    "the migration's daily schedule and the one just made"
                );
            }
            (GET, "/schedules/{id}") => {
                let got = host.ok(GET, "/schedules/daily", None, 200);
                assert_eq!(
                    fields(&got, ["cron", "timezone", "group"]),
                    [json!("0 12 * * *"), json!("UTC"), json!("default")],
                    "the migrations' daily schedule: the subjects without a group"
                );
            }
            (DELETE, "/schedules/{id}") => {
                let got = host.ok(DELETE, "/schedules/digest", None, 200);
                assert_eq!(got, json!({"deleted": "digest"}));
            }
            (PUT, "/limits/{key}") => {
                let body = json!({"rate": 30, "concurrency": 10});
                let got = host.ok(PUT, "/limits/github", Some(body), 200);
                assert_eq!(
                    fields(&got, ["key", "rate", "burst", "concurrency"]),
                    [json!("github"), json!(30), json!(30), json!(10)]
                );
            }
            (GET, "/limits") => {
                let got = host.ok(GET, path, None, 200);
                assert_eq!(keys(&got), ["learned", "limits", "next_after", "paused"]);
                assert_eq!(column(&got, "limits", "key"), ["github"]);
            }
            (GET, "/limits/{key}") => {
                let got = host.ok(GET, "/limits/github", None, 200);
                assert_eq!(
                    fields(&got, ["in_flight", "tokens", "waiting"]),
                    [json!(0), json!(30), json!(0)]
                );
            }
            (DELETE, "/limits/{key}") => {
                let got = host.ok(DELETE, "/limits/github", None, 200);
                assert_eq!(got, json!({"deleted": "github"}));
            }
            (DELETE, "/limits/{key}/pause") => {
                host.store
                    .db()
                    .conn()
                    .execute(
                        "INSERT INTO limit_state (key, tat, basis, paused_until)
                         VALUES ('host:a.example', 0, '', ?1)",
                        [host.now.get() + 60_000],
                    )
                    .unwrap();
                let got = host.ok(DELETE, "/limits/host:a.example/pause", None, 200);
                assert_eq!(got, json!({"lifted": "host:a.example"}));
            }
            (POST, "/probe") => {
                let req = admin(POST, path);
                let served = host.serve(&req, br#"{"calls": 10}"#.as_slice());
                let want = ProbeRequest::SelfCalls {
                    calls: 10,
                    concurrency: 25,
                };
                assert_eq!(served, Ok(Served::Probe(want)));
            }
            _ => panic!(
                "{} {path} has no host test: add its success case here and its errors to its resource's suite",
                method.as_str()
            ),
        }
    }
}

// ---------------------------------------------------------------- routing

#[test]
fn unknown_paths_are_404_for_everyone() {
    let host = setup();
    for token in [None, Some(TOKEN)] {
        for target in [
            "/nowhere",
            "/dashboard/x",
            "/subjects/a/b",
            "/batches/b/items/x",
        ] {
            let req = request(GET, target, token, None);
            host.refused(&req, b"", 404, "not_found");
        }
    }
}

#[test]
fn a_known_path_with_another_method_is_405_before_auth() {
    let host = setup();
    let cases = [
        (DELETE, "/batches", "GET, POST"),
        (POST, "/subjects", "GET, PUT"),
        (POST, "/subjects/a", "GET, DELETE"),
        (POST, "/schedules/a", "GET, PUT, DELETE"),
        (DELETE, "/schedules", "GET"),
        (POST, "/limits/github", "GET, PUT, DELETE"),
        (PUT, "/limits", "GET"),
        (POST, "/batches/b", "GET"),
        (GET, "/internal/run", "POST"),
        (GET, "/probe", "POST"),
        (Method::Other, "/health", "GET"),
    ];
    for (method, target, allowed) in cases {
        let req = request(method, target, None, None);
        let message = host.refused(&req, b"", 405, "method_not_allowed");
        assert!(
            message.ends_with(&format!("allowed: {allowed}")),
            "{target}: {message}"
        );
    }
}

#[test]
fn serve_refuses_routes_the_edge_answers() {
    let host = setup();
    let health = routes::find(GET, &["health".to_string()]).unwrap();
    let app = App {
        store: &host.store,
        settings: &host.settings,
        admin_token: TOKEN,
        metrics_token: Some(METRICS_TOKEN),
        now: NOW,
        new_id: &String::new,
        event: &|_, _| {},
        jobs: &Jobs::builtin(),
        services: &[],
    };
    let req = admin(GET, "/health");
    let e = block_on(api::serve(&app, health, &req, b"".as_slice())).unwrap_err();
    assert_eq!(e.code(), "internal");
}
