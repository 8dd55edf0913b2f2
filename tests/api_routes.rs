//! Every HTTP route on the host: the real route table, admin auth and handlers
//! (`cron_fanout::api`) over `Store<SqliteDb>` with the real migrations. Success
//! shapes, every error code of docs/api.md a handler can produce, and "bad input
//! writes nothing" (every row of every table is unchanged after each refused
//! request: `Host::refused`).
//!
//! To test a new route: add its success case to
//! `every_route_in_the_table_answers_its_success_shape` (it fails until you do),
//! then one test per behaviour with `Host::ok` for answers and `Host::refused` /
//! `Host::bad` / `Host::get_refused` for every error it can give.
//!
//! Not here, because they need the Workers runtime: `POST /internal/run` (signature
//! and outcome: e2e, `core::signature` tests), the probe's SELF calls (e2e), reading
//! the body from the runtime (`edge::http::WorkerBody`: the e2e suite streams bodies
//! at it) and reading settings from the Worker's env (`edge::config`; who sees a
//! `misconfigured` detail is `api::misconfigured`, tested here).

use std::cell::{Cell, RefCell};
use std::path::Path;

use cron_fanout::api::probe::ProbeRequest;
use cron_fanout::api::routes::{self, Target, ROUTES};
use cron_fanout::api::{self, App, BodySource, Method, Request, Served, Text};
use cron_fanout::core::error::ApiError;
use cron_fanout::core::model::{BatchTally, InvocationSummary, StopReason, Tally, Trigger};
use cron_fanout::core::model::{Outcome, Transition};
use cron_fanout::core::requests::MAX_BODY_BYTES;
use cron_fanout::core::retry::decide;
use cron_fanout::core::settings::Settings;
use cron_fanout::core::throughput::MAX_POINTS;
use cron_fanout::core::time::rfc3339;
use cron_fanout::jobs::Jobs;
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::Store;
use futures::executor::block_on;
use serde_json::{json, Value};

use Method::{Delete as DELETE, Get as GET, Post as POST, Put as PUT};

const TOKEN: &str = "test-admin-token-0123456789";
/// `METRICS_TOKEN` of [`setup`]'s host: `GET /metrics` only.
const METRICS_TOKEN: &str = "test-metrics-token-0123456789";
/// 2026-11-18T11:06:40.123Z
const NOW: i64 = 1_795_000_000_123;
/// Not the default (5), so a test can tell it came from the settings.
const MAX_ATTEMPTS: i64 = 3;

/// The host side of the API: what the edge supplies on the Worker (store, settings,
/// clock, ids, log), here chosen by the test.
struct Host {
    store: Store<SqliteDb>,
    settings: Settings,
    now: Cell<i64>,
    ids: Cell<u32>,
    events: RefCell<Vec<(String, Value)>>,
    metrics_token: Option<&'static str>,
    /// The service bindings the edge found callable (listed and bound).
    services: Vec<String>,
}

fn setup() -> Host {
    let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let settings = Settings::from_lookup(|name| (name == "MAX_ATTEMPTS").then(|| "3".into()))
        .expect("valid settings");
    assert_eq!(settings.max_attempts, MAX_ATTEMPTS);
    Host {
        store: Store::new(SqliteDb::in_memory(&migrations).expect("migrations apply")),
        settings,
        now: Cell::new(NOW),
        ids: Cell::new(0),
        events: RefCell::new(Vec::new()),
        metrics_token: Some(METRICS_TOKEN),
        services: Vec::new(),
    }
}

/// A request as the edge builds it: `target` is the raw path and query.
fn request(
    method: Method,
    target: &str,
    token: Option<&str>,
    content_type: Option<&str>,
) -> Request {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut req = Request::new(method, path, query);
    req.authorization = token.map(|t| format!("Bearer {t}"));
    req.content_type = content_type.map(str::to_string);
    req
}

/// An admin request with a JSON content type.
fn admin(method: Method, target: &str) -> Request {
    request(method, target, Some(TOKEN), Some("application/json"))
}

/// A body that records whether anyone read it.
struct Tracked<'a> {
    bytes: &'a [u8],
    read: &'a Cell<bool>,
}

impl BodySource for Tracked<'_> {
    async fn read(self, limit: usize) -> Result<Vec<u8>, ApiError> {
        self.read.set(true);
        self.bytes.read(limit).await
    }
}

impl Host {
    /// Route and answer `req` the way `edge::http` does.
    fn serve(&self, req: &Request, body: impl BodySource) -> Result<Served, ApiError> {
        let new_id = || {
            self.ids.set(self.ids.get() + 1);
            format!("batch-{}", self.ids.get())
        };
        let event = |name: &str, fields: Value| {
            self.events.borrow_mut().push((name.to_string(), fields));
        };
        let app = App {
            store: &self.store,
            settings: &self.settings,
            admin_token: TOKEN,
            metrics_token: self.metrics_token,
            now: self.now.get(),
            new_id: &new_id,
            event: &event,
            jobs: &Jobs::builtin(),
            services: &self.services,
        };
        let route = routes::find(req.method, &req.segments)?;
        match route.target {
            Target::Health => Ok(api::health().into()),
            Target::Run => panic!("POST /internal/run needs the runtime (e2e suite)"),
            Target::ProbeTask => panic!("POST /internal/probe needs the runtime (e2e suite)"),
            Target::Page(asset) => Ok(Served::Text(api::page::serve(asset))),
            Target::Admin(_) => block_on(api::serve(&app, route, req, body)),
        }
    }

    /// Status and JSON body, as the client sees them (errors included).
    fn call(&self, req: &Request, body: &[u8]) -> (u16, Value) {
        match self.serve(req, body) {
            Ok(Served::Json(status, body)) => (status, body),
            Ok(Served::Text(t)) => (t.status, Value::String(t.body)),
            Ok(Served::Probe(p)) => panic!("a probe is run by the edge: {p:?}"),
            Err(e) => (e.status(), e.body()),
        }
    }

    /// An admin call that must succeed with `status`.
    fn ok(&self, method: Method, target: &str, body: Option<Value>, status: u16) -> Value {
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let (got, answer) = self.call(&admin(method, target), bytes.as_bytes());
        assert_eq!(got, status, "{} {target}: {answer}", method.as_str());
        answer
    }

    /// A non-JSON answer (page, metrics) to `req`, which must succeed.
    fn text(&self, req: &Request) -> Text {
        match self.serve(req, b"".as_slice()) {
            Ok(Served::Text(t)) => t,
            other => panic!("{} {}: {other:?}", req.method.as_str(), req.path()),
        }
    }

    /// Store an invocation summary that started `ago_ms` before now and ended
    /// `per_batch` items: (batch id, completed, failed).
    fn invocation(&self, ago_ms: i64, per_batch: &[(&str, i64, i64)]) {
        let mut tally = Tally::default();
        for (batch, completed, failed) in per_batch {
            tally.batch_ids.insert(batch.to_string());
            tally.completed += completed;
            tally.failed += failed;
            tally.claimed += completed + failed;
            tally.per_batch.insert(
                batch.to_string(),
                BatchTally {
                    completed: *completed,
                    failed: *failed,
                },
            );
        }
        let summary = InvocationSummary {
            invocation: None,
            trigger: Trigger::Tick,
            started_at: self.now.get() - ago_ms,
            elapsed_ms: 900,
            tally,
            subrequests: 12,
            subrequest_budget: 45,
            d1_statements: 4,
            d1_rows_written: 30,
            stop_reason: StopReason::Drained,
        };
        block_on(self.store.record_invocation(&summary)).unwrap();
    }

