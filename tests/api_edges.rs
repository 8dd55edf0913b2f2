//! What every route shares, on the host: admin and metrics auth, content types,
//! body limits and malformed JSON (refused before the body is read), ids, payload
//! and webhook-target validation, storage failures, `GET /invocations`,
//! `POST /probe`, `GET /metrics` and the dashboard's pages.

mod common;

use std::cell::Cell;
use std::path::Path;

use cron_fanout::api::probe::ProbeRequest;
use cron_fanout::api::routes::{self, Target, ROUTES};
use cron_fanout::api::{self, Method, Served};
use cron_fanout::core::error::ApiError;
use cron_fanout::core::model::{InvocationSummary, StopReason, Tally, Trigger};
use cron_fanout::core::requests::MAX_BODY_BYTES;
use futures::executor::block_on;
use serde_json::{json, Value};

use common::api::*;

/// The JSON routes, each with a body it would accept.
fn json_routes() -> Vec<(Method, &'static str, Value)> {
    vec![
        (PUT, "/subjects", json!({"subjects": [subject("a")]})),
        (POST, "/batches", json!({"source": "subjects"})),
        (POST, "/probe", json!({"calls": 1})),
        (PUT, "/schedules/s", json!({"every_seconds": 60})),
    ]
}

// ---------------------------------------------------------------- auth and bodies

#[test]
fn every_admin_route_needs_the_exact_admin_token() {
    let host = setup();
    for route in ROUTES {
        let Target::Admin(_) = route.target else {
            continue;
        };
        let target = route.path.replace("{id}", "x");
        for token in [None, Some("wrong-token-0123456789"), Some("")] {
            let req = request(route.method, &target, token, Some("application/json"));
            host.refused(&req, b"{}", 401, "unauthorized");
        }
        let mut basic = admin(route.method, &target);
        basic.authorization = Some(format!("Basic {TOKEN}"));
        host.refused(&basic, b"{}", 401, "unauthorized");
    }
}

#[test]
fn the_metrics_token_reads_metrics_and_nothing_else() {
    let host = setup();
    let scrape = request(GET, "/metrics", Some(METRICS_TOKEN), None);
    assert_eq!(host.text(&scrape).status, 200, "METRICS_TOKEN on /metrics");
    assert_eq!(
        host.text(&admin(GET, "/metrics")).status,
        200,
        "the admin token still works"
    );
    for route in ROUTES {
        let Target::Admin(_) = route.target else {
            continue;
        };
        if route.path == "/metrics" {
            continue;
        }
        let target = route.path.replace("{id}", "x");
        let wrong = request(
            route.method,
            &target,
            Some("wrong-token-0123456789"),
            Some("application/json"),
        );
        let with_metrics = request(
            route.method,
            &target,
            Some(METRICS_TOKEN),
            Some("application/json"),
        );
        host.refused(&with_metrics, b"{}", 401, "unauthorized");
        assert_eq!(
            host.call(&with_metrics, b"{}"),
            host.call(&wrong, b"{}"),
            "{target}: METRICS_TOKEN is refused exactly like a wrong token"
        );
    }
}

#[test]
fn without_a_metrics_token_only_the_admin_reads_metrics() {
    let host = Host {
        metrics_token: None,
        ..setup()
    };
    for token in [Some(METRICS_TOKEN), Some(""), None] {
        host.refused(
            &request(GET, "/metrics", token, None),
            b"",
            401,
            "unauthorized",
        );
    }
    assert_eq!(host.text(&admin(GET, "/metrics")).status, 200);
}

#[test]
fn the_body_is_not_read_before_the_caller_is_admitted() {
    let host = setup();
    let huge = vec![b'x'; 10 * MAX_BODY_BYTES];
    for (method, path, _) in json_routes() {
        let read = Cell::new(false);
        let req = request(method, path, None, Some("application/json"));
        let e = host
            .serve(
                &req,
                Tracked {
                    bytes: &huge,
                    read: &read,
                },
            )
            .unwrap_err();
        assert_eq!(e.status(), 401, "{path}");
        assert!(
            !read.get(),
            "{path}: read the body of an unauthenticated call"
        );

        let e = host
            .serve(
                &admin(method, &format!("{path}?x=1")),
                Tracked {
                    bytes: &huge,
                    read: &read,
                },
            )
            .unwrap_err();
        assert_eq!(e.code(), "invalid_query", "{path}");
        assert!(!read.get(), "{path}: read the body of a refused query");
    }
}

