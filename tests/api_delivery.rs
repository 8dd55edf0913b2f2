//! Delivery on the host: `on_finish` completion callbacks (validation, what a
//! batch shows from its end to the callback's delivery) and the receipts of
//! `multi` and `service` items.

mod common;

use cron_fanout::api::Method;
use cron_fanout::core::model::{Outcome, Transition};
use cron_fanout::core::retry::decide;
use cron_fanout::core::settings::Settings;
use cron_fanout::core::time::rfc3339;
use futures::executor::block_on;
use serde_json::{json, Value};

use common::api::*;

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
    let created = host.create_batch(post(json!({"url": HOOK})));
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
    let host = setup_allowing_private_targets();
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
    let created = host.create_batch(
        json!({"key": "cb", "items": [item("a"), item("b")], "on_finish": {"url": HOOK}}),
    );
    let id = created["id"].as_str().unwrap();
    let plain = new_batch(&host, "plain", 1);
    run_due(&host, |_| Outcome::Done);
    let ended = batch_json(&host, id);
    assert_eq!(
        fields(&ended, ["status", "total", "processing"]),
        [json!("finished"), json!(2), json!(0)]
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
        fields(&retrying, ["completed", "pending", "percent"]),
        [json!(2), json!(0), json!(100.0)],
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
            .fire_due(host.now.get(), 10, MAX_ATTEMPTS, &new_id, None),
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

// ------------------------------------------------- a callback's own signing secret

/// An `on_finish.signing_secret` of the batches and schedules below.
const OWN_SECRET: &str = "callback-secret-0123456789";
const WEBHOOK_SECRET: &str = "webhook-secret-0123456789";

fn on_finish_signed() -> Value {
    json!({"url": HOOK, "signing_secret": OWN_SECRET})
}

#[test]
fn an_on_finish_signing_secret_out_of_bounds_is_refused_before_anything_is_written() {
    let host = setup();
    let long = "x".repeat(1_025);
    // "[redacted]", as listings show a secret: writing a listing back is refused.
    for secret in ["", "fifteen-chars-x", "[redacted]", long.as_str()] {
        let on_finish = json!({"url": HOOK, "signing_secret": secret});
        let batch = json!({"key": "cb", "items": [item("a")], "on_finish": on_finish});
        let schedule = json!({"every_seconds": 3600, "on_finish": on_finish});
        for (method, path, body) in [
            (POST, "/batches", batch),
            (PUT, "/schedules/hourly", schedule),
        ] {
            let message = host.bad(method, path, &body, "invalid_on_finish");
            assert_eq!(
                message, "on_finish.signing_secret must be 16 characters to 1024 bytes",
                "{path} {secret:?}"
            );
        }
    }
    let not_text = json!({"items": [item("a")], "on_finish": {"url": HOOK, "signing_secret": 5}});
    host.bad(POST, "/batches", &not_text, "invalid_json");
    // The bounds themselves are accepted (16 characters are 16 to 64 bytes).
    for secret in [
        "sixteen-chars-xx".to_string(),
        "é".repeat(16),
        "x".repeat(1_024),
    ] {
        let on_finish = json!({"url": HOOK, "signing_secret": secret});
        host.create_batch(json!({"items": [item("a")], "on_finish": on_finish}));
    }
}

/// Every answer of every admin listing the dashboard reads, after a schedule and
/// an ad-hoc batch with a signing secret fired, ended and enqueued their
/// callbacks: none holds the secret, and neither does any logged event.
#[test]
fn an_on_finish_signing_secret_is_never_listed_nor_logged() {
    let host = setup();
    let redacted = json!({"url": HOOK, "signing_secret": "[redacted]"});
    let put = host.ok(
        PUT,
        "/schedules/hourly",
        Some(json!({"every_seconds": 3600, "on_finish": on_finish_signed()})),
        201,
    );
    assert_eq!(put["on_finish"], redacted);
    let created = host
        .create_batch(json!({"key": "cb", "items": [item("a")], "on_finish": on_finish_signed()}));
    assert_eq!(created["on_finish"], redacted);
    let id = created["id"].as_str().unwrap().to_string();
    host.put_subjects(json!([subject("s")]));
    host.now.set(
        chrono::DateTime::parse_from_rfc3339(put["next_fire_at"].as_str().unwrap())
            .unwrap()
            .timestamp_millis(),
    );
    let new_id = || "fired-1".to_string();
    block_on(
        host.store
            .fire_due(host.now.get(), 10, MAX_ATTEMPTS, &new_id, None),
    )
    .unwrap();
    run_due(&host, |_| Outcome::Done);
    // Both ended, each with its callback row holding the secret to sign with.
    let conn = host.store.db().conn();
    let mut stmt = conn
        .prepare("SELECT batch_id, payload ->> 'signing_secret' FROM cron_queue WHERE kind = 'callback' ORDER BY batch_id")
        .unwrap();
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        [
            (id.clone(), OWN_SECRET.to_string()),
            ("fired-1".into(), OWN_SECRET.into())
        ]
    );
    for target in [
        "/batches".to_string(),
        format!("/batches/{id}"),
        format!("/batches/{id}/items"),
        format!("/batches/{id}/timeline"),
        "/batches/fired-1".into(),
        "/batches/fired-1/items".into(),
        "/schedules".into(),
        "/schedules/hourly".into(),
        "/subjects".into(),
        "/invocations".into(),
    ] {
        let answer = host.ok(GET, &target, None, 200).to_string();
        assert!(!answer.contains(OWN_SECRET), "{target}: {answer}");
    }
    for target in [
        format!("/batches/{id}"),
        "/batches/fired-1".into(),
        "/schedules/hourly".into(),
    ] {
        assert_eq!(
            host.ok(GET, &target, None, 200)["on_finish"],
            redacted,
            "{target}"
        );
    }
    let events = format!("{:?}", host.events.borrow());
    assert!(!events.contains(OWN_SECRET), "{events}");
}

