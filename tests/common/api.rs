//! What the API suites (`tests/api_*.rs`) share: the host side of the API
//! (`Host`: the real route table, admin auth and handlers of `cron_fanout::api`
//! over the store of [`super::setup`]), requests as the edge builds them, and the
//! checks every refusal goes through (`Host::refused`: the documented error shape,
//! and every row of every table unchanged).

use std::cell::{Cell, RefCell};

use cron_fanout::api::routes::{self, Target};
use cron_fanout::api::{self, App, BodySource, Method, Request, Served, Text};
use cron_fanout::core::error::ApiError;
use cron_fanout::core::model::{BatchTally, InvocationSummary, StopReason, Tally, Trigger};
use cron_fanout::core::model::{Outcome, Transition};
use cron_fanout::core::retry::decide;
use cron_fanout::core::settings::Settings;
use cron_fanout::jobs::Jobs;
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::Store;
use futures::executor::block_on;
use serde_json::{json, Value};

/// The methods as the suites spell them (each suite uses some).
#[allow(unused_imports)]
pub use cron_fanout::api::Method::{Delete as DELETE, Get as GET, Post as POST, Put as PUT};

pub const TOKEN: &str = "test-admin-token-0123456789";
/// `METRICS_TOKEN` of [`setup`]'s host: `GET /metrics` only.
pub const METRICS_TOKEN: &str = "test-metrics-token-0123456789";
/// 2026-11-18T11:06:40.123Z
pub const NOW: i64 = 1_795_000_000_123;
/// Not the default (5), so a test can tell it came from the settings.
pub const MAX_ATTEMPTS: i64 = 3;

/// The host side of the API: what the edge supplies on the Worker (store, settings,
/// clock, ids, log), here chosen by the test.
pub struct Host {
    pub store: Store<SqliteDb>,
    pub settings: Settings,
    pub now: Cell<i64>,
    pub ids: Cell<u32>,
    pub events: RefCell<Vec<(String, Value)>>,
    pub metrics_token: Option<&'static str>,
    /// The service bindings the edge found callable (listed and bound).
    pub services: Vec<String>,
    /// The job kinds: the built-in ones unless a test registers its own.
    pub jobs: Jobs,
}

pub fn setup() -> Host {
    let settings = Settings::from_lookup(|name| (name == "MAX_ATTEMPTS").then(|| "3".into()))
        .expect("valid settings");
    assert_eq!(settings.max_attempts, MAX_ATTEMPTS);
    Host {
        store: super::setup(),
        settings,
        now: Cell::new(NOW),
        ids: Cell::new(0),
        events: RefCell::new(Vec::new()),
        metrics_token: Some(METRICS_TOKEN),
        services: Vec::new(),
        jobs: Jobs::builtin(),
    }
}

/// [`setup`]'s host with `ALLOW_PRIVATE_TARGETS=true`, as local development runs it.
pub fn setup_allowing_private_targets() -> Host {
    let mut host = setup();
    host.settings =
        Settings::from_lookup(|name| (name == "ALLOW_PRIVATE_TARGETS").then(|| "true".into()))
            .unwrap();
    host
}

/// A request as the edge builds it: `target` is the raw path and query.
pub fn request(
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
pub fn admin(method: Method, target: &str) -> Request {
    request(method, target, Some(TOKEN), Some("application/json"))
}

/// A body that records whether anyone read it.
pub struct Tracked<'a> {
    pub bytes: &'a [u8],
    pub read: &'a Cell<bool>,
}

impl BodySource for Tracked<'_> {
    async fn read(self, limit: usize) -> Result<Vec<u8>, ApiError> {
        self.read.set(true);
        self.bytes.read(limit).await
    }
}

