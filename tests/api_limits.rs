//! `/limits` on the host: put, list, get, delete, every refusal writing nothing,
//! and each limit's live state (in flight, tokens, waiting, busiest partitions)
//! read from items the store claimed on real SQLite; the limits' gauges of
//! `/metrics`.

mod common;

use cron_fanout::core::limits::{governing, Gcra};
use cron_fanout::core::metrics::DUE_CAP;
use cron_fanout::core::model::{ClaimedItem, Outcome};
use cron_fanout::core::retry::decide;
use cron_fanout::core::time::rfc3339;
use cron_fanout::sql;
use futures::executor::block_on;
use serde_json::{json, Value};

use common::api::*;

// ---------------------------------------------------------------- fixtures

/// Items of `subjects` hold `keys` (as an enqueue copies them).
fn hold(host: &Host, subjects: &[&str], keys: &[&str]) {
    let keys = serde_json::to_string(keys).unwrap();
    let conn = host.store.db().conn();
    for s in subjects {
        conn.execute(
            "UPDATE cron_queue SET limits = ?1 WHERE subject_id = ?2",
            rusqlite::params![keys, s],
        )
        .unwrap();
    }
}

/// A batch `key` of no-op items for `subjects`; its id.
fn batch(host: &Host, key: &str, subjects: &[&str]) -> String {
    let items: Vec<Value> = subjects.iter().map(|s| item(s)).collect();
    let got = host.create_batch(json!({"key": key, "items": items}));
    got["id"].as_str().unwrap().to_string()
}

/// Claims every due item now, as a tick's drain would (before any limit is
/// defined, so nothing is held back): they are in flight.
fn claim_all(host: &Host) -> Vec<ClaimedItem> {
    let now = host.now.get();
    block_on(host.store.claim_due_items(now, 1_000, "t", now + 600_000)).unwrap()
}

/// Commits `outcome` for the claimed item of `subject`.
fn commit(host: &Host, claimed: &[ClaimedItem], subject: &str, outcome: Outcome) {
    let c = claimed.iter().find(|c| c.subject_id == subject).unwrap();
    let t = decide(c, &outcome, host.settings.retry, host.now.get(), 0.0);
    block_on(host.store.commit_outcomes(&[t])).unwrap();
}

/// The items of `status` holding `key`, counted from the rows themselves: what
/// the live state must say.
fn holding(host: &Host, status: &str, key: &str) -> i64 {
    host.store
        .db()
        .conn()
        .query_row(
            "SELECT count(*) FROM cron_queue AS q, json_each(q.limits) AS k
             WHERE q.status = ?1 AND k.value = ?2",
            rusqlite::params![status, key],
            |r| r.get(0),
        )
        .unwrap()
}

/// A rate state as the claim's charge leaves it.
fn state(host: &Host, key: &str, tat: i64, basis: &str) {
    host.store
        .db()
        .conn()
        .execute(
            "INSERT INTO limit_state (key, tat, basis) VALUES (?1, ?2, ?3)",
            rusqlite::params![key, tat, basis],
        )
        .unwrap();
}

/// The keys with a rate state (a deleted limit's key keeps only an ended pause).
fn state_keys(host: &Host) -> Vec<String> {
    common::texts(
        &host.store,
        "SELECT key FROM limit_state WHERE basis <> '' ORDER BY key",
    )
}

fn put(host: &Host, key: &str, body: Value) -> Value {
    host.ok(PUT, &format!("/limits/{key}"), Some(body), 200)
}

fn live(host: &Host, key: &str) -> Value {
    host.ok(GET, &format!("/limits/{key}"), None, 200)
}

/// `in_flight`, `tokens`, `waiting` of a limit's answer.
fn use_of(v: &Value) -> [Value; 3] {
    fields(v, ["in_flight", "tokens", "waiting"])
}

// ---------------------------------------------------------------- put

#[test]
fn put_answers_the_limit_with_its_defaults() {
    let host = setup();
    let got = put(&host, "github", json!({"rate": 30}));
    assert_eq!(
        got,
        json!({"key": "github", "rate": 30, "per_seconds": 1, "burst": 30, "concurrency": null,
               "partitioned": false, "created_at": rfc3339(NOW), "updated_at": rfc3339(NOW)})
    );
    let got = put(&host, "tenant:*", json!({"concurrency": 2}));
    assert_eq!(
        fields(
            &got,
            ["rate", "per_seconds", "burst", "concurrency", "partitioned"]
        ),
        [Value::Null, Value::Null, Value::Null, json!(2), json!(true)],
        "a concurrency-only limit has no rate, window or burst"
    );
}

