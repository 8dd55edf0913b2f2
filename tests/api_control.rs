//! Batch control on the host: pause, resume, cancel, retry and replay of failed
//! items, with the counters exact and impossible transitions refused (409).

mod common;

use cron_fanout::core::model::{Outcome, Transition};
use cron_fanout::core::requests::MAX_BODY_BYTES;
use cron_fanout::core::retry::decide;
use cron_fanout::core::time::rfc3339;
use futures::executor::block_on;
use serde_json::{json, Value};

use common::api::*;

// ---------------------------------------------------------------- batch control and replay

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
        fields(&done, ["status", "completed"]),
        [json!("finished"), json!(3)]
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
        fields(&got, ["status", "pending", "processing", "cancelled"]),
        [json!("cancelled"), json!(0), json!(2), json!(3)]
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
        fields(&b, ["status", "completed", "cancelled", "percent"]),
        [json!("cancelled"), json!(2), json!(3), json!(100.0)]
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
        fields(&b, ["status", "failed"]),
        [json!("finished"), json!(3)]
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
        fields(&b, ["status", "failed", "pending", "finished_at"]),
        [json!("running"), json!(1), json!(2), Value::Null]
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
        fields(&b, ["status", "completed", "failed"]),
        [json!("finished"), json!(3), json!(1)]
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
    assert_eq!(
        fields(&b, ["status", "pending"]),
        [json!("paused"), json!(2)]
    );
    // Both are due, but nothing of a paused batch is claimed.
    host.now.set(NOW + 3_600_000);
    run_due(&host, |_| Outcome::Done);
    assert_eq!(batch_json(&host, &id)["completed"], json!(0));
    host.ok(POST, &format!("/batches/{id}/resume"), None, 200);
    run_due(&host, |_| Outcome::Done);
    let b = batch_json(&host, &id);
    assert_eq!(
        fields(&b, ["status", "completed"]),
        [json!("finished"), json!(2)]
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
        fields(&b, ["status", "failed", "pending"]),
        [json!("running"), json!(0), json!(1)]
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