/// From `POST /batches` to the delivery: the callback row the batch's end
/// enqueues is signed with its `on_finish.signing_secret`, which no other
/// receiver holds; a batch without one is signed with `WEBHOOK_SECRET`.
#[test]
fn a_batchs_callback_is_signed_with_its_own_secret_instead_of_the_webhook_secret() {
    use cron_fanout::core::signature;
    use cron_fanout::jobs::memory::{Answer, MemoryOutbound};
    use cron_fanout::jobs::{Jobs, RunConfig};

    let host = setup();
    let own = host.create_batch(json!({"items": [item("a")], "on_finish": on_finish_signed()}));
    let shared = host.create_batch(json!({"items": [item("b")], "on_finish": {"url": HOOK}}));
    run_due(&host, |_| Outcome::Done);
    let now = host.now.get();
    let callbacks = block_on(host.store.claim_due_items(now, 10, "r", now + 60_000)).unwrap();
    let callback_of = |batch: &Value| {
        callbacks
            .iter()
            .find(|c| json!(c.batch_id) == batch["id"])
            .unwrap_or_else(|| panic!("no callback of {batch}"))
    };
    let mut cfg = RunConfig::default();
    cfg.webhook_secret = WEBHOOK_SECRET.into();
    cfg.dispatch_secrets = vec!["dispatch-secret-0123456789".into()];
    cfg.job_timeout_ms = 10_000;
    let signed_with = |row: &cron_fanout::core::model::ClaimedItem| {
        let out = MemoryOutbound::new(now);
        out.answer(HOOK, Answer::status(200));
        let ran = out.block_on(Jobs::builtin().run(row, &cfg, &out, None));
        assert_eq!(ran.outcome, Outcome::Done, "{}", row.payload);
        let sent = out.sent().remove(0);
        let body = sent.request.body.clone().unwrap_or_default();
        let header = sent
            .request
            .header_value("Fanout-Signature")
            .map(str::to_string);
        [OWN_SECRET, WEBHOOK_SECRET].map(|secret| {
            signature::verify(
                secret,
                header.as_deref(),
                sent.at_ms / 1_000,
                body.as_bytes(),
            )
            .is_ok()
        })
    };
    assert_eq!(
        signed_with(callback_of(&own)),
        [true, false],
        "its own secret only"
    );
    assert_eq!(
        signed_with(callback_of(&shared)),
        [false, true],
        "WEBHOOK_SECRET only"
    );
}

