//! `src/api/openapi.json` against the route table, both ways: every route is
//! described with its method and path template, every described path and method
//! is a route, and what the table says about a route (auth, query, body, internal)
//! the document says too; and the host's answers to every kind of request
//! match its schemas (ajv, as the e2e suite checks the Worker's). The document's
//! own validity is `scripts/test.sh`'s validator.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use cron_fanout::api::openapi::DOCUMENT;
use cron_fanout::api::routes::{self, Body, Query, Route, Target, ROUTES};
use cron_fanout::api::Method;
use cron_fanout::core::model::Outcome;
use serde_json::{json, Value};

use common::api::*;

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "patch", "head", "options", "trace",
];

fn document() -> Value {
    serde_json::from_str(DOCUMENT).expect("src/api/openapi.json is JSON")
}

fn method(route: &Route) -> String {
    route.method.as_str().to_ascii_lowercase()
}

/// The route's operation in the document.
fn operation<'d>(doc: &'d Value, route: &Route) -> &'d Value {
    let op = &doc["paths"][route.path][method(route)];
    assert!(
        op.is_object(),
        "{} {} is not in src/api/openapi.json",
        route.method.as_str(),
        route.path
    );
    op
}

fn parameters<'d>(op: &'d Value, place: &str) -> Vec<&'d str> {
    op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == place)
        .map(|p| p["name"].as_str().unwrap_or(""))
        .collect()
}

#[test]
fn every_route_in_the_table_is_in_the_openapi_document_with_its_method_and_path() {
    let doc = document();
    for route in ROUTES {
        let op = operation(&doc, route);
        let names: Vec<&str> = route
            .path
            .split('/')
            .filter(|s| s.starts_with('{'))
            .map(|s| s.trim_matches(|c| c == '{' || c == '}'))
            .collect();
        assert_eq!(
            parameters(op, "path"),
            names,
            "{} {}: its path parameters",
            route.method.as_str(),
            route.path
        );
    }
}

#[test]
fn every_path_and_method_in_the_openapi_document_is_a_route_of_the_table() {
    let doc = document();
    let table: BTreeSet<(String, &str)> = ROUTES.iter().map(|r| (method(r), r.path)).collect();
    let paths = doc["paths"].as_object().expect("paths");
    for (path, item) in paths {
        for (key, _) in item.as_object().expect("a path item") {
            if !METHODS.contains(&key.as_str()) {
                continue;
            }
            assert!(
                table.contains(&(key.clone(), path.as_str())),
                "{} {path} is in src/api/openapi.json but not a route",
                key.to_ascii_uppercase()
            );
        }
    }
}

#[test]
fn the_document_marks_the_internal_routes_and_only_them() {
    let doc = document();
    for route in ROUTES {
        let op = operation(&doc, route);
        let internal = matches!(route.target, Target::Run | Target::ProbeTask);
        assert_eq!(internal, route.path.starts_with("/internal/"));
        assert_eq!(
            op["x-internal"] == Value::Bool(true),
            internal,
            "{}: x-internal",
            route.path
        );
        let tagged = op["tags"]
            .as_array()
            .is_some_and(|t| t.contains(&Value::from("internal")));
        assert_eq!(tagged, internal, "{}: the internal tag", route.path);
    }
}

#[test]
fn routes_without_the_admin_token_say_so_and_admin_routes_need_it() {
    let doc = document();
    assert_eq!(doc["security"], serde_json::json!([{"admin": []}]));
    for route in ROUTES {
        let op = operation(&doc, route);
        let security = &op["security"];
        match route.target {
            Target::Admin(_) if route.path == "/metrics" => assert_eq!(
                security,
                &serde_json::json!([{"admin": []}, {"metrics": []}]),
                "/metrics takes either token"
            ),
            Target::Admin(_) => assert!(security.is_null(), "{}: the admin token", route.path),
            _ => assert_eq!(security, &serde_json::json!([]), "{}: no auth", route.path),
        }
        // Every admin route can answer 401, and only a route with a body 413/415.
        let responses = op["responses"].as_object().expect("responses");
        if let Target::Admin(admin) = route.target {
            assert!(responses.contains_key("401"), "{}: 401", route.path);
            let json_body = admin.body == Body::Json;
            for status in ["413", "415"] {
                assert_eq!(
                    responses.contains_key(status),
                    json_body,
                    "{} {}: {status}",
                    route.method.as_str(),
                    route.path
                );
            }
        }
        assert!(responses.contains_key("405"), "{}: 405", route.path);
    }
}