    /// One page of a listing: `field` of each row of `list`, and `next_after`.
    fn page(&self, target: &str, list: &str, field: &str) -> (Vec<String>, Value) {
        let answer = self.ok(GET, target, None, 200);
        (column(&answer, list, field), answer["next_after"].clone())
    }

    /// Every row of every table, as text: what any write would change. (The
    /// connection's change counter is no use: it also counts rolled-back changes.)
    fn fingerprint(&self) -> Vec<String> {
        let conn = self.store.db().conn();
        let mut tables = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap();
        let tables: Vec<String> = tables
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let mut rows = Vec::new();
        for table in tables {
            let mut stmt = conn.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
            let n = stmt.column_count();
            let mut all = stmt.query([]).unwrap();
            while let Some(row) = all.next().unwrap() {
                let values: Vec<String> = (0..n)
                    .map(|i| format!("{:?}", row.get_ref(i).unwrap()))
                    .collect();
                rows.push(format!("{table}: {}", values.join(" | ")));
            }
        }
        rows
    }

    fn count(&self, table: &str) -> usize {
        let prefix = format!("{table}: ");
        self.fingerprint()
            .iter()
            .filter(|r| r.starts_with(&prefix))
            .count()
    }

    /// `req` is refused with `status` and `code`, in the documented error shape, and
    /// nothing is written.
    fn refused(&self, req: &Request, body: &[u8], status: u16, code: &str) -> String {
        let before = self.fingerprint();
        let (got, answer) = self.call(req, body);
        let what = format!("{} {}", req.method.as_str(), req.path());
        assert_eq!(
            (got, error_code(&answer)),
            (status, code),
            "{what}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{what}: no message in {answer}");
        assert_eq!(self.fingerprint(), before, "{what} wrote something");
        message.to_string()
    }

    /// An admin GET refused with `status` and `code`, writing nothing.
    fn get_refused(&self, target: &str, status: u16, code: &str) -> String {
        self.refused(&admin(GET, target), b"", status, code)
    }

    /// An admin JSON request refused with 400 and `code`, writing nothing.
    fn bad(&self, method: Method, target: &str, body: &Value, code: &str) -> String {
        self.refused(
            &admin(method, target),
            body.to_string().as_bytes(),
            400,
            code,
        )
    }

    fn put_subjects(&self, subjects: Value) {
        self.ok(PUT, "/subjects", Some(json!({ "subjects": subjects })), 200);
    }
}

fn error_code(answer: &Value) -> &str {
    answer["error"]["code"]
        .as_str()
        .unwrap_or("<no error code>")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `field` of every element of the list `list` in a listing answer.
fn column(answer: &Value, list: &str, field: &str) -> Vec<String> {
    answer[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list:?} list in {answer}"))
        .iter()
        .map(|row| row[field].as_str().unwrap_or_default().to_string())
        .collect()
}

fn keys(v: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = v
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    keys
}

fn subject(id: &str) -> Value {
    json!({"id": id, "kind": "webhook", "payload": {"url": format!("https://example.com/{id}"), "data": {"n": 1}}})
}

fn item(subject_id: &str) -> Value {
    json!({"subject_id": subject_id, "kind": "noop", "payload": {}})
}

const PROGRESS_KEYS: [&str; 18] = [
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
    "processing",
    "rate_per_min",
    "schedule_id",
    "status",
    "total",
];

const SUBJECT_KEYS: [&str; 8] = [
    "active",
    "created_at",
    "group",
    "id",
    "kind",
    "payload",
    "timezone",
    "updated_at",
];

/// A schedule's keys in answers (one of cron / every_seconds / at besides these).
const SCHEDULE_KEYS: [&str; 14] = [
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
    "retry_at",
    "timezone",
    "updated_at",
    "cron",
];

/// The JSON routes, each with a body it would accept.
fn json_routes() -> Vec<(Method, &'static str, Value)> {
    vec![
        (PUT, "/subjects", json!({"subjects": [subject("a")]})),
        (POST, "/batches", json!({"source": "subjects"})),
        (POST, "/probe", json!({"calls": 1})),
        (PUT, "/schedules/s", json!({"every_seconds": 60})),
    ]
}

// ---------------------------------------------------------------- every route

/// Each route of the table answers a well-formed request with its documented
/// shape. A route added to the table without a case here fails this test.
#[test]
fn every_route_in_the_table_answers_its_success_shape() {
    let host = setup();
    host.put_subjects(json!([subject("s1"), subject("s2")]));
    host.ok(
        POST,
        "/batches",
        Some(json!({"key": "k1", "source": "subjects"})),
        201,
    );
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
                    (first["group"].clone(), first["timezone"].clone()),
                    (json!("default"), json!("UTC"))
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
                let got = host.ok(GET, "/batches/batch-1", None, 200);
                assert_eq!(keys(&got), PROGRESS_KEYS);
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
                        "max_attempts",
                        "receipts",
                        "run_after",
                        "started_at",
                        "status",
                        "subject_id"
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
                let got = host.ok(POST, "/batches/batch-1/pause", None, 200);
                assert_eq!(keys(&got), PROGRESS_KEYS);
                assert_eq!(got["status"], json!("paused"));
            }
            (POST, "/batches/{id}/resume") => {
                let got = host.ok(POST, "/batches/batch-1/resume", None, 200);
                assert_eq!(keys(&got), PROGRESS_KEYS);
                assert_eq!(got["status"], json!("running"));
            }
            (POST, "/batches/{id}/cancel") => {
                let made = json!({"key": "to-cancel", "items": [item("y")]});
                let id = host.ok(POST, "/batches", Some(made), 201)["id"].clone();
                let got = host.ok(
                    POST,
                    &format!("/batches/{}/cancel", id.as_str().unwrap()),
                    None,
                    200,
                );
                assert_eq!(keys(&got), PROGRESS_KEYS);
                assert_eq!(
                    (&got["status"], &got["cancelled"]),
                    (&json!("cancelled"), &json!(1))
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
                    (
                        got["cron"].clone(),
                        got["timezone"].clone(),
                        got["group"].clone()
                    ),
                    (json!("0 12 * * *"), json!("UTC"), json!("default")),
                    "the migrations' daily schedule: the subjects without a group"
                );
            }
            (DELETE, "/schedules/{id}") => {
                let got = host.ok(DELETE, "/schedules/digest", None, 200);
                assert_eq!(got, json!({"deleted": "digest"}));
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
                "{} {path} has no host test: add its success case here and its errors below",
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
    let page = |target: &str| host.page(target, "subjects", "id");
    assert_eq!(
        page("/subjects?limit=2"),
        (strings(&["a", "b"]), json!("b"))
    );
    assert_eq!(
        page("/subjects?limit=2&after=b"),
        (strings(&["c"]), Value::Null)
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
               "schedule_id": null, "on_finish": null, "callback": null})
    );
    // A subject added since is not added to the existing batch: nothing is written.
    host.put_subjects(json!([subject("late")]));
    let before = host.fingerprint();
    let again = host.ok(POST, "/batches", Some(body), 200);
    assert_eq!(
        (again["id"].clone(), again["total"].clone()),
        (json!("batch-1"), json!(2))
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
    let created = host.ok(
        POST,
        "/batches",
        Some(json!({"items": [item("x"), item("y")]})),
        201,
    );
    assert_eq!(
        (created["key"].clone(), created["total"].clone()),
        (json!("adhoc:batch-1"), json!(2))
    );
    let items = host.ok(GET, "/batches/batch-1/items", None, 200);
    let first = &items["items"][0];
    assert_eq!(first["max_attempts"], json!(MAX_ATTEMPTS));
    assert_eq!(first["run_after"], json!(rfc3339(NOW)));
    assert_eq!(
        (first["status"].clone(), first["attempt"].clone()),
        (json!("pending"), json!(0))
    );
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
    host.ok(POST, "/batches", Some(post("digest")), 201);
    host.ok(POST, "/batches", Some(post("digest-x:1")), 201);
    host.ok(POST, "/batches", Some(post("other:digest:1")), 201);
    // Once the schedule is gone its prefix is free again.
    host.ok(DELETE, "/schedules/digest", None, 200);
    host.ok(POST, "/batches", Some(post("digest:adhoc")), 201);
}