/// A callback secret equal to `DISPATCH_SECRET` (which the API cannot know) would
/// let its receiver forge dispatches: the callback fails for good, unsent.
#[test]
fn a_callback_whose_secret_is_the_dispatch_secret_is_not_sent() {
    use cron_fanout::jobs::memory::MemoryOutbound;
    use cron_fanout::jobs::{Jobs, RunConfig};

    let host = setup();
    let dispatch = "dispatch-secret-0123456789";
    host.create_batch(
        json!({"items": [item("a")], "on_finish": {"url": HOOK, "signing_secret": dispatch}}),
    );
    run_due(&host, |_| Outcome::Done);
    let now = host.now.get();
    let callbacks = block_on(host.store.claim_due_items(now, 10, "r", now + 60_000)).unwrap();
    let mut cfg = RunConfig::default();
    cfg.webhook_secret = WEBHOOK_SECRET.into();
    cfg.dispatch_secrets = vec![dispatch.into()];
    cfg.job_timeout_ms = 10_000;
    let out = MemoryOutbound::new(now);
    let ran = out.block_on(Jobs::builtin().run(&callbacks[0], &cfg, &out, None));
    assert_eq!(
        ran.outcome,
        Outcome::Fail("not sent: on_finish.signing_secret must differ from DISPATCH_SECRET".into())
    );
    assert!(out.sent().is_empty());
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
    host.create_batch(json!({"key": "mixed", "items": [
            {"subject_id": "m", "kind": "multi", "payload": {"channels": channels}},
            item("n")]}));
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

/// A `service` item has channels only once its handler reports some: its listing
/// shows `null` until then, and the receipts the commit wrote after.
#[test]
fn a_service_item_shows_receipts_once_its_handler_reported_channels() {
    let mut host = setup();
    host.services = vec!["HANDLER".into()];
    host.create_batch(json!({"key": "svc", "items": [
            {"subject_id": "s", "kind": "service", "payload": {"service": "HANDLER"}},
            {"subject_id": "t", "kind": "service", "payload": {"service": "HANDLER"}}]}));
    let list = || host.ok(GET, "/batches/batch-1/items", None, 200)["items"].clone();
    assert_eq!(list()[0]["receipts"], Value::Null, "before any run");
    let now = host.now.get();
    let claimed = block_on(host.store.claim_due_items(now, 10, "r", now + 60_000)).unwrap();
    let results = cron_fanout::core::receipts::ChannelResults::from([
        ("discord".to_string(), Outcome::Done),
        ("telegram".to_string(), Outcome::Retry("429".into())),
    ]);
    let mut commits = Vec::new();
    for item in &claimed {
        // `s` reported its channels, `t` answered 503 without any.
        let (outcome, channels) = match item.subject_id.as_str() {
            "s" => (
                cron_fanout::core::receipts::outcome(&results),
                Some(&results),
            ),
            _ => (Outcome::Retry("HTTP 503".into()), None),
        };
        let mut t = decide(item, &outcome, host.settings.retry, now, 0.0);
        t.receipts = cron_fanout::core::receipts::settle(item, channels, t.status, now);
        commits.push(t);
    }
    block_on(host.store.commit_outcomes(commits.iter())).unwrap();
    let shown = list();
    assert_eq!(
        shown[0]["receipts"],
        json!({"discord": {"status": "delivered", "at": rfc3339(now)},
               "telegram": {"status": "pending", "error": "429"}})
    );
    assert_eq!(
        shown[0]["last_error"],
        json!("attempt 1 failed: channel telegram: 429")
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
    host.create_batch(item(json!({"service": "HANDLER"})));
}