#[test]
fn put_replaces_a_limit_and_keeps_its_creation_time() {
    let host = setup();
    put(
        &host,
        "github",
        json!({"rate": 5000, "per_seconds": 3600, "burst": 100, "concurrency": 10}),
    );
    host.now.set(NOW + 5_000);
    let got = put(&host, "github", json!({"concurrency": 3}));
    assert_eq!(
        fields(
            &got,
            ["rate", "burst", "concurrency", "created_at", "updated_at"]
        ),
        [
            Value::Null,
            Value::Null,
            json!(3),
            json!(rfc3339(NOW)),
            json!(rfc3339(NOW + 5_000))
        ],
        "a replace sets every field: what the body leaves out is gone"
    );
    assert_eq!(host.count("limits"), 1);
}

#[test]
fn put_refuses_every_bad_limit_naming_the_field_and_writes_nothing() {
    let host = setup();
    put(&host, "github", json!({"rate": 30}));
    for (body, field) in [
        (json!({}), "rate or concurrency"),
        (json!({"rate": 0}), "rate"),
        (json!({"rate": 1_000_001}), "rate"),
        (json!({"rate": 1, "per_seconds": 0}), "per_seconds"),
        (json!({"rate": 1, "per_seconds": 86_401}), "per_seconds"),
        (json!({"rate": 1, "burst": 1_000_001}), "burst"),
        (json!({"concurrency": 0}), "concurrency"),
        (json!({"concurrency": 10_001}), "concurrency"),
        (json!({"concurrency": 2.5}), "concurrency"),
        (json!({"concurrency": "3"}), "concurrency"),
        (json!({"concurrency": 3, "burst": 2}), "burst"),
        (json!({"concurrency": 3, "per_seconds": 2}), "per_seconds"),
        (json!({"rate": 30, "limit": 2}), "limit"),
        (json!([30]), "object"),
    ] {
        for key in ["github", "new-key"] {
            let message = host.bad(PUT, &format!("/limits/{key}"), &body, "invalid_limit");
            assert!(message.contains(field), "{body}: {message}");
        }
    }
    assert_eq!(live(&host, "github")["rate"], 30, "the limit is unchanged");
}

#[test]
fn put_refuses_a_key_that_cannot_name_a_limit_and_writes_nothing() {
    let host = setup();
    let long = "k".repeat(129);
    for key in [
        "a%20b",
        "tenant*",
        "%3A*",
        "a*b",
        "%C3%A9",
        "a%2Fb",
        long.as_str(),
    ] {
        let message = host.bad(
            PUT,
            &format!("/limits/{key}"),
            &json!({"rate": 1}),
            "invalid_limit",
        );
        assert!(message.starts_with("key "), "{key}: {message}");
        host.get_refused(&format!("/limits/{key}"), 400, "invalid_limit");
        host.refused(
            &admin(DELETE, &format!("/limits/{key}")),
            b"",
            400,
            "invalid_limit",
        );
    }
    // The longest key there may be, and a partition of one.
    put(&host, &"k".repeat(128), json!({"rate": 1}));
    put(&host, "host:api.github.com:*", json!({"rate": 1}));
}

#[test]
fn put_refuses_malformed_json_and_other_content_types_and_writes_nothing() {
    let host = setup();
    host.refused(
        &admin(PUT, "/limits/github"),
        b"{\"rate\": ",
        400,
        "invalid_json",
    );
    let req = request(PUT, "/limits/github", Some(TOKEN), Some("text/plain"));
    host.refused(&req, b"{\"rate\": 1}", 415, "unsupported_media_type");
}

#[test]
fn limits_answer_the_admin_token_only() {
    let host = setup();
    put(&host, "github", json!({"rate": 1}));
    for token in [None, Some("wrong-token-0123456789"), Some(METRICS_TOKEN)] {
        for (method, path) in [
            (GET, "/limits"),
            (GET, "/limits/github"),
            (DELETE, "/limits/github"),
            (PUT, "/limits/github"),
        ] {
            let req = request(method, path, token, Some("application/json"));
            host.refused(&req, b"{\"rate\": 2}", 401, "unauthorized");
        }
    }
}

// ---------------------------------------------------------------- get, list, delete