#[test]
fn json_routes_refuse_other_content_types_before_reading() {
    let host = setup();
    for (method, path, body) in json_routes() {
        for content_type in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            let read = Cell::new(false);
            let req = request(method, path, Some(TOKEN), content_type);
            let before = host.fingerprint();
            let e = host
                .serve(
                    &req,
                    Tracked {
                        bytes: body.to_string().as_bytes(),
                        read: &read,
                    },
                )
                .unwrap_err();
            assert_eq!(
                (e.status(), e.code()),
                (415, "unsupported_media_type"),
                "{path}"
            );
            assert!(!read.get(), "{path}: read a body it refuses");
            assert_eq!(host.fingerprint(), before);
        }
        // Any JSON media type is accepted, whatever its case or parameters.
        let req = request(
            method,
            path,
            Some(TOKEN),
            Some("Application/JSON; charset=utf-8"),
        );
        assert!(
            host.serve(&req, body.to_string().as_bytes()).is_ok(),
            "{path}"
        );
    }
}

#[test]
fn bodies_over_256_kib_are_413() {
    let host = setup();
    for (method, path, _) in json_routes() {
        let over = format!(r#"{{"pad":"{}"}}"#, "x".repeat(MAX_BODY_BYTES));
        assert!(over.len() > MAX_BODY_BYTES);
        let message = host.refused(
            &admin(method, path),
            over.as_bytes(),
            413,
            "payload_too_large",
        );
        assert!(message.contains("262144"), "{message}");
        // Exactly at the limit is read and parsed (and refused for its content).
        let at = format!(r#"{{"pad":"{}"}}"#, "x".repeat(MAX_BODY_BYTES - 10));
        assert_eq!(at.len(), MAX_BODY_BYTES);
        host.refused(&admin(method, path), at.as_bytes(), 400, "invalid_json");
    }
}

#[test]
fn malformed_json_unknown_fields_and_wrong_types_are_invalid_json() {
    let host = setup();
    for (method, path, _) in json_routes() {
        let req = admin(method, path);
        for body in [
            r#"{"subjects": [{"id": "x""#.to_string(),
            "".to_string(),
            "[]".to_string(),
            r#"{"extra": 1}"#.to_string(),
        ] {
            host.refused(&req, body.as_bytes(), 400, "invalid_json");
        }
    }
    let message = host.bad(
        PUT,
        "/subjects",
        &json!({"subjects": [], "extra": 1}),
        "invalid_json",
    );
    assert!(message.contains("extra"), "names the field: {message}");
    host.bad(
        PUT,
        "/subjects",
        &json!({"subjects": [subject("a")], "pad": 1}),
        "invalid_json",
    );
    host.bad(
        PUT,
        "/subjects",
        &json!({"subjects": [{"id": 5, "kind": "noop", "payload": {}}]}),
        "invalid_json",
    );
    host.bad(
        PUT,
        "/subjects",
        &json!({"subjects": [{"id": "a", "kind": "noop"}]}),
        "invalid_json",
    );
    host.bad(
        POST,
        "/batches",
        &json!({"source": "subjects", "max_attempts": 9}),
        "invalid_json",
    );
    host.bad(
        POST,
        "/batches",
        &json!({"items": [{"subject_id": "a", "kind": "noop", "payload": {}, "x": 1}]}),
        "invalid_json",
    );
    host.bad(
        POST,
        "/probe",
        &json!({"calls": 1, "rate": 5}),
        "invalid_json",
    );
    host.bad(POST, "/probe", &json!({"calls": "1"}), "invalid_json");
}

// ---------------------------------------------------------------- invocations and probe

#[test]
fn list_invocations_is_limit_only() {
    let host = setup();
    assert_eq!(
        host.ok(GET, "/invocations?limit=5", None, 200),
        json!({"invocations": []})
    );
    host.get_refused("/invocations?after=1", 400, "invalid_query");
    host.get_refused("/invocations?limit=-1", 400, "invalid_query");
}

#[test]
fn probe_bounds_calls_and_concurrency() {
    let host = setup();
    let probe = |body: Value| host.serve(&admin(POST, "/probe"), body.to_string().as_bytes());
    assert_eq!(
        probe(json!({"calls": 100_000, "concurrency": 1_000})),
        Ok(Served::Probe(ProbeRequest::SelfCalls {
            calls: 100_000,
            concurrency: 1_000
        }))
    );
    for body in [
        json!({"calls": 0}),
        json!({"calls": 100_001}),
        json!({"calls": 1, "concurrency": 0}),
        json!({"calls": 1, "concurrency": 1_001}),
    ] {
        host.bad(POST, "/probe", &body, "invalid_probe");
    }
    host.refused(
        &admin(POST, "/probe?calls=1"),
        br#"{"calls": 1}"#,
        400,
        "invalid_query",
    );
}

// ---------------------------------------------------------------- metrics

/// Each of `lines` is a whole line of the scrape.
fn assert_metrics(host: &Host, lines: &[&str]) {
    let text = host.text(&admin(GET, "/metrics")).body;
    for line in lines {
        assert!(
            text.contains(&format!("\n{line}\n")),
            "no {line:?} in\n{text}"
        );
    }
}

/// Leases `subjects`' items to someone until well after now: in flight, as a
/// claim leaves a first attempt (run_after 0). Name a batch's first pending items:
/// a cursor claim takes them in id order, and `processing` counts them so.
fn in_flight(host: &Host, subjects: &[&str]) {
    let list = sql_list(subjects);
    host.store
        .db()
        .conn()
        .execute(
            &format!(
                "UPDATE cron_queue SET status = 'processing', lease_token = 't', lease_expires_at = ?1
                 WHERE subject_id IN ({list})"
            ),
            [NOW + 200_000],
        )
        .unwrap();
}

/// `'a','b'`: a list of SQL string literals.
fn sql_list(values: &[&str]) -> String {
    values
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn metrics_report_the_queue_and_the_last_hour() {
    let host = setup();
    batch_under_way(&host, 6, 90_000, 2);
    in_flight(&host, &["x2"]);
    host.invocation(60_000, &[("batch-1", 2, 0)]);
    host.invocation(2 * 3_600_000, &[("batch-1", 50, 0)]); // older than an hour
    assert_metrics(
        &host,
        &[
            "cron_fanout_batches_running 1",
            "cron_fanout_batch_items{status=\"pending\"} 3",
            "cron_fanout_batch_items{status=\"processing\"} 1",
            "cron_fanout_batch_items{status=\"completed\"} 2",
            "cron_fanout_batch_items{status=\"failed\"} 0",
            // The 3 pending items were due from the batch's creation, 90 s ago.
            "cron_fanout_items_due 3",
            "cron_fanout_queue_lag_seconds 90",
            "cron_fanout_last_hour_invocations{stop_reason=\"drained\"} 1",
            "cron_fanout_last_hour_items{event=\"claimed\"} 2",
            "cron_fanout_last_hour_items{event=\"completed\"} 2",
            "cron_fanout_last_hour_subrequests_max 12",
            "cron_fanout_subrequest_budget 45",
            "cron_fanout_last_hour_d1_statements_per_item 2",
            "cron_fanout_last_hour_d1_rows_written_per_item 15",
        ],
    );
    host.get_refused("/metrics?format=json", 400, "invalid_query");
}

/// A paused (or cancelled) batch's in-flight items finish, but the batch is not
/// running: its items are none of `cron_fanout_batch_items`.
#[test]
fn metrics_leave_out_the_in_flight_items_of_batches_not_running() {
    let host = setup();
    for n in 0..2 {
        host.create_batch(json!({"items": numbered_items(&format!("b{n}-"), 3)}));
    }
    // One item of each batch in flight; then batch-2 is paused.
    in_flight(&host, &["b0-0", "b1-0"]);
    host.ok(POST, "/batches/batch-2/pause", None, 200);
    assert_metrics(
        &host,
        &[
            "cron_fanout_batches_running 1",
            "cron_fanout_batch_items{status=\"processing\"} 1",
            "cron_fanout_batch_items{status=\"pending\"} 2",
        ],
    );
}

#[test]
fn metrics_count_the_items_released_unrun_in_the_last_hour() {
    let host = setup();
    // A tick that ran out of time: 4 claimed, 1 completed, 3 given back unrun;
    // and one like it older than the window.
    for (ago_ms, released) in [(60_000, 3), (2 * 3_600_000, 7)] {
        let summary = InvocationSummary {
            invocation: None,
            trigger: Trigger::Tick,
            started_at: host.now.get() - ago_ms,
            elapsed_ms: 50_000,
            tally: Tally {
                claimed: released + 1,
                completed: 1,
                released,
                ..Tally::default()
            },
            subrequests: 9,
            subrequest_budget: 45,
            d1_statements: 4,
            d1_rows_written: 12,
            d1_rows_read: Some(0),
            stop_reason: StopReason::Deadline,
            drainer: None,
            chain: None,
        };
        block_on(host.store.record_invocation(&summary)).unwrap();
    }
    assert_metrics(
        &host,
        &[
            "cron_fanout_last_hour_items{event=\"released\"} 3",
            "cron_fanout_last_hour_items{event=\"claimed\"} 4",
            "cron_fanout_last_hour_items{event=\"completed\"} 1",
            "cron_fanout_last_hour_invocations{stop_reason=\"deadline\"} 1",
        ],
    );
}

/// Moves `subjects`' items to failed and counts them into their batches, as the
/// group commit does (sql/count_committed_outcomes.sql).
fn mark_failed(host: &Host, subjects: &[&str]) {
    let list = sql_list(subjects);
    host.store
        .db()
        .conn()
        .execute_batch(&format!(
            "UPDATE batches SET failed = failed + (SELECT count(*) FROM cron_queue AS q
                                                   WHERE q.batch_id = batches.id
                                                     AND q.subject_id IN ({list}));
             UPDATE cron_queue SET status = 'failed', last_error = 'HTTP 400'
             WHERE subject_id IN ({list})"
        ))
        .unwrap();
}

/// The dead letters are the failed items of every retained batch, finished ones
/// included (where failures wait for a replay); the scrape reads them through the
/// failed-items index alone.
#[test]
fn metrics_count_the_dead_letters_of_finished_batches_too() {
    let host = setup();
    for n in 0..2 {
        host.create_batch(json!({"items": numbered_items(&format!("b{n}-"), 3)}));
    }
    mark_failed(&host, &["b0-0", "b0-1", "b1-0"]);
    host.store
        .db()
        .conn()
        .execute(
            "UPDATE batches SET status = 'finished', finished_at = ?1 WHERE id = 'batch-1'",
            [NOW],
        )
        .unwrap();
    assert_metrics(
        &host,
        &[
            "cron_fanout_dead_letters 3",
            // Running batches only: batch-2's one.
            "cron_fanout_batch_items{status=\"failed\"} 1",
        ],
    );
    // Every step of the plan is an index search or a scan of a partial index
    // (or of a subquery's rows); the failed items are read through theirs.
    // The scrape's statement, as the store binds it (it runs in a batch() with
    // the limits' reads).
    let (sql, params) = cron_fanout::sql::Statement::bind(cron_fanout::sql::MetricsSnapshot {
        now: NOW,
        due_cap: cron_fanout::core::metrics::DUE_CAP,
        window_start: NOW - cron_fanout::core::metrics::WINDOW_MS,
        dead_letter_cap: cron_fanout::core::metrics::DEAD_LETTER_CAP,
    });
    let conn = host.store.db().conn();
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let plan: Vec<String> = stmt
        .query_map(rusqlite::params_from_iter(params.iter()), |r| r.get(3))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(
        plan.iter()
            .any(|d| d == "SCAN q USING INDEX cron_queue_failed"),
        "{plan:#?}"
    );
    for d in plan.iter().filter(|d| d.starts_with("SCAN ")) {
        let partial = ["cron_queue_failed", "cron_queue_leased"]
            .iter()
            .any(|i| d.ends_with(&format!("USING INDEX {i}")));
        // SCAN CONSTANT ROW, SCAN limits: the lease window's reach, one constant
        // subquery (whether any limit is defined: a row of a small table, migration 0020).
        let subquery = ["SCAN r", "SCAN h", "SCAN CONSTANT ROW", "SCAN limits"]
            .contains(&d.as_str())
            || d.starts_with("SCAN (subquery");
        assert!(partial || subquery, "{d:?} in {plan:#?}");
    }
}

#[test]
fn docs_name_every_metric_and_only_those() {
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/metrics.md"),
    )
    .expect("docs/reference/metrics.md");
    let families = cron_fanout::core::metrics::families(&Default::default(), NOW);
    let named = cron_fanout::core::metrics::names_in(&docs);
    let mut have: Vec<String> = families.iter().map(|f| f.name.to_string()).collect();
    have.sort();
    assert_eq!(
        named, have,
        "docs/reference/metrics.md and core::metrics::families disagree"
    );
}

// ---------------------------------------------------------------- the dashboard

#[test]
fn the_dashboard_is_served_to_anyone_under_a_same_origin_csp() {
    let host = setup();
    for path in [
        "/",
        "/dashboard",
        "/dashboard/app.js",
        "/dashboard/app.css",
        "/dashboard/icon.svg",
    ] {
        for token in [None, Some("wrong-token-0123456789")] {
            let t = host.text(&request(GET, path, token, None));
            assert_eq!(t.status, 200, "{path}");
            assert!(
                t.headers
                    .contains(&("Content-Security-Policy", api::page::CSP)),
                "{path}"
            );
        }
    }
    // The page holds no data: nothing of the store is in it.
    host.create_batch(json!({"key": "secret-key", "items": [item("x")]}));
    let html = host.text(&request(GET, "/", None, None)).body;
    assert!(!html.contains("secret-key") && !html.contains(TOKEN));
    let req = request(POST, "/dashboard", None, None);
    host.refused(&req, b"", 405, "method_not_allowed");
}

// ---------------------------------------------------------------- storage failures

#[test]
fn failed_reads_are_500_internal_without_detail() {
    let host = setup();
    host.store
        .db()
        .conn()
        .execute_batch("DROP TABLE batches")
        .unwrap();
    for target in ["/batches", "/batches/b1", "/batches/b1/items"] {
        let e = host.serve(&admin(GET, target), b"".as_slice()).unwrap_err();
        let ApiError::Internal(detail) = &e else {
            panic!("{target}: {e:?}");
        };
        assert!(
            detail.contains("no such table"),
            "the log gets the detail: {detail}"
        );
        let (status, body) = host.call(&admin(GET, target), b"");
        assert_eq!((status, error_code(&body)), (500, "internal"), "{target}");
        assert!(!body.to_string().contains("no such table"), "{body}");
    }
}

#[test]
fn failed_writes_are_500_internal_and_leave_nothing_behind() {
    let host = setup();
    host.put_subjects(json!([subject("a")]));
    // The last statement of each write fails, after the earlier ones ran.
    host.store
        .db()
        .conn()
        .execute_batch(
            "CREATE TRIGGER fail_total BEFORE UPDATE OF total ON batches
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
             CREATE TRIGGER fail_upsert BEFORE UPDATE ON subjects
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
        )
        .unwrap();
    let items = json!({"items": [item("a"), item("b")]});
    host.refused(
        &admin(POST, "/batches"),
        items.to_string().as_bytes(),
        500,
        "internal",
    );
    let subjects = json!({"subjects": [subject("new"), subject("a")]});
    host.refused(
        &admin(PUT, "/subjects"),
        subjects.to_string().as_bytes(),
        500,
        "internal",
    );
}

// ---------------------------------------------------------------- the edges

/// `PUT /subjects` and `DELETE /subjects/{id}` take no query parameters, like every
/// other route that takes none: refused before the body is read.
#[test]
fn put_and_delete_subjects_refuse_unknown_query_parameters() {
    let host = setup();
    host.put_subjects(json!([subject("a")]));
    let body = json!({"subjects": [subject("b")]}).to_string();
    host.refused(
        &admin(PUT, "/subjects?dry_run=1"),
        body.as_bytes(),
        400,
        "invalid_query",
    );
    host.refused(
        &admin(DELETE, "/subjects/a?force=1"),
        b"",
        400,
        "invalid_query",
    );
    assert_eq!(host.count("subjects"), 1, "a and nothing else");
}

/// `.` and `..` are not addressable as a path segment (URL parsers resolve them),
/// so a subject, item or batch key with such an id could never be read or deleted.
#[test]
fn ids_dot_and_dotdot_are_refused() {
    let host = setup();
    for id in [".", ".."] {
        let put = |subjects: Value| json!({ "subjects": subjects });
        host.bad(PUT, "/subjects", &put(json!([subject(id)])), "invalid_id");
        host.bad(
            POST,
            "/batches",
            &json!({"items": [item(id)]}),
            "invalid_id",
        );
        host.bad(
            POST,
            "/batches",
            &json!({"key": id, "source": "subjects"}),
            "invalid_id",
        );
    }
    // Dots inside an id are fine.
    host.put_subjects(json!([subject("..."), subject("a.b"), subject(".hidden")]));
}

/// A payload the request limit accepts can outgrow the child's limit once it is
/// escaped into the dispatched item (a string of quotes doubles twice): such a
/// payload could never be dispatched, so it is refused when written.
#[test]
fn payloads_whose_dispatch_cannot_fit_are_refused_when_written() {
    let host = setup();
    let quotes = "\"".repeat(110_000);
    let webhook = |data: &str| json!({"url": "https://example.com/hook", "data": data});
    let body = json!({"subjects": [{"id": "q", "kind": "webhook", "payload": webhook(&quotes)}]});
    assert!(
        body.to_string().len() <= MAX_BODY_BYTES,
        "fits the request limit"
    );
    let message = host.bad(PUT, "/subjects", &body, "invalid_payload");
    assert!(message.contains("subjects[0]"), "{message}");
    let items = json!({"items": [{"subject_id": "q", "kind": "noop", "payload": {"q": quotes}}]});
    host.bad(POST, "/batches", &items, "invalid_payload");
    // The documented cap itself is accepted, whatever it is made of.
    let cap = cron_fanout::core::requests::MAX_PAYLOAD_BYTES;
    let data = "\"".repeat((cap - 60) / 2);
    let payload = webhook(&data);
    assert!(payload.to_string().len() <= cap);
    host.put_subjects(json!([{"id": "fits", "kind": "webhook", "payload": payload}]));
}

/// Webhook URLs are parsed the way the runtime's `fetch` parses them (WHATWG URL):
/// userinfo, invalid ports and other schemes are refused when written, not found
/// out at run time.
#[test]
fn webhook_urls_are_validated_as_the_runtime_parses_them() {
    let host = setup();
    for url in [
        "https://user:pass@example.com/hook",
        "https://user@example.com/hook",
        "https://example.com:99999/hook",
        "https://example.com:0/hook",
        "https://example.com:-1/hook",
        "https://exa mple.com/hook",
        "https://[::1/hook",
        "ftp://example.com/hook",
        "file:///etc/passwd",
        "https:example.com",
        "//example.com/hook",
    ] {
        let subjects = hook_subjects("u", url);
        let message = host.bad(PUT, "/subjects", &subjects, "invalid_payload");
        assert!(message.contains("url"), "{url}: {message}");
    }
    for url in [
        "https://example.com",
        "https://example.com:8443/hook?x=1#f",
        "http://EXAMPLE.com./a/../b",
        "https://xn--nxasmq6b.example/hook",
        "https://bücher.example/hook",
    ] {
        host.put_hook("ok", url);
    }
}

/// Webhook targets the Worker must not be pointed at, in every notation the URL
/// parser accepts: 400 `invalid_payload` by default.
const FORBIDDEN_TARGETS: &[&str] = &[
    "http://127.0.0.1:9000/hook",
    "http://127.1/hook",
    "http://2130706433/hook",
    "http://0x7f000001/hook",
    "http://0177.0.0.1/hook",
    "http://0.0.0.0/hook",
    "http://0/hook",
    "http://10.1.2.3/hook",
    "http://172.16.0.1/hook",
    "http://192.168.1.1/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://100.64.0.1/hook",
    "http://[::1]/hook",
    "http://[::]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[::ffff:a9fe:a9fe]/hook",
    "http://[fe80::1]/hook",
    "http://[fd00::1]/hook",
    "http://[64:ff9b::a9fe:a9fe]/hook",
    "http://localhost/hook",
    "http://LOCALHOST./hook",
    "http://api.localhost/hook",
    "http://printer.local/hook",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://cron-fanout.internal/internal/run",
    "http://%6c%6fcalhost/hook",
];

#[test]
fn private_and_local_webhook_targets_are_refused_by_default() {
    let host = setup();
    for url in FORBIDDEN_TARGETS {
        let subjects = hook_subjects("t", url);
        let message = host.bad(PUT, "/subjects", &subjects, "invalid_payload");
        assert!(
            message.contains("ALLOW_PRIVATE_TARGETS"),
            "{url}: {message}"
        );
        let items =
            json!({"items": [{"subject_id": "t", "kind": "webhook", "payload": {"url": url}}]});
        host.bad(POST, "/batches", &items, "invalid_payload");
    }
    // Public addresses and names are fine, including ones that merely look close.
    for url in [
        "https://93.184.215.14/hook",
        "https://[2606:4700::6810:84e5]/hook",
        "https://localhost.example.com/hook",
        "https://internal.example.com/hook",
        "https://172.32.0.1/hook",
    ] {
        host.put_hook("p", url);
    }
}

#[test]
fn allow_private_targets_lets_local_development_use_them() {
    let host = setup_allowing_private_targets();
    for url in FORBIDDEN_TARGETS {
        host.put_hook("t", url);
    }
}

/// A per-subject signing secret is stored with the payload but never listed.
#[test]
fn a_subjects_signing_secret_is_accepted_but_never_listed() {
    let host = setup();
    let secret = "per-subject-secret-0123456789";
    host.put_subjects(json!([{"id": "s", "kind": "webhook",
        "payload": {"url": "https://example.com/hook", "data": {"n": 1}, "signing_secret": secret}}]));
    let listed = host.ok(GET, "/subjects", None, 200);
    assert!(!listed.to_string().contains(secret), "{listed}");
    assert_eq!(listed["subjects"][0]["payload"]["data"], json!({"n": 1}));
    assert_eq!(
        listed["subjects"][0]["payload"]["signing_secret"],
        json!("[redacted]")
    );
    // Too short to be a secret (and so the redaction marker can never be one).
    for short in ["", "[redacted]", "fifteen-chars-x"] {
        let subjects = json!({"subjects": [{"id": "s", "kind": "webhook",
            "payload": {"url": "https://example.com/hook", "signing_secret": short}}]});
        host.bad(PUT, "/subjects", &subjects, "invalid_payload");
    }
}

/// The Worker's own host is never a webhook target, whatever ALLOW_PRIVATE_TARGETS
/// says (local development points webhooks at 127.0.0.1, on another port).
#[test]
fn the_workers_own_host_is_not_a_webhook_target() {
    let host = setup_allowing_private_targets();
    let put = |url: &str| {
        let mut req = admin(PUT, "/subjects");
        req.host = Some("127.0.0.1:8787".into());
        let body = hook_subjects("self", url);
        host.call(&req, body.to_string().as_bytes())
    };
    let (status, answer) = put("http://127.0.0.1:8787/batches");
    assert_eq!(
        (status, error_code(&answer)),
        (400, "invalid_payload"),
        "{answer}"
    );
    assert!(answer.to_string().contains("own host"), "{answer}");
    assert_eq!(
        put("http://127.0.0.1:9000/hook").0,
        200,
        "another port is another server"
    );
    assert_eq!(host.count("subjects"), 1);
}

/// Settings errors name the variable, but only to the admin:
/// anyone else gets a generic 500.
#[test]
fn misconfiguration_details_go_only_to_the_admin() {
    let detail = "LEASE_SECONDS must be between 1 and 86400, got 0".to_string();
    let subjects = routes::find(GET, &["subjects".to_string()]).unwrap();
    let run = routes::find(POST, &["internal".to_string(), "run".to_string()]).unwrap();
    let health = routes::find(GET, &["health".to_string()]).unwrap();
    let bearer = format!("Bearer {TOKEN}");
    let e = api::misconfigured(subjects, Some(&bearer), Some(TOKEN), detail.clone());
    assert_eq!((e.status(), e.code()), (500, "misconfigured"));
    assert!(e.body().to_string().contains("LEASE_SECONDS"));
    for (route, authorization, token) in [
        (subjects, None, Some(TOKEN)),
        (subjects, Some("Bearer wrong-token-0123456789"), Some(TOKEN)),
        (subjects, Some(bearer.as_str()), None),
        (run, Some(bearer.as_str()), Some(TOKEN)),
        (health, None, Some(TOKEN)),
    ] {
        let e = api::misconfigured(route, authorization, token, detail.clone());
        assert!(
            !e.body().to_string().contains("LEASE_SECONDS"),
            "{} {authorization:?}: {}",
            route.path,
            e.body()
        );
        assert!(matches!(e.status(), 401 | 500), "{e:?}");
        if token.is_none() || !matches!(route.target, Target::Admin(_)) {
            assert_eq!((e.status(), e.code()), (500, "internal"));
        }
    }
}
