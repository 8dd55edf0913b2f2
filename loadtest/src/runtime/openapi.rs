//! The Worker's answers against its OpenAPI description (`src/api/openapi.json`).
//!
//! Every JSON answer the harness gets from the Worker (`api::Api`'s one send
//! path) is recorded with its route template and status; at the end of the e2e
//! run, [`check_recorded`] hands them to ajv, a real JSON Schema validator
//! (`scripts/openapi-answers.mjs`, pinned in `package.json`), which checks each
//! against the document's schema for that route and status. A status the
//! document does not list for the route fails as well.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use cron_fanout::api::{routes, Method as RouteMethod, Request};
use serde_json::{json, Value};

/// The document the Worker serves, as checked in.
pub const DOCUMENT: &str = include_str!("../../../src/api/openapi.json");

/// Distinct answers kept per route and status: a polled route answers the same
/// shape thousands of times; new shapes come with new bodies.
const SAMPLES_PER_KEY: usize = 200;
/// Bytes of answers kept in all (memory and the validator's input).
const MAX_BYTES: usize = 64 << 20;

#[derive(Default)]
struct Recorded {
    /// (method, route template, status) → distinct bodies, in arrival order.
    answers: HashMap<(String, &'static str, u16), Vec<String>>,
    /// JSON bodies answered without a JSON Content-Type: what it was, how many.
    untyped: HashMap<(String, &'static str, u16), (Option<String>, usize)>,
    /// JSON answers seen in all, and those not kept (over a bound).
    seen: usize,
    dropped: usize,
    bytes: usize,
}

static RECORDED: Mutex<Option<Recorded>> = Mutex::new(None);

/// Records one answer of the Worker: kept when it is JSON on a route of the
/// table (an unknown path's 404 has no route to check it against).
pub fn record(
    method: &str,
    path_and_query: &str,
    status: u16,
    content_type: Option<&str>,
    body: &str,
) {
    let typed = content_type.is_some_and(|ct| ct.contains("json"));
    // A JSON body under another type is recorded too: the document says JSON.
    let is_json =
        || serde_json::from_str::<Value>(body).is_ok_and(|v| v.is_object() || v.is_array());
    if !typed && !is_json() {
        return;
    }
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let request = Request::new(RouteMethod::parse(method), path, query);
    let Ok(route) = routes::find(request.method, &request.segments) else {
        return;
    };
    let mut guard = RECORDED.lock().unwrap_or_else(|e| e.into_inner());
    let rec = guard.get_or_insert_with(Recorded::default);
    rec.seen += 1;
    let key = (route.method.as_str().to_string(), route.path, status);
    if !typed {
        let untyped = rec.untyped.entry(key.clone()).or_default();
        untyped.0 = content_type.map(str::to_string);
        untyped.1 += 1;
    }
    let kept = rec.answers.entry(key).or_default();
    if kept.iter().any(|b| b == body) {
        return;
    }
    if kept.len() >= SAMPLES_PER_KEY || rec.bytes + body.len() > MAX_BYTES {
        rec.dropped += 1;
        return;
    }
    rec.bytes += body.len();
    kept.push(body.to_string());
}

/// Whether an answer to `GET /openapi.json` is the checked-in document.
pub fn served_is_the_document(
    status: u16,
    content_type: Option<&str>,
    body: &str,
) -> Result<(), String> {
    if status != 200 || content_type != Some("application/json") {
        return Err(format!(
            "{status} {content_type:?}, want 200 application/json"
        ));
    }
    if body != DOCUMENT {
        return Err(format!(
            "the body ({} bytes) is not src/api/openapi.json ({} bytes): rebuild the Worker",
            body.len(),
            DOCUMENT.len()
        ));
    }
    Ok(())
}

/// JSON answers without a JSON Content-Type, as failing checks.
fn untyped_failures() -> Vec<(String, String)> {
    let guard = RECORDED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(rec) = guard.as_ref() else {
        return Vec::new();
    };
    let mut failures: Vec<_> = rec
        .untyped
        .iter()
        .map(|((method, path, status), (ct, n))| {
            (
                format!("openapi: {method} {path} {status} matches /openapi.json"),
                format!("{n} JSON answer(s) with Content-Type {ct:?}, want application/json"),
            )
        })
        .collect();
    failures.sort();
    failures
}

/// The recorded answers as the validator reads them.
fn recorded_json() -> Option<(Value, usize, usize)> {
    let guard = RECORDED.lock().unwrap_or_else(|e| e.into_inner());
    let rec = guard.as_ref()?;
    let mut answers: Vec<Value> = Vec::new();
    let mut keys: Vec<_> = rec.answers.keys().collect();
    keys.sort();
    for key in keys {
        for body in &rec.answers[key] {
            let body: Value = serde_json::from_str(body).unwrap_or(Value::String(body.clone()));
            answers.push(json!({"method": key.0, "path": key.1, "status": key.2, "body": body}));
        }
    }
    Some((Value::Array(answers), rec.seen, rec.dropped))
}

/// A named verdict: one report line.
pub type Verdict = (String, Result<(), String>);

/// Validates every recorded answer against the document: one
/// `openapi: N answers of M routes match /openapi.json` verdict, or one failing
/// verdict per route and status that does not (the validator's error), and a
/// note on what was seen and kept.
pub fn check_recorded(repo: &Path) -> (Vec<Verdict>, String) {
    let Some((answers, seen, dropped)) = recorded_json() else {
        return (Vec::new(), "no JSON answer recorded".to_string());
    };
    let note = format!(
        "{seen} JSON answers seen, the distinct ones validated ({dropped} over the bounds not kept)"
    );
    let mut verdicts: Vec<Verdict> = untyped_failures()
        .into_iter()
        .map(|(name, why)| (name, Err(why)))
        .collect();
    match validate(repo, &answers) {
        Ok(report) => verdicts.extend(report_verdicts(&report)),
        Err(e) => verdicts.push((
            "openapi: the recorded answers were validated".to_string(),
            Err(e),
        )),
    }
    (verdicts, note)
}

/// Runs the validator over `answers`; its report is
/// `{"answers", "routes", "failures": [{"method", "path", "status", "error"}]}`.
fn validate(repo: &Path, answers: &Value) -> Result<Value, String> {
    let file = std::env::temp_dir().join(format!("loadtest-openapi-{}.json", std::process::id()));
    std::fs::write(&file, answers.to_string()).map_err(|e| format!("writing {file:?}: {e}"))?;
    let node = repo.join("node_modules/.bin/node");
    let out = Command::new(&node)
        .arg(repo.join("scripts/openapi-answers.mjs"))
        .arg(repo.join("src/api/openapi.json"))
        .arg(&file)
        .current_dir(repo)
        .output()
        .map_err(|e| format!("running {node:?} (bash scripts/setup.sh installs it): {e}"));
    let _ = std::fs::remove_file(&file);
    let out = out?;
    if !out.status.success() {
        return Err(format!(
            "the validator failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("the validator's report: {e}"))
}

fn report_verdicts(report: &Value) -> Vec<Verdict> {
    let failures = report["failures"].as_array().cloned().unwrap_or_default();
    if failures.is_empty() {
        let (answers, routes) = (&report["answers"], &report["routes"]);
        let name = format!("openapi: {answers} answers of {routes} routes match /openapi.json");
        return vec![(name, Ok(()))];
    }
    failures
        .iter()
        .map(|f| {
            let name = format!(
                "openapi: {} {} {} matches /openapi.json",
                f["method"].as_str().unwrap_or("?"),
                f["path"].as_str().unwrap_or("?"),
                f["status"]
            );
            (name, Err(f["error"].as_str().unwrap_or("?").to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn json_answers_are_recorded_once_per_body_under_their_route_and_a_missing_json_type_fails() {
        let body = r#"{"deleted": "recorded-test"}"#;
        for _ in 0..3 {
            record(
                "DELETE",
                "/subjects/a%2Fb?x=1",
                200,
                Some("application/json"),
                body,
            );
        }
        record(
            "GET",
            "/dashboard/app.js",
            200,
            Some("text/javascript"),
            "x",
        );
        record("GET", "/nowhere", 404, Some("application/json"), "{}");
        record("GET", "/limits", 200, None, r#"{"limits": []}"#);
        let guard = RECORDED.lock().unwrap();
        let rec = guard.as_ref().unwrap();
        let key = ("DELETE".to_string(), "/subjects/{id}", 200);
        assert_eq!(rec.answers[&key], [body]);
        assert!(!rec.answers.keys().any(|k| k.1 == "/dashboard/app.js"));
        drop(guard);
        let untyped = untyped_failures();
        assert_eq!(untyped.len(), 1, "{untyped:?}");
        assert_eq!(
            untyped[0].0,
            "openapi: GET /limits 200 matches /openapi.json"
        );
        assert!(untyped[0].1.contains("Content-Type None"));
    }

    #[test]
    fn a_wrong_answer_fails_the_check_naming_route_status_and_error() {
        let answers = json!([
            {"method": "GET", "path": "/health", "status": 200, "body": {"ok": true}},
            {"method": "GET", "path": "/batches/{id}", "status": 404,
             "body": {"error": {"code": "not_found", "message": "batch x"}}},
            {"method": "GET", "path": "/limits/{key}", "status": 200, "body": {"key": 7}},
            {"method": "GET", "path": "/health", "status": 418, "body": {}},
        ]);
        let report = validate(&repo(), &answers).expect("the validator ran");
        assert_eq!(report["answers"], json!(2));
        assert_eq!(report["routes"], json!(3));
        let failures = report["failures"].as_array().unwrap();
        assert_eq!(failures.len(), 2, "{report}");
        assert_eq!(failures[0]["path"], json!("/limits/{key}"));
        assert!(
            failures[0]["error"]
                .as_str()
                .unwrap()
                .contains("must have required property"),
            "{report}"
        );
        assert!(failures[1]["error"]
            .as_str()
            .unwrap()
            .contains("status 418 is not documented"));
    }

    #[test]
    fn the_served_document_must_be_the_file_byte_for_byte() {
        assert!(served_is_the_document(200, Some("application/json"), DOCUMENT).is_ok());
        let edited = DOCUMENT.replacen("3.1.0", "3.0.0", 1);
        assert!(served_is_the_document(200, Some("application/json"), &edited).is_err());
        assert!(served_is_the_document(200, Some("text/plain"), DOCUMENT).is_err());
    }
}