#[test]
fn get_and_delete_of_a_key_without_a_limit_are_404_and_write_nothing() {
    let host = setup();
    put(&host, "tenant:*", json!({"concurrency": 2}));
    // A key a partitioned limit governs has no limit of its own.
    for key in ["github", "tenant:acme"] {
        host.get_refused(&format!("/limits/{key}"), 404, "not_found");
        host.refused(
            &admin(DELETE, &format!("/limits/{key}")),
            b"",
            404,
            "not_found",
        );
    }
    // Even when a rate state of that key is left over.
    state(&host, "github", 1, "1/1");
    host.refused(&admin(DELETE, "/limits/github"), b"", 404, "not_found");
}

#[test]
fn get_limits_is_paged_in_key_order() {
    let host = setup();
    for key in ["telegram", "discord", "tenant:*", "github"] {
        put(&host, key, json!({"concurrency": 1}));
    }
    host.assert_pages(
        "limits",
        "key",
        &[
            (
                "/limits",
                &["discord", "github", "telegram", "tenant:*"],
                Value::Null,
            ),
            ("/limits?limit=2", &["discord", "github"], json!("github")),
            (
                "/limits?limit=2&after=github",
                &["telegram", "tenant:*"],
                json!("tenant:*"),
            ),
            ("/limits?limit=2&after=tenant:*", &[], Value::Null),
        ],
    );
    host.get_refused("/limits?limit=0", 400, "invalid_query");
    host.get_refused("/limits?status=running", 400, "invalid_query");
    host.get_refused("/limits/github?x=1", 400, "invalid_query");
}

#[test]
fn delete_removes_the_limit_and_its_rate_state_only() {
    let host = setup();
    put(&host, "github", json!({"rate": 20}));
    put(&host, "discord", json!({"rate": 5}));
    state(&host, "github", 100, "20/1");
    state(&host, "discord", 100, "5/1");
    assert_eq!(
        host.ok(DELETE, "/limits/github", None, 200),
        json!({"deleted": "github"})
    );
    host.get_refused("/limits/github", 404, "not_found");
    assert_eq!(state_keys(&host), ["discord"]);
    // Its key keeps an ended pause (cursors stay careful for an hour), listed
    // nowhere as paused.
    assert_eq!(
        common::texts(
            &host.store,
            "SELECT key FROM limit_state WHERE paused_until IS NOT NULL"
        ),
        ["github"]
    );
    assert_eq!(host.ok(GET, "/limits", None, 200)["paused"], json!([]));
    assert_eq!(host.page("/limits", "limits", "key").0, ["discord"]);
    host.refused(&admin(DELETE, "/limits/github"), b"", 404, "not_found");
}

/// A partitioned limit's members are the keys it governs: not a key with a limit
/// of its own, nor one under a longer partitioned limit, nor one merely
/// starting with the same letters.
#[test]
fn deleting_a_partitioned_limit_deletes_the_state_of_the_keys_it_governs() {
    let host = setup();
    for key in ["tenant:*", "tenant:big", "tenant:eu:*"] {
        put(&host, key, json!({"rate": 10}));
    }
    for key in [
        "tenant:acme",
        "tenant:bolt",
        "tenant:big",
        "tenant:eu:acme",
        "tenantx",
        "tenant;",
        "other",
    ] {
        state(&host, key, 100, "10/1");
    }
    host.ok(DELETE, "/limits/tenant:*", None, 200);
    assert_eq!(
        state_keys(&host),
        [
            "other",
            "tenant:big",
            "tenant:eu:acme",
            "tenant;",
            "tenantx"
        ]
    );
    host.ok(DELETE, "/limits/tenant:eu:*", None, 200);
    assert_eq!(
        state_keys(&host),
        ["other", "tenant:big", "tenant;", "tenantx"]
    );
}

// ---------------------------------------------------------------- live state

/// In flight: first attempts (their batch's lease window), retries (the leased
/// index), a paused batch's items still running; not what ended, not what
/// waits, not another key's.
#[test]
fn in_flight_counts_every_item_in_flight_holding_the_key() {
    let host = setup();
    batch(&host, "one", &["a0", "a1", "a2", "a3", "a4", "a5"]);
    hold(&host, &["a0", "a1", "a2", "a3"], &["github"]);
    hold(&host, &["a4"], &["tenant:x", "github"]);
    let claimed = claim_all(&host);
    assert_eq!(claimed.len(), 6);
    // a0 is retried and claimed again (a real run_after now); a1 completes.
    commit(&host, &claimed, "a0", Outcome::Retry("HTTP 503".into()));
    commit(&host, &claimed, "a1", Outcome::Done);
    host.now.set(NOW + 120_000);
    let again = claim_all(&host);
    assert_eq!(
        again
            .iter()
            .map(|c| c.subject_id.as_str())
            .collect::<Vec<_>>(),
        ["a0"]
    );
    // A paused batch's items in flight finish: they hold their slot meanwhile.
    let paused = batch(&host, "two", &["b0", "b1", "b2"]);
    hold(&host, &["b0", "b1", "b2"], &["github"]);
    claim_all(&host);
    host.ok(POST, &format!("/batches/{paused}/pause"), None, 200);
    // Pending, not in flight.
    batch(&host, "three", &["c0"]);
    hold(&host, &["c0"], &["github"]);

    put(&host, "github", json!({"concurrency": 10}));
    let got = live(&host, "github");
    assert_eq!(holding(&host, "processing", "github"), 7);
    assert_eq!(use_of(&got), [json!(7), Value::Null, json!(1)]);
}