impl Host {
    /// Route and answer `req` the way `edge::http` does.
    pub fn serve(&self, req: &Request, body: impl BodySource) -> Result<Served, ApiError> {
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
            jobs: &self.jobs,
            services: &self.services,
        };
        let route = routes::find(req.method, &req.segments)?;
        match route.target {
            Target::Health => Ok(api::health().into()),
            Target::Run => panic!("POST /internal/run needs the runtime (e2e suite)"),
            Target::ProbeTask => panic!("POST /internal/probe needs the runtime (e2e suite)"),
            Target::Page(asset) => Ok(Served::Text(api::page::serve(asset))),
            Target::OpenApi => Ok(Served::Text(api::openapi::serve())),
            Target::Admin(_) => block_on(api::serve(&app, route, req, body)),
        }
    }

    /// Status and JSON body, as the client sees them (errors included).
    pub fn call(&self, req: &Request, body: &[u8]) -> (u16, Value) {
        match self.serve(req, body) {
            Ok(Served::Json(status, body)) => (status, body),
            Ok(Served::Text(t)) => (t.status, Value::String(t.body)),
            Ok(Served::Probe(p)) => panic!("a probe is run by the edge: {p:?}"),
            Err(e) => (e.status(), e.body()),
        }
    }

    /// An admin call that must succeed with `status`.
    pub fn ok(&self, method: Method, target: &str, body: Option<Value>, status: u16) -> Value {
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let (got, answer) = self.call(&admin(method, target), bytes.as_bytes());
        assert_eq!(got, status, "{} {target}: {answer}", method.as_str());
        answer
    }

    /// A non-JSON answer (page, metrics) to `req`, which must succeed.
    pub fn text(&self, req: &Request) -> Text {
        match self.serve(req, b"".as_slice()) {
            Ok(Served::Text(t)) => t,
            other => panic!("{} {}: {other:?}", req.method.as_str(), req.path()),
        }
    }

    /// Store an invocation summary that started `ago_ms` before now and ended
    /// `per_batch` items: (batch id, completed, failed).
    pub fn invocation(&self, ago_ms: i64, per_batch: &[(&str, i64, i64)]) {
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
                    cost: None,
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
            d1_rows_read: Some(0),
            stop_reason: StopReason::Drained,
            drainer: None,
            chain: None,
        };
        block_on(self.store.record_invocation(&summary)).unwrap();
    }

    /// One page of a listing: `field` of each row of `list`, and `next_after`.
    pub fn page(&self, target: &str, list: &str, field: &str) -> (Vec<String>, Value) {
        let answer = self.ok(GET, target, None, 200);
        (column(&answer, list, field), answer["next_after"].clone())
    }

    /// Each of `pages` (its target, the `field`s of its `list`, its `next_after`)
    /// is the page the listing answers.
    pub fn assert_pages(&self, list: &str, field: &str, pages: &[(&str, &[&str], Value)]) {
        for (target, rows, next_after) in pages {
            assert_eq!(
                self.page(target, list, field),
                (strings(rows), next_after.clone()),
                "{target}"
            );
        }
    }

    /// Every row of every table, as text: what any write would change. (The
    /// connection's change counter is no use: it also counts rolled-back changes.)
    pub fn fingerprint(&self) -> Vec<String> {
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

    pub fn count(&self, table: &str) -> usize {
        let prefix = format!("{table}: ");
        self.fingerprint()
            .iter()
            .filter(|r| r.starts_with(&prefix))
            .count()
    }

    /// `req` is refused with `status` and `code`, in the documented error shape, and
    /// nothing is written.
    pub fn refused(&self, req: &Request, body: &[u8], status: u16, code: &str) -> String {
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
    pub fn get_refused(&self, target: &str, status: u16, code: &str) -> String {
        self.refused(&admin(GET, target), b"", status, code)
    }

    /// An admin JSON request refused with 400 and `code`, writing nothing.
    pub fn bad(&self, method: Method, target: &str, body: &Value, code: &str) -> String {
        self.refused(
            &admin(method, target),
            body.to_string().as_bytes(),
            400,
            code,
        )
    }

    pub fn put_subjects(&self, subjects: Value) {
        self.ok(PUT, "/subjects", Some(json!({ "subjects": subjects })), 200);
    }

    /// `PUT /subjects` of one webhook subject `id` posting to `url`, which must succeed.
    pub fn put_hook(&self, id: &str, url: &str) {
        self.ok(PUT, "/subjects", Some(hook_subjects(id, url)), 200);
    }

    /// `POST /batches` with `body`, which must create the batch (201); the answer.
    pub fn create_batch(&self, body: Value) -> Value {
        self.ok(POST, "/batches", Some(body), 201)
    }
}

pub fn error_code(answer: &Value) -> &str {
    answer["error"]["code"]
        .as_str()
        .unwrap_or("<no error code>")
}

pub fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `field` of every element of the list `list` in a listing answer.
pub fn column(answer: &Value, list: &str, field: &str) -> Vec<String> {
    answer[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list:?} list in {answer}"))
        .iter()
        .map(|row| row[field].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `names`' values in `object`, in that order: several fields in one comparison.
pub fn fields<const N: usize>(object: &Value, names: [&str; N]) -> [Value; N] {
    names.map(|name| object[name].clone())
}

pub fn keys(v: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = v
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    keys
}

pub fn subject(id: &str) -> Value {
    json!({"id": id, "kind": "webhook", "payload": {"url": format!("https://example.com/{id}"), "data": {"n": 1}}})
}

pub fn item(subject_id: &str) -> Value {
    json!({"subject_id": subject_id, "kind": "noop", "payload": {}})
}

/// `n` no-op items of subjects `<prefix>0`, `<prefix>1`...
pub fn numbered_items(prefix: &str, n: usize) -> Vec<Value> {
    (0..n).map(|i| item(&format!("{prefix}{i}"))).collect()
}

/// Moves `n` items of `batch` to completed (so the counters say what the
/// summaries say).
pub fn mark_ended(host: &Host, batch: &str, n: i64) {
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

/// `batch-1` of `n` no-op items (subjects `x0`...) created now; then the clock
/// `later_ms` on, and `ended` of its items completed: a batch under way.
pub fn batch_under_way(host: &Host, n: usize, later_ms: i64, ended: i64) {
    host.create_batch(json!({"items": numbered_items("x", n)}));
    host.now.set(host.now.get() + later_ms);
    mark_ended(host, "batch-1", ended);
}

/// A `PUT /subjects` body of one webhook subject `id` posting to `url`.
pub fn hook_subjects(id: &str, url: &str) -> Value {
    json!({"subjects": [{"id": id, "kind": "webhook", "payload": {"url": url}}]})
}

/// A batch `key` of `n` no-op items (subjects `<key>-0`...), created now; its id.
pub fn new_batch(host: &Host, key: &str, n: usize) -> String {
    let items = numbered_items(&format!("{key}-"), n);
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
pub fn run_due(host: &Host, outcome: impl Fn(&str) -> Outcome) {
    let now = host.now.get();
    let claimed = block_on(host.store.claim_due_items(now, 1_000, "t", now + 60_000)).unwrap();
    let done: Vec<Transition> = claimed
        .iter()
        .map(|c| decide(c, &outcome(&c.subject_id), host.settings.retry, now, 0.0))
        .collect();
    block_on(host.store.commit_outcomes(&done)).unwrap();
    block_on(host.store.finish_batches(now)).unwrap();
}

pub fn batch_json(host: &Host, id: &str) -> Value {
    host.ok(GET, &format!("/batches/{id}"), None, 200)
}

/// A kind whose items call GitHub for an account: each holds `github` and
/// `github:<account>` (`Job::limit_keys`). `{"account": "acme"}`.
pub struct GithubCalls;

impl cron_fanout::jobs::Job for GithubCalls {
    type Payload = Value;

    fn name(&self) -> &'static str {
        "github_calls"
    }

    async fn run(&self, _: &cron_fanout::jobs::Context<'_>, _: Value) -> Outcome {
        Outcome::Done
    }

    fn limit_keys(&self, payload: &Value) -> Vec<String> {
        let account = payload["account"].as_str().unwrap_or_default();
        vec!["github".into(), format!("github:{account}")]
    }
}

/// [`setup`]'s host with the kind [`GithubCalls`] registered.
pub fn setup_with_github_calls() -> Host {
    Host {
        jobs: Jobs::builtin().with(GithubCalls),
        ..setup()
    }
}