#[test]
fn a_route_documents_a_json_body_exactly_when_it_reads_one() {
    let doc = document();
    for route in ROUTES {
        let op = operation(&doc, route);
        let json_body = op["requestBody"]["content"]["application/json"].is_object();
        let reads = matches!(route.target, Target::Admin(a) if a.body == Body::Json);
        assert_eq!(
            json_body,
            reads,
            "{} {}: a JSON request body",
            route.method.as_str(),
            route.path
        );
    }
}

#[test]
fn a_route_documents_query_parameters_exactly_when_it_parses_them() {
    let doc = document();
    for route in ROUTES {
        let op = operation(&doc, route);
        let parsed = matches!(route.target, Target::Admin(a) if a.query == Query::Parsed);
        assert_eq!(
            !parameters(op, "query").is_empty(),
            parsed,
            "{} {}: query parameters",
            route.method.as_str(),
            route.path
        );
    }
}

/// Every `$ref` in `v`, as JSON pointers into the document.
fn refs<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get("$ref") {
                out.push(r);
            }
            o.values().for_each(|v| refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn every_reference_in_the_document_resolves_and_every_schema_is_used() {
    let doc = document();
    let mut found = Vec::new();
    refs(&doc, &mut found);
    for r in &found {
        let pointer = r.strip_prefix('#').expect("a local reference");
        assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
    }
    for name in doc["components"]["schemas"]
        .as_object()
        .expect("schemas")
        .keys()
    {
        let r = format!("#/components/schemas/{name}");
        assert!(found.contains(&r.as_str()), "schema {name} is never used");
    }
}

/// Every JSON answer of `calls` on the host, as the validator reads them.
struct Answers(Vec<Value>);

impl Answers {
    fn call(&mut self, host: &Host, method: Method, target: &str, body: Option<Value>) -> Value {
        let mut req = admin(method, target);
        if body.is_some() {
            req.content_type = Some("application/json".into());
        }
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let (status, answer) = host.call(&req, bytes.as_bytes());
        let route = routes::find(req.method, &req.segments).expect("a route");
        self.0
            .push(json!({"method": method.as_str(), "path": route.path,
                           "status": status, "body": answer}));
        answer
    }
}

#[test]
fn the_hosts_answers_to_every_route_match_the_documents_schemas() {
    use Method::{Delete as DELETE, Get as GET, Post as POST, Put as PUT};
    let host = setup();
    let mut a = Answers(Vec::new());
    let hook = |id: &str| {
        json!({"id": id, "kind": "webhook", "group": "digest",
        "timezone": "Europe/Berlin", "limits": ["github", "tenant:acme"],
        "payload": {"url": "https://example.com/hook", "signing_secret": "0123456789abcdef0123"}})
    };
    a.call(
        &host,
        PUT,
        "/subjects",
        Some(json!({"subjects": [hook("s1"), subject("s2")]})),
    );
    a.call(&host, GET, "/subjects?limit=1", None);
    a.call(&host, GET, "/subjects/s1", None);
    a.call(&host, GET, "/subjects/nobody", None);
    a.call(&host, PUT, "/subjects", Some(json!({"subjects": []})));
    for (id, body) in [
        (
            "digest",
            json!({"cron": "0 9 * * *", "timezone": "subject", "group": "digest",
            "jitter_seconds": 600, "priority": 3,
            "on_finish": {"url": "https://example.com/done", "signing_secret": "0123456789abcdef"}}),
        ),
        ("sync", json!({"every_seconds": 900, "enabled": false})),
        ("once", json!({"at": "2030-01-01T02:00:00Z"})),
    ] {
        a.call(&host, PUT, &format!("/schedules/{id}"), Some(body.clone()));
        a.call(&host, PUT, &format!("/schedules/{id}"), Some(body));
    }
    a.call(&host, PUT, "/schedules/bad", Some(json!({"cron": "nope"})));
    a.call(&host, GET, "/schedules", None);
    a.call(&host, GET, "/schedules/daily", None);
    a.call(&host, DELETE, "/schedules/sync", None);
    a.call(
        &host,
        PUT,
        "/limits/github",
        Some(json!({"rate": 30, "per_seconds": 1, "burst": 30, "concurrency": 10})),
    );
    a.call(
        &host,
        PUT,
        "/limits/tenant:*",
        Some(json!({"concurrency": 2})),
    );
    a.call(&host, PUT, "/limits/x", Some(json!({"burst": 2})));
    let on_finish = json!({"url": "https://example.com/done"});
    let made = a.call(
        &host,
        POST,
        "/batches",
        Some(json!({"key": "k1", "source": "subjects", "on_finish": on_finish})),
    );
    a.call(
        &host,
        POST,
        "/batches",
        Some(json!({"key": "k1", "source": "subjects"})),
    );
    a.call(&host, POST, "/batches", Some(json!({"key": "k2", "priority": 5,
        "items": [item("a"), item("b"), {"subject_id": "c", "kind": "noop", "payload": {}, "limits": ["github"]}]})));
    a.call(&host, POST, "/batches", Some(json!({"items": "no"})));
    let id = made["id"].as_str().expect("a batch id").to_string();
    run_due(&host, |subject| match subject {
        "s1" => Outcome::Done,
        _ => Outcome::Fail("HTTP 410".into()),
    });
    host.invocation(1_000, &[(&id, 1, 1)]);
    a.call(&host, GET, "/limits", None);
    a.call(&host, GET, "/limits/github", None);
    a.call(&host, GET, "/limits/tenant:*", None);
    a.call(&host, GET, "/batches", None);
    a.call(&host, GET, &format!("/batches/{id}"), None);
    a.call(&host, GET, &format!("/batches/{id}/items"), None);
    a.call(
        &host,
        GET,
        &format!("/batches/{id}/items?status=failed&limit=1"),
        None,
    );
    a.call(
        &host,
        GET,
        &format!("/batches/{id}/timeline?bucket_seconds=10"),
        None,
    );
    a.call(
        &host,
        GET,
        "/batches/nobody/timeline?bucket_seconds=1",
        None,
    );
    a.call(&host, GET, "/invocations?limit=5", None);
    a.call(
        &host,
        POST,
        &format!("/batches/{id}/retry"),
        Some(json!({"status": "failed"})),
    );
    a.call(&host, POST, "/items/1/retry", None);
    a.call(&host, POST, "/items/x/retry", None);
    a.call(&host, POST, &format!("/batches/{id}/pause"), None);
    a.call(&host, POST, &format!("/batches/{id}/resume"), None);
    a.call(&host, POST, &format!("/batches/{id}/cancel"), None);
    a.call(&host, POST, &format!("/batches/{id}/resume"), None);
    a.call(&host, DELETE, "/limits/github", None);
    a.call(&host, DELETE, "/subjects/s2", None);
    let statuses: BTreeSet<u64> = a.0.iter().map(|x| x["status"].as_u64().unwrap()).collect();
    assert_eq!(
        statuses,
        BTreeSet::from([200, 201, 400, 404, 409]),
        "the cases above"
    );

    let report = validate(&a.0);
    assert_eq!(report["failures"], json!([]), "{report}");
    assert_eq!(report["answers"], json!(a.0.len()));
}

/// `scripts/openapi-answers.mjs` (ajv, pinned in package.json) over `answers`.
fn validate(answers: &[Value]) -> Value {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file =
        std::env::temp_dir().join(format!("openapi-host-answers-{}.json", std::process::id()));
    std::fs::write(&file, Value::from(answers.to_vec()).to_string()).unwrap();
    let out = Command::new(repo.join("node_modules/.bin/node"))
        .arg(repo.join("scripts/openapi-answers.mjs"))
        .arg(repo.join("src/api/openapi.json"))
        .arg(&file)
        .output()
        .expect("node from node_modules (bash scripts/setup.sh)");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "the validator failed (bash scripts/setup.sh installs ajv): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the validator's report")
}