/// Waiting: due pending items holding the key, due at once (their batch's
/// cursor) or at their run_after (the due index); not items due later, not a
/// paused batch's, not another key's.
#[test]
fn waiting_counts_the_due_pending_items_holding_the_key() {
    let host = setup();
    // r0 is retried: due again only after its backoff.
    batch(&host, "retried", &["r0"]);
    hold(&host, &["r0"], &["github"]);
    let claimed = claim_all(&host);
    commit(&host, &claimed, "r0", Outcome::Retry("HTTP 429".into()));
    batch(&host, "one", &["a0", "a1", "a2", "a3"]);
    hold(&host, &["a0", "a1", "a2"], &["github"]);
    hold(&host, &["a3"], &["gitlab"]);
    let paused = batch(&host, "two", &["p0", "p1"]);
    hold(&host, &["p0", "p1"], &["github"]);
    host.ok(POST, &format!("/batches/{paused}/pause"), None, 200);
    put(&host, "github", json!({"rate": 10}));
    put(&host, "gitlab", json!({"rate": 10}));
    assert_eq!(live(&host, "github")["waiting"], 3, "r0 is not due yet");
    assert_eq!(live(&host, "gitlab")["waiting"], 1);
    host.now.set(NOW + 3_600_000);
    let got = live(&host, "github");
    assert_eq!(holding(&host, "pending", "github"), 6);
    assert_eq!(
        fields(&got, ["waiting", "waiting_capped", "in_flight"]),
        [json!(4), json!(false), json!(0)]
    );
}

/// `batches`: the batches whose items in flight or due hold the limit's keys
/// (its partitions' for a partitioned one), each once; not a batch whose items
/// only wait out a backoff, nor one holding another key.
#[test]
fn a_limit_names_the_batches_its_keys_hold() {
    let host = setup();
    let flying = batch(&host, "flying", &["f0", "f1"]);
    hold(&host, &["f0", "f1"], &["tenant:a"]);
    claim_all(&host);
    let retried = batch(&host, "retried", &["r0"]);
    hold(&host, &["r0"], &["tenant:c"]);
    let claimed = claim_all(&host);
    commit(&host, &claimed, "r0", Outcome::Retry("HTTP 503".into()));
    let due = batch(&host, "due", &["d0", "d1", "d2"]);
    hold(&host, &["d0", "d1"], &["tenant:b"]);
    hold(&host, &["d2"], &["github"]);
    put(&host, "tenant:*", json!({"concurrency": 5}));
    put(&host, "github", json!({"concurrency": 5}));
    let mut want = vec![flying, due.clone()];
    want.sort();
    assert_eq!(live(&host, "tenant:*")["batches"], json!(want));
    assert_eq!(live(&host, "github")["batches"], json!([due]));
    let listed = host.ok(GET, "/limits", None, 200);
    assert_eq!(listed["limits"][0]["batches"], json!([due]));
    assert!(!want.contains(&retried));
}

/// As /metrics counts due items: at most DUE_CAP are read, and the answer says
/// when the count stopped there.
#[test]
fn waiting_is_counted_among_the_first_due_items_up_to_the_cap() {
    let host = setup();
    put(&host, "github", json!({"concurrency": 1}));
    let n = DUE_CAP as usize;
    let subjects: Vec<String> = (0..n - 1).map(|i| format!("s{i:05}")).collect();
    host.create_batch(
        json!({"key": "big", "items": subjects.iter().map(|s| item(s)).collect::<Vec<_>>()}),
    );
    host.store
        .db()
        .conn()
        .execute_batch("UPDATE cron_queue SET limits = '[\"github\"]'")
        .unwrap();
    assert_eq!(
        fields(&live(&host, "github"), ["waiting", "waiting_capped"]),
        [json!(n - 1), json!(false)]
    );
    host.create_batch(json!({"key": "more", "items": [item("t0"), item("t1")]}));
    hold(&host, &["t0", "t1"], &["github"]);
    assert_eq!(
        fields(&live(&host, "github"), ["waiting", "waiting_capped"]),
        [json!(DUE_CAP), json!(true)]
    );
}

