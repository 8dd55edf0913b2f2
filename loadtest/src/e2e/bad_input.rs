//! The e2e suite's bad-input checks: requests without or with a wrong token,
//! malformed or invalid bodies, unsigned or forged dispatches, each answered with
//! its status and JSON error, and nothing changed by any of them.

use crate::check;
use crate::driver::checks::Checks;
use crate::runtime::api::{Api, RawResponse};
use anyhow::{ensure, Result};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// The bad-input checks' fixture: the Worker's API and the counts bad input must
/// leave as they are.
struct BadRequests<'a> {
    api: &'a Api,
    subjects: usize,
    batches_before: usize,
}

/// Bad requests get a 4xx with the JSON error shape and change nothing.
pub async fn bad_input(api: &Api, subjects: usize, checks: &mut Checks) -> Result<()> {
    let mut list = vec![
        check!(
            "wrong admin token: 401 with a JSON error",
            wrong_token_refused
        ),
        check!(
            "no admin token: 401 with a JSON error",
            missing_token_refused
        ),
        check!(
            "malformed JSON to PUT /subjects: 400 {\"error\":{code,message}}",
            malformed_json_refused
        ),
        check!(
            "non-http webhook url: 400 with a JSON error",
            non_http_url_refused
        ),
        check!(
            "unsigned POST /internal/run: 401",
            unsigned_dispatch_refused
        ),
        check!(
            "POST /internal/run with a forged signature line: 401",
            forged_dispatch_refused
        ),
    ];
    list.extend(more_bad_input().into_iter().map(|case| {
        check!(
            format!("{}: {} {}", case.name, case.status, case.code),
            refused_with_its_code,
            case
        )
    }));
    list.push(check!(
        "bad input changed nothing: GET /subjects and GET /batches counts unchanged (no subject bad-url or bad-limits)",
        bad_input_changed_nothing
    ));
    let mut f = BadRequests {
        api,
        subjects,
        batches_before: api.batches(1000).await?.len(),
    };
    checks.run(&mut f, list).await;
    Ok(())
}

/// `r` has status `status` and, with `shape`, the JSON error shape.
fn answered(r: &RawResponse, status: StatusCode, shape: bool) -> Result<()> {
    ensure!(
        r.status == status,
        "got {} {}, want {status}",
        r.status,
        crate::runtime::api::clip(&r.body)
    );
    ensure!(
        !shape || r.error_shape().is_some(),
        "body is not {{\"error\":{{\"code\",\"message\"}}}}: {}",
        crate::runtime::api::clip(&r.body)
    );
    Ok(())
}

async fn wrong_token_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let r = f
        .api
        .raw(Method::GET, "/subjects", Some("wrong-token"), None)
        .await?;
    answered(&r, StatusCode::UNAUTHORIZED, true)
}

async fn missing_token_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let r = f
        .api
        .raw(
            Method::PUT,
            "/subjects",
            None,
            Some(r#"{"subjects":[]}"#.into()),
        )
        .await?;
    answered(&r, StatusCode::UNAUTHORIZED, true)
}

async fn malformed_json_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let r = f
        .api
        .admin_raw(
            Method::PUT,
            "/subjects",
            Some(r#"{"subjects": [{"id": "x""#.into()),
        )
        .await?;
    answered(&r, StatusCode::BAD_REQUEST, true)
}

async fn non_http_url_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let bad_url = json!({"subjects": [{"id": "bad-url", "kind": "webhook", "payload": {"url": "ftp://127.0.0.1/x"}, "active": true}]});
    let r = f
        .api
        .admin_raw(Method::PUT, "/subjects", Some(bad_url.to_string()))
        .await?;
    answered(&r, StatusCode::BAD_REQUEST, true)
}

/// An item as a dispatch carries it, for the refused dispatches.
fn run_body() -> String {
    json!({"item_id": 1, "lease_token": "x", "batch_id": "x", "subject_id": "x", "attempt": 1, "kind": "webhook", "payload": {}})
        .to_string()
}

async fn unsigned_dispatch_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let r = f
        .api
        .raw(Method::POST, "/internal/run", None, Some(run_body()))
        .await?;
    answered(&r, StatusCode::UNAUTHORIZED, false)
}

/// The same item after a signature line made with another secret: refused like
/// the unsigned one.
async fn forged_dispatch_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let run = run_body();
    let forged_sig = crate::sink::signature::sign(
        b"not-the-dispatch-secret",
        chrono::Utc::now().timestamp(),
        run.as_bytes(),
    );
    let r = f
        .api
        .raw(
            Method::POST,
            "/internal/run",
            None,
            Some(format!("{forged_sig}\n{run}")),
        )
        .await?;
    answered(&r, StatusCode::UNAUTHORIZED, false)
}

/// One of the table's requests gets its status and its stable error code.
async fn refused_with_its_code(f: &mut BadRequests<'_>, case: BadInput) -> Result<()> {
    let r = f.api.admin_raw(case.method, case.path, case.body).await?;
    answered(&r, case.status, true)?;
    r.refused(case.status, case.code)
        .map_err(anyhow::Error::msg)
}

