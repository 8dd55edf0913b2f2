//! `src/api/openapi.json` against the route table, both ways: every route is
//! described with its method and path template, every described path and method
//! is a route, and what the table says about a route (auth, query, body, internal)
//! the document says too. The document's own validity is `scripts/test.sh`'s
//! validator; real answers against its schemas are the e2e suite's.

use std::collections::BTreeSet;

use cron_fanout::api::openapi::DOCUMENT;
use cron_fanout::api::routes::{Body, Query, Route, Target, ROUTES};
use serde_json::Value;

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