#[test]
fn tokens_are_the_burst_without_state_and_the_rate_room_with_it() {
    let host = setup();
    put(&host, "github", json!({"rate": 20, "burst": 5}));
    assert_eq!(
        live(&host, "github")["tokens"],
        5,
        "never used: the whole burst"
    );
    let gcra = Gcra {
        rate: 20,
        per_seconds: 1,
        burst: 5,
    };
    state(&host, "github", gcra.charge(None, NOW, 5), &gcra.basis());
    assert_eq!(live(&host, "github")["tokens"], 0);
    host.now.set(NOW + 100);
    assert_eq!(
        live(&host, "github")["tokens"],
        2,
        "20 a second: one every 50 ms"
    );
    // Another rate: the state was counted under the old one, a full burst.
    put(&host, "github", json!({"rate": 10, "burst": 4}));
    assert_eq!(live(&host, "github")["tokens"], 4);
    put(&host, "github", json!({"concurrency": 4}));
    assert_eq!(
        live(&host, "github")["tokens"],
        Value::Null,
        "no rate, no tokens"
    );
    // The largest rate: its state is past 2^53, read exactly all the same.
    put(&host, "fast", json!({"rate": 1_000_000, "burst": 10}));
    let gcra = Gcra {
        rate: 1_000_000,
        per_seconds: 1,
        burst: 10,
    };
    let tat = gcra.charge(None, host.now.get(), 4);
    assert!(tat > 1 << 53);
    state(&host, "fast", tat, &gcra.basis());
    assert_eq!(live(&host, "fast")["tokens"], 6);
}

#[test]
fn a_partitioned_limit_sums_the_keys_it_governs_and_shows_the_busiest() {
    let host = setup();
    batch(&host, "one", &["a0", "a1", "a2", "b0", "g0", "g1", "x0"]);
    hold(&host, &["a0", "a1", "a2"], &["tenant:acme"]);
    hold(&host, &["b0"], &["tenant:bolt"]);
    hold(&host, &["g0", "g1"], &["tenant:big"]);
    hold(&host, &["x0"], &["other"]);
    claim_all(&host);
    batch(&host, "two", &["b1", "b2"]);
    hold(&host, &["b1", "b2"], &["tenant:bolt"]);
    put(&host, "tenant:*", json!({"rate": 10, "concurrency": 2}));
    put(&host, "tenant:big", json!({"concurrency": 5}));
    let gcra = Gcra {
        rate: 10,
        per_seconds: 1,
        burst: 10,
    };
    state(
        &host,
        "tenant:acme",
        gcra.charge(None, NOW, 4),
        &gcra.basis(),
    );

    let got = live(&host, "tenant:*");
    assert_eq!(
        use_of(&got),
        [json!(4), Value::Null, json!(2)],
        "tenant:big has its own"
    );
    assert_eq!(
        got["partitions"],
        json!([{"key": "tenant:acme", "in_flight": 3, "tokens": 6, "waiting": 0},
               {"key": "tenant:bolt", "in_flight": 1, "tokens": 10, "waiting": 2}])
    );
    assert_eq!(
        use_of(&live(&host, "tenant:big")),
        [json!(2), Value::Null, json!(0)]
    );
    assert!(live(&host, "tenant:big").get("partitions").is_none());
    // The listing answers the same.
    let list = host.ok(GET, "/limits", None, 200);
    assert_eq!(list["limits"][0], got);
}

#[test]
fn a_partitioned_limit_shows_its_ten_busiest_partitions() {
    let host = setup();
    let subjects: Vec<String> = (0..12).map(|i| format!("s{i:02}")).collect();
    let refs: Vec<&str> = subjects.iter().map(String::as_str).collect();
    batch(&host, "one", &refs);
    for (i, s) in refs.iter().enumerate() {
        hold(&host, &[s], &[&format!("tenant:t{:02}", i % 11)]);
    }
    claim_all(&host);
    put(&host, "tenant:*", json!({"concurrency": 2}));
    let got = live(&host, "tenant:*");
    let parts = got["partitions"].as_array().unwrap();
    assert_eq!(got["in_flight"], 12);
    assert_eq!(parts.len(), 10);
    assert_eq!(
        parts[0],
        json!({"key": "tenant:t00", "in_flight": 2, "tokens": null, "waiting": 0})
    );
    assert_eq!(parts[1]["key"], "tenant:t01");
}