async fn bad_input_changed_nothing(f: &mut BadRequests<'_>) -> Result<()> {
    let after = f.api.all_subjects().await?;
    let batches_after = f.api.batches(1000).await?.len();
    ensure!(
        after.len() == f.subjects
            && after
                .iter()
                .all(|s| s.id != "bad-url" && s.id != "bad-limits")
            && batches_after == f.batches_before,
        "{} subjects (want {}), {batches_after} batches (want {})",
        after.len(),
        f.subjects,
        f.batches_before
    );
    Ok(())
}

/// One bad request and the answer docs/api.md promises for it.
struct BadInput {
    name: &'static str,
    method: Method,
    path: &'static str,
    body: Option<String>,
    status: StatusCode,
    /// The stable `error.code`.
    code: &'static str,
}

/// The rest of the issue's bad-input list, sent with a valid admin token.
fn more_bad_input() -> Vec<BadInput> {
    let case = |name, method, path, body: Option<String>, status, code| BadInput {
        name,
        method,
        path,
        body,
        status,
        code,
    };
    let subject = |id: Value, kind: &str| json!({"id": id, "kind": kind, "payload": {"url": "http://127.0.0.1/x"}});
    let put = |subjects: Vec<Value>| Some(json!({ "subjects": subjects }).to_string());
    let many: Vec<Value> = (0..1001)
        .map(|i| subject(json!(format!("many-{i}")), "webhook"))
        .collect();
    let huge = format!(r#"{{"subjects":[],"pad":"{}"}}"#, "x".repeat(300 * 1024));
    let limited = |limits: Value| json!({"id": "bad-limits", "kind": "noop", "payload": {}, "limits": limits});
    let noop_item = |id: &str| json!({"subject_id": id, "kind": "noop", "payload": {}});
    vec![
        case(
            "unknown field",
            Method::PUT,
            "/subjects",
            Some(r#"{"subjects":[],"extra":1}"#.into()),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        case(
            "wrong type",
            Method::PUT,
            "/subjects",
            put(vec![subject(json!(5), "webhook")]),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        case(
            "empty id",
            Method::PUT,
            "/subjects",
            put(vec![subject(json!(""), "webhook")]),
            StatusCode::BAD_REQUEST,
            "invalid_id",
        ),
        case(
            "201-char id",
            Method::PUT,
            "/subjects",
            put(vec![subject(json!("i".repeat(201)), "webhook")]),
            StatusCode::BAD_REQUEST,
            "invalid_id",
        ),
        case(
            "1001 subjects in one call",
            Method::PUT,
            "/subjects",
            put(many),
            StatusCode::BAD_REQUEST,
            "too_many",
        ),
        case(
            "unknown kind",
            Method::PUT,
            "/subjects",
            put(vec![subject(json!("k"), "email")]),
            StatusCode::BAD_REQUEST,
            "invalid_payload",
        ),
        case(
            "body over 256 KiB",
            Method::PUT,
            "/subjects",
            Some(huge),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        case(
            "a subject with a fifth limit key",
            Method::PUT,
            "/subjects",
            put(vec![limited(json!(["a", "b", "c", "d", "e"]))]),
            StatusCode::BAD_REQUEST,
            "invalid_limits",
        ),
        case(
            "a subject's limit key with a space",
            Method::PUT,
            "/subjects",
            put(vec![limited(json!(["tenant acme"]))]),
            StatusCode::BAD_REQUEST,
            "invalid_limits",
        ),
        case(
            "an item holding a limit key twice",
            Method::POST,
            "/batches",
            Some(
                json!({"key": "bad-limits", "items": [noop_item("a"),
                    {"subject_id": "b", "kind": "noop", "payload": {}, "limits": ["github", "github"]}]})
                .to_string(),
            ),
            StatusCode::BAD_REQUEST,
            "invalid_limits",
        ),
        case(
            "a batch of priority 11",
            Method::POST,
            "/batches",
            Some(json!({"key": "bad-priority", "items": [noop_item("a")], "priority": 11}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_priority",
        ),
        case(
            "a schedule of priority \"high\"",
            Method::PUT,
            "/schedules/bad-priority",
            Some(json!({"every_seconds": 3600, "priority": "high"}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_priority",
        ),
        case(
            "the schedule refused for its priority was not created",
            Method::GET,
            "/schedules/bad-priority",
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        case(
            "unknown batch source",
            Method::POST,
            "/batches",
            Some(r#"{"source":"users"}"#.into()),
            StatusCode::BAD_REQUEST,
            "invalid_source",
        ),
        case(
            "reserved daily key",
            Method::POST,
            "/batches",
            Some(r#"{"key":"daily:2099-01-01","source":"subjects"}"#.into()),
            StatusCode::BAD_REQUEST,
            "reserved_key",
        ),
        case(
            "unknown status filter",
            Method::GET,
            "/batches/none/items?status=done",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_query",
        ),
        case(
            "unknown batch",
            Method::GET,
            "/batches/none",
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        case(
            "unknown route",
            Method::GET,
            "/nowhere",
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        case(
            "wrong method",
            Method::DELETE,
            "/batches",
            None,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        case(
            "probe with 0 calls",
            Method::POST,
            "/probe",
            Some(r#"{"calls":0}"#.into()),
            StatusCode::BAD_REQUEST,
            "invalid_probe",
        ),
        case(
            "probe with an unknown field",
            Method::POST,
            "/probe",
            Some(r#"{"calls":1,"rate":5}"#.into()),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
    ]
}