#[test]
fn list_batches_is_newest_first_and_not_paged_by_after() {
    let host = setup();
    for key in ["k1", "k2", "k3"] {
        host.now.set(host.now.get() + 1);
        host.ok(
            POST,
            "/batches",
            Some(json!({"key": key, "items": [item("x")]})),
            201,
        );
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
    host.ok(
        POST,
        "/batches",
        Some(json!({"key": "k", "items": [item("x")]})),
        201,
    );
    let got = host.ok(GET, "/batches/batch-1", None, 200);
    assert_eq!(
        (
            got["key"].clone(),
            got["pending"].clone(),
            got["percent"].clone()
        ),
        (json!("k"), json!(1), json!(0.0))
    );
    host.get_refused("/batches/none", 404, "not_found");
    host.get_refused("/batches/batch-1?verbose=1", 400, "invalid_query");
}

#[test]
fn list_items_filters_by_status_and_pages_by_subject() {
    let host = setup();
    host.ok(
        POST,
        "/batches",
        Some(json!({"items": [item("c"), item("a"), item("b")]})),
        201,
    );
    host.store
        .db()
        .conn()
        .execute(
            "UPDATE cron_queue SET status = 'failed', last_error = 'boom' WHERE subject_id = 'b'",
            [],
        )
        .unwrap();
    let page = |target: &str| host.page(target, "items", "subject_id");
    let items = "/batches/batch-1/items";
    assert_eq!(
        page(&format!("{items}?limit=2")),
        (strings(&["a", "b"]), json!("b"))
    );
    assert_eq!(
        page(&format!("{items}?after=b")),
        (strings(&["c"]), Value::Null)
    );
    assert_eq!(
        page(&format!("{items}?status=failed")),
        (strings(&["b"]), Value::Null)
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
               "group": "digest", "jitter_seconds": 600, "enabled": true,
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
        (
            replaced["timezone"].clone(),
            replaced["group"].clone(),
            replaced["jitter_seconds"].clone()
        ),
        (json!("UTC"), Value::Null, json!(0))
    );
    assert_eq!(
        (
            replaced["created_at"].clone(),
            replaced["updated_at"].clone()
        ),
        (json!(rfc3339(NOW)), json!(rfc3339(NOW + 1_000)))
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
        (once["at"].clone(), once["next_fire_at"].clone()),
        (
            json!("2026-11-18T09:00:00.000Z"),
            json!("2026-11-18T09:00:00.000Z")
        )
    );
    let off = host.ok(
        PUT,
        "/schedules/off",
        Some(json!({"cron": "*/5 * * * *", "enabled": false})),
        201,
    );
    assert_eq!(
        (off["enabled"].clone(), off["next_fire_at"].clone()),
        (json!(false), Value::Null)
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
    host.ok(
        POST,
        "/batches",
        Some(json!({"key": "backfill:2026-11", "items": [item("a")]})),
        201,
    );
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
    let page = |target: &str| host.page(target, "schedules", "id");
    assert_eq!(
        page("/schedules?limit=2"),
        (strings(&["a", "b"]), json!("b"))
    );
    assert_eq!(
        page("/schedules?limit=2&after=b"),
        (strings(&["c", "daily"]), json!("daily"))
    );
    assert_eq!(page("/schedules?after=daily"), (strings(&[]), Value::Null));
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
    let report = block_on(host.store.fire_due(now, 100, MAX_ATTEMPTS, &ids)).unwrap();
    assert_eq!(report.plan.keys(), ["hourly:2026-11-18T12:00:00.000Z"]);
    let batch = host.ok(GET, "/batches/fired-1", None, 200);
    assert_eq!(
        (
            batch["key"].clone(),
            batch["schedule_id"].clone(),
            batch["total"].clone()
        ),
        (
            json!("hourly:2026-11-18T12:00:00.000Z"),
            json!("hourly"),
            json!(2)
        )
    );
    let hourly = host.ok(GET, "/schedules/hourly", None, 200);
    assert_eq!(
        (
            hourly["last_fired_at"].clone(),
            hourly["last_batch_id"].clone(),
            hourly["next_fire_at"].clone()
        ),
        (
            json!("2026-11-18T12:00:05.000Z"),
            json!("fired-1"),
            json!("2026-11-18T13:00:00.000Z")
        )
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

// ---------------------------------------------------------------- rate, ETA, timeline

#[test]
fn a_running_batch_has_a_rate_and_eta_from_recent_summaries() {
    let host = setup();
    let items: Vec<Value> = (0..10).map(|n| item(&format!("x{n}"))).collect();
    host.ok(POST, "/batches", Some(json!({"items": items})), 201);
    // The batch was created 10 minutes ago; in the last 5 minutes the summaries
    // ended 3 of its items (and 7 of another batch's), earlier ones 2 more.
    host.now.set(NOW + 600_000);
    mark_ended(&host, "batch-1", 5);
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
    host.ok(POST, "/batches", Some(json!({"items": [item("x")]})), 201);
    // Just created: no span to measure a rate over.
    let got = host.ok(GET, "/batches/batch-1", None, 200);
    assert_eq!(
        (&got["rate_per_min"], &got["eta"]),
        (&json!(null), &json!(null))
    );
    // Running for a minute with nothing ended: a rate of zero, no ETA.
    host.now.set(NOW + 60_000);
    let got = host.ok(GET, "/batches/batch-1", None, 200);
    assert_eq!(
        (&got["rate_per_min"], &got["eta"]),
        (&json!(0.0), &json!(null))
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
        (&got["rate_per_min"], &got["eta"]),
        (&json!(null), &json!(null))
    );
}

/// Moves `n` items of `batch` to completed (so the counters say what the
/// summaries say).
fn mark_ended(host: &Host, batch: &str, n: i64) {
    host.store
        .db()
        .conn()
        .execute_batch(&format!(
            // Counted as the group commit counts them: into the batch's counter in
            // the same transaction (sql/count_committed_outcomes.sql).
            "UPDATE cron_queue SET status = 'completed', completed_at = 1
             WHERE id IN (SELECT id FROM cron_queue WHERE batch_id = '{batch}' ORDER BY id LIMIT {n});
             UPDATE batches SET completed = completed + {n} WHERE id = '{batch}'"
        ))
        .unwrap();
}

#[test]
fn the_timeline_sums_summaries_per_bucket_within_the_batch_life() {
    let host = setup();
    host.ok(POST, "/batches", Some(json!({"items": [item("x")]})), 201);
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
    host.ok(POST, "/batches", Some(json!({"items": [item("x")]})), 201);
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
    host.ok(POST, "/batches", Some(json!({"items": [item("x")]})), 201);
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

// ---------------------------------------------------------------- metrics

#[test]
fn metrics_report_the_queue_and_the_last_hour() {
    let host = setup();
    let items: Vec<Value> = (0..6).map(|n| item(&format!("x{n}"))).collect();
    host.ok(POST, "/batches", Some(json!({"items": items})), 201);
    host.now.set(NOW + 90_000);
    mark_ended(&host, "batch-1", 2);
    host.store
        .db()
        .conn()
        .execute(
            "UPDATE cron_queue SET status = 'processing', lease_token = 't', lease_expires_at = ?1
             WHERE subject_id = 'x5'",
            [NOW + 200_000],
        )
        .unwrap();
    host.invocation(60_000, &[("batch-1", 2, 0)]);
    host.invocation(2 * 3_600_000, &[("batch-1", 50, 0)]); // older than an hour
    let text = host.text(&admin(GET, "/metrics")).body;
    for line in [
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
    ] {
        assert!(
            text.contains(&format!("\n{line}\n")),
            "no {line:?} in\n{text}"
        );
    }
    host.get_refused("/metrics?format=json", 400, "invalid_query");
}

/// A paused (or cancelled) batch's in-flight items finish, but the batch is not
/// running: its items are none of `cron_fanout_batch_items`.
#[test]
fn metrics_leave_out_the_in_flight_items_of_batches_not_running() {
    let host = setup();
    for n in 0..2 {
        let items: Vec<Value> = (0..3).map(|i| item(&format!("b{n}-{i}"))).collect();
        host.ok(POST, "/batches", Some(json!({"items": items})), 201);
    }
    // One item of each batch in flight; then batch-2 is paused.
    host.store
        .db()
        .conn()
        .execute(
            "UPDATE cron_queue SET status = 'processing', lease_token = 't', lease_expires_at = ?1
             WHERE subject_id IN ('b0-0', 'b1-0')",
            [NOW + 200_000],
        )
        .unwrap();
    host.ok(POST, "/batches/batch-2/pause", None, 200);
    let text = host.text(&admin(GET, "/metrics")).body;
    for line in [
        "cron_fanout_batches_running 1",
        "cron_fanout_batch_items{status=\"processing\"} 1",
        "cron_fanout_batch_items{status=\"pending\"} 2",
    ] {
        assert!(
            text.contains(&format!("\n{line}\n")),
            "no {line:?} in\n{text}"
        );
    }
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
            stop_reason: StopReason::Deadline,
        };
        block_on(host.store.record_invocation(&summary)).unwrap();
    }
    let text = host.text(&admin(GET, "/metrics")).body;
    for line in [
        "cron_fanout_last_hour_items{event=\"released\"} 3",
        "cron_fanout_last_hour_items{event=\"claimed\"} 4",
        "cron_fanout_last_hour_items{event=\"completed\"} 1",
        "cron_fanout_last_hour_invocations{stop_reason=\"deadline\"} 1",
    ] {
        assert!(
            text.contains(&format!("\n{line}\n")),
            "no {line:?} in\n{text}"
        );
    }
}

/// Moves `subjects`' items to failed and counts them into their batches, as the
/// group commit does (sql/count_committed_outcomes.sql).
fn mark_failed(host: &Host, subjects: &[&str]) {
    let list = subjects
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(",");
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
        let items: Vec<Value> = (0..3).map(|i| item(&format!("b{n}-{i}"))).collect();
        host.ok(POST, "/batches", Some(json!({"items": items})), 201);
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
    let text = host.text(&admin(GET, "/metrics")).body;
    for line in [
        "cron_fanout_dead_letters 3",
        // Running batches only: batch-2's one.
        "cron_fanout_batch_items{status=\"failed\"} 1",
    ] {
        assert!(
            text.contains(&format!("\n{line}\n")),
            "no {line:?} in\n{text}"
        );
    }
    // Every step of the plan is an index search or a scan of a partial index
    // (or of a subquery's rows); the failed items are read through theirs.
    let (sql, params) = host.store.db().last_query().expect("the scrape's query");
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
        let subquery =
            ["SCAN r", "SCAN h"].contains(&d.as_str()) || d.starts_with("SCAN (subquery");
        assert!(partial || subquery, "{d:?} in {plan:#?}");
    }
}

#[test]
fn docs_name_every_metric_and_only_those() {
    let docs = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.md"))
        .expect("docs/api.md");
    let families = cron_fanout::core::metrics::families(&Default::default(), NOW);
    let named = cron_fanout::core::metrics::names_in(&docs);
    let mut have: Vec<String> = families.iter().map(|f| f.name.to_string()).collect();
    have.sort();
    assert_eq!(
        named, have,
        "docs/api.md and core::metrics::families disagree"
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
    host.ok(
        POST,
        "/batches",
        Some(json!({"key": "secret-key", "items": [item("x")]})),
        201,
    );
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
        let subjects = hook_subjects("ok", url);
        host.ok(PUT, "/subjects", Some(subjects), 200);
    }
}

/// A `PUT /subjects` body of one webhook subject `id` posting to `url`.
fn hook_subjects(id: &str, url: &str) -> Value {
    json!({"subjects": [{"id": id, "kind": "webhook", "payload": {"url": url}}]})
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
        let subjects = hook_subjects("p", url);
        host.ok(PUT, "/subjects", Some(subjects), 200);
    }
}

#[test]
fn allow_private_targets_lets_local_development_use_them() {
    let mut host = setup();
    host.settings =
        Settings::from_lookup(|name| (name == "ALLOW_PRIVATE_TARGETS").then(|| "true".into()))
            .unwrap();
    for url in FORBIDDEN_TARGETS {
        let subjects = hook_subjects("t", url);
        host.ok(PUT, "/subjects", Some(subjects), 200);
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
    let mut host = setup();
    host.settings =
        Settings::from_lookup(|name| (name == "ALLOW_PRIVATE_TARGETS").then(|| "true".into()))
            .unwrap();
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

// ---------------------------------------------------------------- batch control and replay

/// A batch `key` of `n` no-op items (subjects `<key>-0`...), created now; its id.
fn new_batch(host: &Host, key: &str, n: usize) -> String {
    let items: Vec<Value> = (0..n).map(|i| item(&format!("{key}-{i}"))).collect();
    let got = host.ok(
        POST,
        "/batches",
        Some(json!({"key": key, "items": items})),
        201,
    );
    got["id"].as_str().unwrap().to_string()
}

/// What a tick would do to every due item: claim it, commit `outcome` of its
/// subject, then the finish check.
fn run_due(host: &Host, outcome: impl Fn(&str) -> Outcome) {
    let now = host.now.get();
    let claimed = block_on(host.store.claim_due_items(now, 1_000, "t", now + 60_000)).unwrap();
    let done: Vec<Transition> = claimed
        .iter()
        .map(|c| decide(c, &outcome(&c.subject_id), host.settings.retry, now, 0.0))
        .collect();
    block_on(host.store.commit_outcomes(&done)).unwrap();
    block_on(host.store.finish_batches(now)).unwrap();
}

fn batch_json(host: &Host, id: &str) -> Value {
    host.ok(GET, &format!("/batches/{id}"), None, 200)
}

fn item_rows(host: &Host, id: &str, status: &str) -> Vec<Value> {
    let got = host.ok(
        GET,
        &format!("/batches/{id}/items?status={status}"),
        None,
        200,
    );
    got["items"].as_array().unwrap().clone()
}

fn event_names(host: &Host) -> Vec<String> {
    host.events
        .borrow()
        .iter()
        .map(|(n, _)| n.clone())
        .collect()
}

#[test]
fn pause_and_resume_move_once_and_repeat_as_no_ops() {
    let host = setup();
    let id = new_batch(&host, "p", 3);
    let paused = host.ok(POST, &format!("/batches/{id}/pause"), None, 200);
    assert_eq!(paused["status"], json!("paused"));
    assert_eq!(paused["pending"], json!(3));
    // A paused batch is not claimed.
    run_due(&host, |_| Outcome::Done);
    assert_eq!(batch_json(&host, &id)["completed"], json!(0));

    let before = host.fingerprint();
    let again = host.ok(POST, &format!("/batches/{id}/pause"), None, 200);
    assert_eq!(again, paused, "a repeated pause answers the same batch");
    assert_eq!(host.fingerprint(), before, "and writes nothing");

    let resumed = host.ok(POST, &format!("/batches/{id}/resume"), None, 200);
    assert_eq!(resumed["status"], json!("running"));
    let before = host.fingerprint();
    host.ok(POST, &format!("/batches/{id}/resume"), None, 200);
    assert_eq!(host.fingerprint(), before);
    assert_eq!(
        event_names(&host),
        ["batch_created", "batch_paused", "batch_resumed"]
    );

    run_due(&host, |_| Outcome::Done);
    let done = batch_json(&host, &id);
    assert_eq!(
        (&done["status"], &done["completed"]),
        (&json!("finished"), &json!(3))
    );
}

#[test]
fn cancel_sweeps_pending_items_and_leaves_those_in_flight() {
    let host = setup();
    let id = new_batch(&host, "c", 5);
    // Two items are claimed: in flight when the cancel comes.
    let now = host.now.get();
    let claimed = block_on(host.store.claim_due_items(now, 2, "t", now + 60_000)).unwrap();
    let got = host.ok(POST, &format!("/batches/{id}/cancel"), None, 200);
    assert_eq!(
        (
            &got["status"],
            &got["pending"],
            &got["processing"],
            &got["cancelled"]
        ),
        (&json!("cancelled"), &json!(0), &json!(2), &json!(3))
    );
    assert_eq!(
        got["finished_at"],
        Value::Null,
        "two items are still in flight"
    );
    let cancelled = item_rows(&host, &id, "cancelled");
    assert_eq!(cancelled.len(), 3);
    for i in &cancelled {
        assert_eq!(i["last_error"], json!("batch cancelled"));
        assert_eq!(i["completed_at"], json!(rfc3339(now)));
    }
    // Repeating it writes nothing.
    let before = host.fingerprint();
    assert_eq!(
        host.ok(POST, &format!("/batches/{id}/cancel"), None, 200),
        got
    );
    assert_eq!(host.fingerprint(), before);

    // The in-flight items commit normally; the batch then ends cancelled.
    let done: Vec<Transition> = claimed
        .iter()
        .map(|c| decide(c, &Outcome::Done, host.settings.retry, now, 0.0))
        .collect();
    assert_eq!(
        block_on(host.store.commit_outcomes(&done)).unwrap().len(),
        2
    );
    let ended = block_on(host.store.finish_batches(now + 1)).unwrap();
    assert_eq!(ended.len(), 1);
    assert_eq!(
        (ended[0].status.as_str(), ended[0].cancelled),
        ("cancelled", 3)
    );
    let b = batch_json(&host, &id);
    assert_eq!(
        (
            &b["status"],
            &b["completed"],
            &b["cancelled"],
            &b["percent"]
        ),
        (&json!("cancelled"), &json!(2), &json!(3), &json!(100.0))
    );
    assert_eq!(b["finished_at"], json!(rfc3339(now + 1)));
}

#[test]
fn impossible_transitions_are_409_and_write_nothing() {
    let host = setup();
    let finished = new_batch(&host, "f", 2);
    run_due(&host, |s| {
        if s.ends_with("-0") {
            Outcome::Done
        } else {
            Outcome::Fail("HTTP 400".into())
        }
    });
    assert_eq!(batch_json(&host, &finished)["status"], json!("finished"));
    let cancelled = new_batch(&host, "x", 2);
    host.ok(POST, &format!("/batches/{cancelled}/cancel"), None, 200);

    for (batch, action) in [
        (&finished, "pause"),
        (&finished, "resume"),
        (&finished, "cancel"),
        (&cancelled, "pause"),
        (&cancelled, "resume"),
    ] {
        let message = host.refused(
            &admin(POST, &format!("/batches/{batch}/{action}")),
            b"",
            409,
            "invalid_transition",
        );
        assert!(message.contains(action), "{message}");
    }
    let replay = json!({"status": "failed"}).to_string();
    let message = host.refused(
        &admin(POST, &format!("/batches/{cancelled}/retry")),
        replay.as_bytes(),
        409,
        "invalid_transition",
    );
    assert!(message.contains("cancelled"), "{message}");
    // Items: a completed one, and a cancelled one.
    let completed = item_rows(&host, &finished, "completed")[0]["id"]
        .as_i64()
        .unwrap();
    let swept = item_rows(&host, &cancelled, "cancelled")[0]["id"]
        .as_i64()
        .unwrap();
    for item in [completed, swept] {
        host.refused(
            &admin(POST, &format!("/items/{item}/retry")),
            b"",
            409,
            "invalid_transition",
        );
    }
}

#[test]
fn control_routes_answer_404_for_unknown_batches_and_items() {
    let host = setup();
    for action in ["pause", "resume", "cancel"] {
        host.refused(
            &admin(POST, &format!("/batches/nope/{action}")),
            b"",
            404,
            "not_found",
        );
    }
    let body = json!({"status": "failed"}).to_string();
    host.refused(
        &admin(POST, "/batches/nope/retry"),
        body.as_bytes(),
        404,
        "not_found",
    );
    host.refused(&admin(POST, "/items/99/retry"), b"", 404, "not_found");
    for bad in ["x", "0", "-3", "1.5", "%20"] {
        host.refused(
            &admin(POST, &format!("/items/{bad}/retry")),
            b"",
            400,
            "invalid_id",
        );
    }
    // They take no query parameters.
    let id = new_batch(&host, "q", 1);
    for action in ["pause", "resume", "cancel"] {
        host.refused(
            &admin(POST, &format!("/batches/{id}/{action}?now=1")),
            b"",
            400,
            "invalid_query",
        );
    }
    host.refused(
        &admin(POST, "/items/1/retry?x=1"),
        b"",
        400,
        "invalid_query",
    );
}

#[test]
fn retry_bodies_are_validated_before_anything_is_read_or_written() {
    let host = setup();
    let id = new_batch(&host, "r", 2);
    run_due(&host, |_| Outcome::Fail("HTTP 500".into()));
    let path = format!("/batches/{id}/retry");
    for (body, code) in [
        (json!({}), "invalid_json"),
        (json!({"status": "failed", "extra": 1}), "invalid_json"),
        (json!({"status": "failed", "limit": "ten"}), "invalid_json"),
        (json!({"status": "completed"}), "invalid_retry"),
        (json!({"status": "failed", "limit": 0}), "invalid_retry"),
        (
            json!({"status": "failed", "limit": 100_001}),
            "invalid_retry",
        ),
        (
            json!({"status": "failed", "error_contains": ""}),
            "invalid_retry",
        ),
    ] {
        host.bad(POST, &path, &body, code);
    }
    host.refused(
        &request(POST, &path, Some(TOKEN), None),
        b"{\"status\":\"failed\"}",
        415,
        "unsupported_media_type",
    );
    host.refused(
        &admin(POST, &format!("{path}?limit=1")),
        b"{\"status\":\"failed\"}",
        400,
        "invalid_query",
    );
    let over = format!(
        r#"{{"status":"failed","error_contains":"{}"}}"#,
        "x".repeat(MAX_BODY_BYTES)
    );
    host.refused(
        &admin(POST, &path),
        over.as_bytes(),
        413,
        "payload_too_large",
    );
    assert_eq!(
        batch_json(&host, &id)["failed"],
        json!(2),
        "nothing was requeued"
    );
}

#[test]
fn replay_requeues_matching_failures_reopens_the_batch_and_keeps_counters_exact() {
    let host = setup();
    let id = new_batch(&host, "d", 4);
    run_due(&host, |s| match s {
        "d-0" => Outcome::Done,
        "d-3" => Outcome::Fail("HTTP 400".into()),
        _ => Outcome::Fail("HTTP 503".into()),
    });
    let b = batch_json(&host, &id);
    assert_eq!(
        (&b["status"], &b["failed"]),
        (&json!("finished"), &json!(3))
    );

    host.now.set(NOW + 60_000);
    let body = json!({"status": "failed", "error_contains": "HTTP 5"});
    let got = host.ok(
        POST,
        &format!("/batches/{id}/retry"),
        Some(body.clone()),
        200,
    );
    assert_eq!(got, json!({"requeued": 2}));
    let b = batch_json(&host, &id);
    assert_eq!(
        (&b["status"], &b["failed"], &b["pending"], &b["finished_at"]),
        (&json!("running"), &json!(1), &json!(2), &Value::Null)
    );
    for i in item_rows(&host, &id, "pending") {
        assert_eq!(i["attempt"], json!(1), "the attempt counter keeps counting");
        assert_eq!(
            i["max_attempts"],
            json!(2 * MAX_ATTEMPTS),
            "a fresh allowance"
        );
        assert_eq!(
            i["last_error"],
            json!("permanent failure: HTTP 503"),
            "the last error stays"
        );
        assert_eq!(i["run_after"], json!(rfc3339(NOW + 60_000)), "due now");
        assert_eq!(i["completed_at"], Value::Null);
    }
    assert_eq!(event_names(&host).last().unwrap(), "items_requeued");
    // The same replay again finds them pending: nothing more.
    let before = host.fingerprint();
    let again = host.ok(POST, &format!("/batches/{id}/retry"), Some(body), 200);
    assert_eq!(again, json!({"requeued": 0}));
    assert_eq!(host.fingerprint(), before);

    // Delivered once more, the batch finishes again.
    run_due(&host, |_| Outcome::Done);
    let b = batch_json(&host, &id);
    assert_eq!(
        (&b["status"], &b["completed"], &b["failed"]),
        (&json!("finished"), &json!(3), &json!(1))
    );
    let limited = json!({"status": "failed", "limit": 1});
    assert_eq!(
        host.ok(POST, &format!("/batches/{id}/retry"), Some(limited), 200),
        json!({"requeued": 1})
    );
    assert_eq!(batch_json(&host, &id)["failed"], json!(0));
}

#[test]
fn replay_into_a_paused_batch_waits_for_resume() {
    let host = setup();
    let id = new_batch(&host, "v", 2);
    // v-0 fails for good, v-1 waits for its retry: the batch is still running.
    run_due(&host, |s| {
        if s == "v-0" {
            Outcome::Fail("HTTP 500".into())
        } else {
            Outcome::Retry("HTTP 503".into())
        }
    });
    host.ok(POST, &format!("/batches/{id}/pause"), None, 200);
    let body = json!({"status": "failed"});
    let got = host.ok(POST, &format!("/batches/{id}/retry"), Some(body), 200);
    assert_eq!(got, json!({"requeued": 1}));
    let b = batch_json(&host, &id);
    assert_eq!((&b["status"], &b["pending"]), (&json!("paused"), &json!(2)));
    // Both are due, but nothing of a paused batch is claimed.
    host.now.set(NOW + 3_600_000);
    run_due(&host, |_| Outcome::Done);
    assert_eq!(batch_json(&host, &id)["completed"], json!(0));
    host.ok(POST, &format!("/batches/{id}/resume"), None, 200);
    run_due(&host, |_| Outcome::Done);
    let b = batch_json(&host, &id);
    assert_eq!(
        (&b["status"], &b["completed"]),
        (&json!("finished"), &json!(2))
    );
}

#[test]
fn item_replay_requeues_one_failed_item_once() {
    let host = setup();
    let id = new_batch(&host, "i", 2);
    run_due(&host, |s| {
        if s == "i-0" {
            Outcome::Done
        } else {
            Outcome::Fail("HTTP 410".into())
        }
    });
    let failed = item_rows(&host, &id, "failed")[0]["id"].as_i64().unwrap();
    let got = host.ok(POST, &format!("/items/{failed}/retry"), None, 200);
    assert_eq!(got, json!({"requeued": 1}));
    let b = batch_json(&host, &id);
    assert_eq!(
        (&b["status"], &b["failed"], &b["pending"]),
        (&json!("running"), &json!(0), &json!(1))
    );
    let before = host.fingerprint();
    assert_eq!(
        host.ok(POST, &format!("/items/{failed}/retry"), None, 200),
        json!({"requeued": 0})
    );
    assert_eq!(host.fingerprint(), before);
    let (name, fields) = host.events.borrow().last().unwrap().clone();
    assert_eq!(name, "item_requeued");
    assert_eq!(fields, json!({"batch_id": id, "item_id": failed}));
}

// ---------------------------------------------------------------- delivery

const HOOK: &str = "https://hooks.example.com/batch-done";

/// Claim every due row (items and callbacks) and commit `outcome` for each.
fn run_rows(host: &Host, outcome: Outcome) -> Vec<i64> {
    let now = host.now.get();
    let claimed = block_on(host.store.claim_due_items(now, 1_000, "r", now + 60_000)).unwrap();
    let done: Vec<Transition> = claimed
        .iter()
        .map(|c| decide(c, &outcome, host.settings.retry, now, 0.0))
        .collect();
    block_on(host.store.commit_outcomes(&done)).unwrap()
}

#[test]
fn on_finish_is_validated_like_a_webhook_target_before_anything_is_written() {
    let host = setup();
    let post =
        |on_finish: Value| json!({"key": "cb", "items": [item("a")], "on_finish": on_finish});
    for url in [
        "ftp://hooks.example.com/x",
        "http://127.0.0.1:9000/done",
        "http://169.254.169.254/latest/meta-data",
        "https://user:pw@hooks.example.com/",
        "https://hooks.example.com/ x",
        "not a url",
    ] {
        let message = host.bad(
            POST,
            "/batches",
            &post(json!({"url": url})),
            "invalid_on_finish",
        );
        assert!(message.starts_with("on_finish.url"), "{url}: {message}");
    }
    for shape in [json!({}), json!({"url": HOOK, "secret": "x"}), json!(HOOK)] {
        host.bad(POST, "/batches", &post(shape), "invalid_json");
    }
    // The items are checked too, whatever on_finish says.
    let bad_item = json!({"items": [{"subject_id": "a", "kind": "email", "payload": {}}], "on_finish": {"url": HOOK}});
    host.bad(POST, "/batches", &bad_item, "invalid_payload");
    let created = host.ok(POST, "/batches", Some(post(json!({"url": HOOK}))), 201);
    assert_eq!(created["on_finish"], json!({"url": HOOK}));
    assert_eq!(
        created["callback"],
        json!({"status": "pending", "attempts": 0, "last_error": null})
    );
    // The key exists: the existing batch is answered as it is, nothing written.
    let before = host.fingerprint();
    let again = host.ok(
        POST,
        "/batches",
        Some(json!({"key": "cb", "items": [item("a")], "on_finish": {"url": "https://other.example.com/"}})),
        200,
    );
    assert_eq!(again["on_finish"], json!({"url": HOOK}));
    assert_eq!(host.fingerprint(), before);
}

/// `OWN_HOSTNAMES` names the Worker's other hostnames (its custom domain and its
/// `*.workers.dev` name): no webhook, channel or callback may target them, on any
/// port, whichever host the request came in on. Each route answers its own code
/// for a bad target, and writes nothing.
#[test]
fn the_workers_other_hostnames_are_no_targets() {
    let mut host = setup();
    host.settings = Settings::from_lookup(|name| {
        (name == "OWN_HOSTNAMES")
            .then(|| " Fanout.Example.com , cron-fanout.acct.workers.dev.".into())
    })
    .unwrap();
    // Requests come in on the custom domain; the workers.dev name is the other one.
    let on_domain = |method: Method, path: &str| {
        let mut req = admin(method, path);
        req.host = Some("fanout.example.com:443".into());
        req
    };
    for url in [
        "https://cron-fanout.acct.workers.dev/batches",
        "http://CRON-FANOUT.acct.workers.dev.:8443/x",
        "https://fanout.example.com:8443/subjects",
    ] {
        let subjects = hook_subjects("self", url);
        let multi = json!({"subjects": [{"id": "m", "kind": "multi",
            "payload": {"channels": [{"name": "a", "url": "https://example.com/a"}, {"name": "b", "url": url}]}}]});
        let items =
            json!({"items": [{"subject_id": "i", "kind": "webhook", "payload": {"url": url}}]});
        let on_finish = json!({"items": [item("a")], "on_finish": {"url": url}});
        let schedule = json!({"every_seconds": 3600, "on_finish": {"url": url}});
        for (method, path, body, code) in [
            (PUT, "/subjects", subjects, "invalid_payload"),
            (PUT, "/subjects", multi, "invalid_payload"),
            (POST, "/batches", items, "invalid_payload"),
            (POST, "/batches", on_finish, "invalid_on_finish"),
            (PUT, "/schedules/hourly", schedule, "invalid_on_finish"),
        ] {
            let req = on_domain(method, path);
            let message = host.refused(&req, body.to_string().as_bytes(), 400, code);
            assert!(message.contains("OWN_HOSTNAMES"), "{url}: {message}");
        }
    }
    let fine = hook_subjects("other", "https://hooks.example.com/x");
    let (status, answer) = host.call(&on_domain(PUT, "/subjects"), fine.to_string().as_bytes());
    assert_eq!(status, 200, "{answer}");
}

#[test]
fn the_worker_itself_is_no_callback_target() {
    let mut host = setup();
    host.settings =
        Settings::from_lookup(|name| (name == "ALLOW_PRIVATE_TARGETS").then(|| "true".into()))
            .unwrap();
    let mut req = admin(POST, "/batches");
    req.host = Some("127.0.0.1:8787".into());
    let body = json!({"items": [item("a")], "on_finish": {"url": "http://127.0.0.1:8787/batches"}});
    let message = host.refused(&req, body.to_string().as_bytes(), 400, "invalid_on_finish");
    assert!(message.contains("own host"), "{message}");
    let body = json!({"items": [item("a")], "on_finish": {"url": "http://127.0.0.1:9000/done"}});
    let (status, _) = host.call(&req, body.to_string().as_bytes());
    assert_eq!(status, 201, "a private target is allowed by the setting");
}

#[test]
fn a_batch_shows_its_callback_from_the_end_to_the_delivery() {
    let host = setup();
    let created = host.ok(
        POST,
        "/batches",
        Some(json!({"key": "cb", "items": [item("a"), item("b")], "on_finish": {"url": HOOK}})),
        201,
    );
    let id = created["id"].as_str().unwrap();
    let plain = new_batch(&host, "plain", 1);
    run_due(&host, |_| Outcome::Done);
    let ended = batch_json(&host, id);
    assert_eq!(
        (
            ended["status"].clone(),
            ended["total"].clone(),
            ended["processing"].clone()
        ),
        (json!("finished"), json!(2), json!(0))
    );
    assert_eq!(
        ended["callback"],
        json!({"status": "pending", "attempts": 0, "last_error": null})
    );
    assert_eq!(batch_json(&host, &plain)["callback"], Value::Null);
    // A first delivery fails: still pending, with the attempt and the reason.
    host.now.set(NOW + 10);
    let tried = run_rows(&host, Outcome::Retry("HTTP 503".into()));
    assert_eq!(tried.len(), 1, "only the callback was due");
    let callback_id = tried[0];
    let retrying = batch_json(&host, id);
    assert_eq!(
        retrying["callback"],
        json!({"status": "pending", "attempts": 1, "last_error": "attempt 1 failed: HTTP 503"})
    );
    assert_eq!(
        (
            retrying["completed"].clone(),
            retrying["pending"].clone(),
            retrying["percent"].clone()
        ),
        (json!(2), json!(0), json!(100.0)),
        "the callback is no item"
    );
    host.now.set(NOW + 3_600_000);
    assert_eq!(run_rows(&host, Outcome::Done), vec![callback_id]);
    assert_eq!(
        batch_json(&host, id)["callback"],
        json!({"status": "delivered", "attempts": 2, "last_error": null})
    );
    let listed = host.ok(GET, "/batches", None, 200);
    let mine = listed["batches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == json!(id))
        .unwrap();
    assert_eq!(mine["callback"]["status"], json!("delivered"));
    let items = host.ok(GET, &format!("/batches/{id}/items"), None, 200);
    assert_eq!(
        column(&items, "items", "subject_id"),
        strings(&["a", "b"]),
        "the callback is not listed"
    );
    // Its row is no item: replaying it by id finds nothing.
    host.refused(
        &admin(POST, &format!("/items/{callback_id}/retry")),
        b"",
        404,
        "not_found",
    );
}

#[test]
fn schedules_carry_on_finish_to_every_batch_they_fire() {
    let host = setup();
    let body = |on_finish: Value| json!({"every_seconds": 3600, "on_finish": on_finish});
    for url in ["http://10.0.0.1/done", "gopher://hooks.example.com/"] {
        host.bad(
            PUT,
            "/schedules/hourly",
            &body(json!({"url": url})),
            "invalid_on_finish",
        );
    }
    host.bad(
        PUT,
        "/schedules/hourly",
        &body(json!({"uri": HOOK})),
        "invalid_json",
    );
    let created = host.ok(
        PUT,
        "/schedules/hourly",
        Some(body(json!({"url": HOOK}))),
        201,
    );
    assert_eq!(created["on_finish"], json!({"url": HOOK}));
    assert_eq!(
        host.ok(GET, "/schedules/hourly", None, 200)["on_finish"],
        json!({"url": HOOK})
    );
    // Fired: its batch calls back.
    host.put_subjects(json!([subject("a")]));
    let fire_at = created["next_fire_at"].as_str().unwrap();
    host.now.set(
        chrono::DateTime::parse_from_rfc3339(fire_at)
            .unwrap()
            .timestamp_millis(),
    );
    let new_id = || "fired-1".to_string();
    block_on(
        host.store
            .fire_due(host.now.get(), 10, MAX_ATTEMPTS, &new_id),
    )
    .unwrap();
    assert_eq!(
        batch_json(&host, "fired-1")["on_finish"],
        json!({"url": HOOK})
    );
    // A replace without on_finish removes it; the fired batch keeps its own.
    let replaced = host.ok(
        PUT,
        "/schedules/hourly",
        Some(json!({"every_seconds": 3600})),
        200,
    );
    assert_eq!(replaced["on_finish"], Value::Null);
    assert_eq!(
        batch_json(&host, "fired-1")["on_finish"],
        json!({"url": HOOK})
    );
}

fn multi_subject(id: &str, channels: Value) -> Value {
    json!({"id": id, "kind": "multi", "payload": {"channels": channels, "data": {"n": 1}}})
}

#[test]
fn multi_payloads_are_validated_when_written() {
    let host = setup();
    let ch = |name: &str, url: &str| json!({"name": name, "url": url});
    let email = ch("email", "https://mail.example.com/hook");
    let many: Vec<Value> = (0..9)
        .map(|i| ch(&format!("c{i}"), "https://example.com/"))
        .collect();
    for (channels, says) in [
        (json!([]), "1 to 8"),
        (Value::Array(many), "1 to 8"),
        (json!([email.clone(), email.clone()]), "appears twice"),
        (json!([ch("", "https://example.com/")]), "channels[0].name"),
        (
            json!([ch(&"n".repeat(65), "https://example.com/")]),
            "at most 64",
        ),
        (
            json!([email.clone(), ch("push", "http://192.168.1.2/push")]),
            "channels[1].url",
        ),
        (json!([{"name": "email"}]), "multi payload must be"),
    ] {
        let body = json!({"subjects": [multi_subject("m", channels.clone())]});
        let message = host.bad(PUT, "/subjects", &body, "invalid_payload");
        assert!(message.contains(says), "{channels}: {message}");
        let batch = json!({"items": [{"subject_id": "m", "kind": "multi", "payload": {"channels": channels}}]});
        host.bad(POST, "/batches", &batch, "invalid_payload");
    }
    let secret = json!({"id": "m", "kind": "multi", "payload": {"channels": [email], "signing_secret": "subject-secret-0123"}});
    host.put_subjects(json!([secret]));
    let listed = host.ok(GET, "/subjects/m", None, 200);
    assert_eq!(listed["payload"]["signing_secret"], json!("[redacted]"));
    assert_eq!(listed["payload"]["channels"][0]["name"], json!("email"));
}

#[test]
fn items_show_receipts_for_kinds_with_channels_only() {
    let host = setup();
    let channels = json!([{"name": "email", "url": "https://mail.example.com/"},
                          {"name": "push", "url": "https://push.example.com/"}]);
    host.ok(
        POST,
        "/batches",
        Some(json!({"key": "mixed", "items": [
            {"subject_id": "m", "kind": "multi", "payload": {"channels": channels}},
            item("n")]})),
        201,
    );
    let list = || host.ok(GET, "/batches/batch-1/items", None, 200)["items"].clone();
    assert_eq!(
        (list()[0]["receipts"].clone(), list()[1]["receipts"].clone()),
        (json!({}), Value::Null),
        "a multi item before its first run; a noop item"
    );
    let now = host.now.get();
    let claimed = block_on(host.store.claim_due_items(now, 10, "r", now + 60_000)).unwrap();
    let multi = claimed.iter().find(|c| c.kind == "multi").unwrap();
    let results = cron_fanout::core::receipts::ChannelResults::from([
        ("email".to_string(), Outcome::Done),
        ("push".to_string(), Outcome::Retry("HTTP 503".into())),
    ]);
    let mut t = decide(
        multi,
        &cron_fanout::core::receipts::outcome(&results),
        host.settings.retry,
        now,
        0.0,
    );
    t.receipts = cron_fanout::core::receipts::settle(multi, Some(&results), t.status, now);
    block_on(host.store.commit_outcomes([&t])).unwrap();
    let shown = list();
    assert_eq!(
        shown[0]["receipts"],
        json!({"email": {"status": "delivered", "at": rfc3339(now)},
               "push": {"status": "pending", "error": "HTTP 503"}})
    );
    assert_eq!(
        shown[0]["last_error"],
        json!("attempt 1 failed: channel push: HTTP 503")
    );
    assert_eq!(shown[1]["receipts"], Value::Null);
}

/// `service` items name a binding the Worker may call (listed in
/// `SERVICE_BINDINGS` and bound: the edge passes those as `App::services`) and an
/// absolute path: anything else is refused when subjects or items are written,
/// with nothing written.
#[test]
fn service_items_naming_an_uncallable_binding_or_a_bad_path_are_refused() {
    let mut host = setup();
    host.services = vec!["HANDLER".into()];
    let subject =
        |payload: Value| json!({"subjects": [{"id": "u1", "kind": "service", "payload": payload}]});
    let item = |payload: Value| json!({"items": [{"subject_id": "u1", "kind": "service", "payload": payload}]});
    for (payload, says) in [
        // Not listed in SERVICE_BINDINGS, or listed but not bound: not callable.
        (json!({"service": "OTHER"}), "SERVICE_BINDINGS"),
        (json!({"service": "SELF"}), "SERVICE_BINDINGS"),
        (json!({"service": "HANDLER", "path": "users"}), "path"),
        (json!({"service": "HANDLER", "path": "/a b"}), "path"),
        (json!({"service": "HANDLER", "path": "/a#b"}), "path"),
        (
            json!({"service": "HANDLER", "url": "https://example.com"}),
            "service payload",
        ),
        (json!({"path": "/"}), "service payload"),
    ] {
        let message = host.bad(
            PUT,
            "/subjects",
            &subject(payload.clone()),
            "invalid_payload",
        );
        assert!(message.contains(says), "{payload}: {message}");
        let message = host.bad(POST, "/batches", &item(payload.clone()), "invalid_payload");
        assert!(message.contains(says), "{payload}: {message}");
    }
    // With no callable binding, none is accepted.
    host.services.clear();
    host.bad(
        PUT,
        "/subjects",
        &subject(json!({"service": "HANDLER"})),
        "invalid_payload",
    );
    host.services = vec!["HANDLER".into()];
    let ok = json!({"service": "HANDLER", "path": "/streak?tz=UTC", "data": {"login": "ada"}});
    host.put_subjects(json!([{"id": "u1", "kind": "service", "payload": ok}]));
    host.ok(
        POST,
        "/batches",
        Some(item(json!({"service": "HANDLER"}))),
        201,
    );
}