/// The statement's rule for which limit governs a key is core::limits's.
#[test]
fn the_governing_limit_read_is_the_one_core_limits_picks() {
    let host = setup();
    let defined = ["tenant:*", "tenant:eu:*", "tenant:big", "github", "a:*"];
    for key in defined {
        put(&host, key, json!({"concurrency": 5}));
    }
    let keys = [
        "tenant:acme",
        "tenant:eu:acme",
        "tenant:eu:",
        "tenant:big",
        "tenant:",
        "tenantx",
        "github",
        "gitlab",
        "a:b:c",
        "a:",
        "ab",
    ];
    let subjects: Vec<String> = (0..keys.len()).map(|i| format!("s{i}")).collect();
    let refs: Vec<&str> = subjects.iter().map(String::as_str).collect();
    batch(&host, "one", &refs);
    for (s, k) in refs.iter().zip(keys) {
        hold(&host, &[s], &[k]);
    }
    let (_, usage, _, _) = block_on(host.store.list_limits("", 100, host.now.get())).unwrap();
    for key in keys {
        let read = usage
            .keys
            .iter()
            .find(|u| u.key == key)
            .map(|u| u.limit_key.as_str());
        assert_eq!(read, governing(key, defined), "{key}");
    }
}

// ---------------------------------------------------------------- /metrics

fn scrape(host: &Host) -> String {
    host.text(&request(GET, "/metrics", Some(METRICS_TOKEN), None))
        .body
}

#[test]
fn metrics_have_gauges_per_defined_limit_not_per_partition() {
    let host = setup();
    batch(&host, "one", &["a0", "a1", "b0", "g0"]);
    hold(&host, &["a0", "a1"], &["tenant:acme", "github"]);
    hold(&host, &["b0"], &["tenant:bolt"]);
    claim_all(&host);
    batch(&host, "two", &["g1", "g2"]);
    hold(&host, &["g1", "g2"], &["github"]);
    put(
        &host,
        "github",
        json!({"rate": 20, "burst": 5, "concurrency": 10}),
    );
    put(&host, "tenant:*", json!({"rate": 1, "concurrency": 2}));
    put(&host, "idle", json!({"concurrency": 1}));
    let text = scrape(&host);
    for line in [
        "cron_fanout_limit_in_flight{key=\"github\"} 2",
        "cron_fanout_limit_in_flight{key=\"idle\"} 0",
        "cron_fanout_limit_in_flight{key=\"tenant:*\"} 3",
        "cron_fanout_limit_tokens{key=\"github\"} 5",
        "cron_fanout_limit_waiting{key=\"github\"} 2",
        "cron_fanout_limit_waiting{key=\"idle\"} 0",
        "cron_fanout_limit_waiting{key=\"tenant:*\"} 0",
    ] {
        assert!(
            text.contains(&format!("\n{line}\n")),
            "no {line:?} in\n{text}"
        );
    }
    assert!(
        !text.contains("tenant:acme") && !text.contains("tenant:bolt"),
        "{text}"
    );
    assert!(
        !text.contains("cron_fanout_limit_tokens{key=\"idle\"}"),
        "no rate, no tokens"
    );
    assert!(
        !text.contains("cron_fanout_limit_tokens{key=\"tenant:*\"}"),
        "per partition"
    );
}

#[test]
fn metrics_without_limits_have_no_limit_samples() {
    let host = setup();
    batch(&host, "one", &["a0"]);
    hold(&host, &["a0"], &["github"]);
    let text = scrape(&host);
    assert!(text.contains("# TYPE cron_fanout_limit_in_flight gauge\n"));
    assert!(!text.contains("{key="), "{text}");
}

// ---------------------------------------------------------------- cost

/// SQLite's VM steps for one run of `sql/limit_usage.sql`.
fn usage_steps(host: &Host) -> i32 {
    use rusqlite::StatementStatus;
    let conn = host.store.db().conn();
    let mut stmt = conn.prepare(sql::LIMIT_USAGE).unwrap();
    let rows = stmt
        .query_map(rusqlite::params![host.now.get(), DUE_CAP], |_| Ok(()))
        .unwrap()
        .count();
    assert!(rows >= 1);
    stmt.get_status(StatementStatus::VmStep)
}

/// A Worker that defines no limit pays nothing for them: the statement reads none
/// of the queue, however many items are due or in flight (first attempts and
/// retries).
#[test]
fn the_usage_read_costs_the_same_without_limits_whatever_the_queue_holds() {
    let host = setup();
    let empty = usage_steps(&host);
    let subjects: Vec<String> = (0..500).map(|i| format!("s{i:04}")).collect();
    host.create_batch(json!({"items": subjects.iter().map(|s| item(s)).collect::<Vec<_>>()}));
    host.store
        .db()
        .conn()
        .execute_batch("UPDATE cron_queue SET limits = '[\"github\"]'")
        .unwrap();
    let claimed = block_on(host.store.claim_due_items(NOW, 100, "t", NOW + 600_000)).unwrap();
    for c in &claimed[..50] {
        commit(
            &host,
            &claimed,
            &c.subject_id,
            Outcome::Retry("HTTP 503".into()),
        );
    }
    host.now.set(NOW + 120_000);
    let again = block_on(
        host.store
            .claim_due_items(host.now.get(), 25, "u", NOW + 600_000),
    )
    .unwrap();
    assert_eq!(again.len(), 25);
    assert_eq!(holding(&host, "processing", "github"), 75);
    assert_eq!(usage_steps(&host), empty);
    put(&host, "github", json!({"concurrency": 1}));
    assert!(
        usage_steps(&host) > empty + 500,
        "with a limit, the items are read"
    );
}

/// Every step reads an index, a key range of the queue, the small limits table
/// or rows already read: no scan of the queue.
#[test]
fn the_usage_read_never_scans_the_queue() {
    let host = setup();
    let params = sql::LimitUsage {
        now: NOW,
        due_cap: DUE_CAP,
    };
    let (text, params) = sql::Statement::bind(params);
    let plan = common::query_plan(&host.store, text, &params);
    let scans: Vec<&String> = plan.iter().filter(|d| d.starts_with("SCAN ")).collect();
    // The queue only through its partial index of items in flight; json_each
    // over an item's keys; the limits table (one row for `defined`, the
    // partitioned ones as `p`; the lease windows' view reads it too) or no
    // table; else rows this statement read already.
    let read_already = [
        "SCAN defined",
        "SCAN r",
        "SCAN in_flight",
        "SCAN d",
        "SCAN waiting",
        "SCAN h",
        "SCAN g",
        "SCAN due",
        "SCAN flying",
        "SCAN holding",
        "SCAN o",
        // A key's colons, computed (its partitions are probed by primary key).
        "SCAN colon",
    ];
    for d in &scans {
        let allowed = d.as_str() == "SCAN q USING INDEX cron_queue_leased"
            || d.starts_with("SCAN k VIRTUAL TABLE INDEX")
            || ["SCAN limits", "SCAN p", "SCAN CONSTANT ROW"].contains(&d.as_str())
            || read_already.contains(&d.as_str());
        assert!(allowed, "{d:?} in {plan:#?}");
    }
    assert!(
        plan.iter().any(|d| d.contains("cron_queue_due")),
        "{plan:#?}"
    );
}

#[test]
fn get_limits_shows_each_paused_key_and_a_limits_own_pause_until_it_ends() {
    let host = setup();
    put(&host, "github", json!({"rate": 20}));
    let now = host.now.get();
    let conn = host.store.db().conn();
    for (key, until) in [
        ("github", now + 2_000),
        ("host:a.example", now + 5_000),
        ("host:old", now - 1),
    ] {
        conn.execute(
            "INSERT INTO limit_state (key, tat, basis, paused_until) VALUES (?1, 0, '', ?2)",
            rusqlite::params![key, until],
        )
        .unwrap();
    }
    drop(conn);
    let listed = host.ok(GET, "/limits", None, 200);
    assert_eq!(
        listed["paused"],
        json!([
            {"key": "host:a.example", "paused_until": rfc3339(now + 5_000)},
            {"key": "github", "paused_until": rfc3339(now + 2_000)},
        ]),
        "paused now, with a limit or without; an ended pause is not listed"
    );
    assert_eq!(
        listed["limits"][0]["paused_until"],
        json!(rfc3339(now + 2_000))
    );
    assert_eq!(
        live(&host, "github")["paused_until"],
        json!(rfc3339(now + 2_000))
    );
    host.now.set(now + 2_000);
    assert_eq!(live(&host, "github")["paused_until"], Value::Null);
}

#[test]
fn get_limits_lists_each_learned_key_with_its_rate_refusals_and_pause_until_it_lapses() {
    use cron_fanout::core::learn;
    let host = setup();
    put(&host, "github", json!({"rate": 20}));
    let now = host.now.get();
    let conn = host.store.db().conn();
    // (key, learned per minute, refused at, refusals, paused until, before, from)
    for (key, per_minute, at, refusals, until, before, from) in [
        (
            "github",
            300,
            now - 1_000,
            2,
            now - 1_000,
            Some(300),
            "headers",
        ),
        (
            "host:a.example",
            120,
            now - 100,
            5,
            now + 900,
            None,
            "retry_after",
        ),
        (
            "host:old",
            60,
            now - learn::IDLE_MS,
            1,
            now - learn::IDLE_MS,
            Some(60),
            "refusals",
        ),
    ] {
        conn.execute(
            "INSERT INTO limit_state (key, tat, basis, paused_until, learned, learned_at, refused_at,
                                      refusals, learned_before, learned_from)
             VALUES (?1, 0, '', ?5, ?2, ?3, ?3, ?4, ?6, ?7)",
            rusqlite::params![key, per_minute, at, refusals, until, before, from],
        )
        .unwrap();
    }
    drop(conn);
    let listed = host.ok(GET, "/limits", None, 200);
    let a = json!({"key": "host:a.example", "learned": true, "learned_rate": 120,
                   "learned_per_seconds": 60, "learned_source": "retry_after",
                   "refusals": 5, "last_refused_at": rfc3339(now - 100),
                   "paused_until": rfc3339(now + 900)});
    assert_eq!(
        listed["learned"],
        json!([a.clone(),
               {"key": "github", "learned": true, "learned_rate": 300,
                "learned_per_seconds": 60, "learned_source": "headers", "refusals": 2,
                "last_refused_at": rfc3339(now - 1_000), "paused_until": null}]),
        "in force, with a limit or without, the latest refusal first; a lapsed one is not listed"
    );
    let github = &listed["limits"][0];
    assert_eq!(
        fields(
            github,
            [
                "learned",
                "learned_rate",
                "learned_per_seconds",
                "learned_source",
                "refusals"
            ]
        ),
        [
            json!(true),
            json!(300),
            json!(60),
            json!("headers"),
            json!(2)
        ]
    );
    assert_eq!(
        live(&host, "host:a.example"),
        a,
        "a learned key without a limit"
    );
    assert_eq!(
        host.ok(GET, "/limits/host:old", None, 404)["error"]["code"],
        json!("not_found")
    );
    // A window later, × 5/4 (120 a minute, learned from a wait: no rate
    // before it to stop at), as the claim reads it; an announced rate stays.
    host.now.set(now - 100 + learn::WINDOW_MS);
    assert_eq!(live(&host, "host:a.example")["learned_rate"], json!(150));
    host.now.set(now - 1_000 + 10 * learn::WINDOW_MS);
    assert_eq!(live(&host, "github")["learned_rate"], json!(300));
    host.now.set(now - 100 + learn::IDLE_MS);
    assert_eq!(
        host.ok(GET, "/limits", None, 200)["learned"],
        json!([]),
        "lapsed after an idle hour"
    );
}

#[test]
fn delete_pause_lifts_a_keys_pause_now_and_leaves_an_ended_one() {
    let host = setup();
    let now = host.now.get();
    let conn = host.store.db().conn();
    for (key, until) in [("host:a.example", now + 1_800_000), ("host:old", now - 1)] {
        conn.execute(
            "INSERT INTO limit_state (key, tat, basis, paused_until) VALUES (?1, 0, '', ?2)",
            rusqlite::params![key, until],
        )
        .unwrap();
    }
    drop(conn);
    let lifted = host.ok(DELETE, "/limits/host:a.example/pause", None, 200);
    assert_eq!(lifted, json!({"lifted": "host:a.example"}));
    assert_eq!(host.ok(GET, "/limits", None, 200)["paused"], json!([]));
    let pauses = |host: &Host| {
        host.store
            .db()
            .conn()
            .prepare("SELECT key || '=' || paused_until FROM limit_state ORDER BY key")
            .unwrap()
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        pauses(&host),
        [
            format!("host:a.example={now}"),
            format!("host:old={}", now - 1)
        ],
        "an ended pause, at the lift: cursors stay careful until the reaper clears it"
    );
    // No pause in force (ended, or none at all): 404, nothing written.
    for key in ["host:a.example", "host:old", "host:never", "tenant:*"] {
        host.refused(
            &admin(DELETE, &format!("/limits/{key}/pause")),
            b"",
            404,
            "not_found",
        );
    }
    host.refused(
        &admin(DELETE, "/limits/not%20a%20key/pause"),
        b"",
        400,
        "invalid_limit",
    );
    assert_eq!(
        pauses(&host),
        [
            format!("host:a.example={now}"),
            format!("host:old={}", now - 1)
        ]
    );
}
