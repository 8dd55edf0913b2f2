//! The sink over real HTTP on 127.0.0.1: signatures, faults, counting, reset.

use loadtest::sink::signature;
use loadtest::sink::{self, SinkClient};
use std::time::{Duration, Instant};

const SECRET: &str = "test-webhook-secret";

fn body(item_id: i64, attempt: u32) -> String {
    serde_json::json!({
        "item_id": item_id, "batch_id": "b1", "subject_id": format!("s{item_id}"),
        "attempt": attempt, "data": {"x": 1}
    })
    .to_string()
}

/// Posts a delivery the way the Worker does; `secret: None` sends no signature.
async fn deliver(url: &str, item_id: i64, attempt: u32, secret: Option<&str>) -> reqwest::Response {
    let body = body(item_id, attempt);
    let mut req = reqwest::Client::new()
        .post(url)
        .header("Idempotency-Key", item_id.to_string())
        .header("Content-Type", "application/json");
    if let Some(secret) = secret {
        let t = chrono::Utc::now().timestamp();
        req = req.header(
            signature::HEADER,
            signature::sign(secret.as_bytes(), t, body.as_bytes()),
        );
    }
    req.body(body).send().await.expect("sink reachable")
}

#[tokio::test]
async fn healthy_delivery_is_recorded() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let client = SinkClient::new(&sink.url());
    let resp = deliver(&format!("{}/hook/s1", sink.url()), 1, 1, Some(SECRET)).await;
    assert_eq!(resp.status(), 200);

    let stats = client.stats(true).await.unwrap();
    assert_eq!(stats.total, 1);
    assert_eq!(stats.valid_signatures, 1);
    assert_eq!(stats.per_key.get("1"), Some(&1));
    assert_eq!(stats.by_status.get("200"), Some(&1));
    let d = &stats.deliveries.unwrap()[0];
    assert_eq!(d.subject_id, "s1");
    assert_eq!(d.body_subject_id.as_deref(), Some("s1"));
    assert_eq!(
        (d.item_id, d.attempt, d.batch_id.as_deref()),
        (Some(1), Some(1), Some("b1"))
    );
    assert_eq!(d.signature, "valid");
    assert!(chrono::DateTime::parse_from_rfc3339(&d.received_at).is_ok());
}

#[tokio::test]
async fn bad_signatures_are_refused_and_recorded() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let url = format!("{}/hook/s2", sink.url());
    assert_eq!(deliver(&url, 2, 1, None).await.status(), 401);
    assert_eq!(
        deliver(&url, 2, 1, Some("wrong-secret")).await.status(),
        401
    );

    let stats = SinkClient::new(&sink.url()).stats(true).await.unwrap();
    assert_eq!(
        (
            stats.total,
            stats.invalid_signatures,
            stats.valid_signatures
        ),
        (2, 2, 0)
    );
    let sigs: Vec<String> = stats
        .deliveries
        .unwrap()
        .into_iter()
        .map(|d| d.signature)
        .collect();
    assert_eq!(sigs, ["missing", "mismatch"]);
}

#[tokio::test]
async fn fail_first_counts_per_idempotency_key() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let url = format!("{}/hook/s3?fail_first=2", sink.url());
    let mut statuses = Vec::new();
    for attempt in 1..=3 {
        statuses.push(
            deliver(&url, 3, attempt, Some(SECRET))
                .await
                .status()
                .as_u16(),
        );
    }
    // Another key on the same URL starts its own count.
    statuses.push(deliver(&url, 4, 1, Some(SECRET)).await.status().as_u16());
    assert_eq!(statuses, [503, 503, 200, 503]);

    let stats = SinkClient::new(&sink.url()).stats(false).await.unwrap();
    assert_eq!(stats.per_key.get("3"), Some(&3));
    assert_eq!(stats.duplicates, 2);
    assert!(
        stats.deliveries.is_none(),
        "the list is only sent on request"
    );
}

#[tokio::test]
async fn status_latency_and_bad_faults() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let base = sink.url();
    assert_eq!(
        deliver(&format!("{base}/hook/a?status=400"), 5, 1, Some(SECRET))
            .await
            .status(),
        400
    );

    let start = Instant::now();
    let resp = deliver(&format!("{base}/hook/b?latency_ms=150"), 6, 1, Some(SECRET)).await;
    assert_eq!(resp.status(), 200);
    assert!(start.elapsed() >= Duration::from_millis(150));

    assert_eq!(
        deliver(&format!("{base}/hook/c?latncy_ms=1"), 7, 1, Some(SECRET))
            .await
            .status(),
        400
    );
    let stats = SinkClient::new(&base).stats(true).await.unwrap();
    let last = stats.deliveries.unwrap().pop().unwrap();
    assert_eq!(last.error.as_deref(), Some("unknown fault `latncy_ms`"));
}

#[tokio::test]
async fn a_body_mib_answer_streams_that_many_bytes_chunked_and_counts_them() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let url = format!("{}/hook/big?status=404&body_mib=2", sink.url());
    let resp = deliver(&url, 8, 1, Some(SECRET)).await;
    assert_eq!(resp.status(), 404);
    assert!(resp.headers().get("content-length").is_none(), "chunked");
    let text = resp.bytes().await.unwrap();
    assert_eq!(text.len(), 2 << 20);
    assert!(text.starts_with(b"not found"));
    let stats = SinkClient::new(&sink.url()).stats(false).await.unwrap();
    assert_eq!(stats.answer_body_bytes, 2 << 20);
    assert_eq!(stats.by_status.get("404"), Some(&1));
}

#[tokio::test]
async fn a_streamed_body_stops_when_the_client_hangs_up() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let url = format!("{}/hook/big?status=404&body_mib=50", sink.url());
    let mut resp = deliver(&url, 9, 1, Some(SECRET)).await;
    assert!(!resp.chunk().await.unwrap().unwrap().is_empty());
    drop(resp);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = SinkClient::new(&sink.url());
    let sent = client.stats(false).await.unwrap().answer_body_bytes;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Only what the sockets buffered went out, and nothing more goes.
    assert!(sent < 16 << 20, "{sent} bytes");
    assert_eq!(client.stats(false).await.unwrap().answer_body_bytes, sent);
}

#[tokio::test]
async fn a_hang_the_client_abandons_stays_unanswered() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let body = body(8, 1);
    let t = chrono::Utc::now().timestamp();
    let result = reqwest::Client::new()
        .post(format!("{}/hook/h?hang_ms=5000", sink.url()))
        .header("Idempotency-Key", "8")
        .header(
            signature::HEADER,
            signature::sign(SECRET.as_bytes(), t, body.as_bytes()),
        )
        .body(body)
        .timeout(Duration::from_millis(200))
        .send()
        .await;
    assert!(result.is_err(), "the client times out first");

    let stats = SinkClient::new(&sink.url()).stats(true).await.unwrap();
    assert_eq!((stats.total, stats.unanswered), (1, 1));
    assert_eq!(stats.deliveries.unwrap()[0].status, None);
}

#[tokio::test]
async fn reset_clears_everything() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let client = SinkClient::new(&sink.url());
    deliver(&format!("{}/hook/s9", sink.url()), 9, 1, Some(SECRET)).await;
    client.reset().await.unwrap();
    let stats = client.stats(true).await.unwrap();
    assert_eq!(stats.total, 0);
    assert!(stats.per_key.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sustains_concurrent_load() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let url = format!("{}/hook/load", sink.url());
    let n = 2000;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..n {
        let url = url.clone();
        tasks.spawn(async move { deliver(&url, id, 1, Some(SECRET)).await.status().as_u16() });
        // Keep about 64 requests in flight, like a fan-out would.
        if tasks.len() >= 64 {
            assert_eq!(tasks.join_next().await.unwrap().unwrap(), 200);
        }
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
    let elapsed = start.elapsed();
    let stats = SinkClient::new(&sink.url()).stats(false).await.unwrap();
    assert_eq!(stats.total, n as u64);
    assert_eq!(stats.per_key.len(), n as usize);
    eprintln!(
        "{n} deliveries in {elapsed:?} ({:.0}/s)",
        n as f64 / elapsed.as_secs_f64()
    );
}

#[tokio::test]
async fn a_fixed_receiver_answers_200_whatever_its_faults() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let client = SinkClient::new(&sink.url());
    let url = format!("{}/hook/s7?status=500", sink.url());
    assert_eq!(deliver(&url, 7, 1, Some(SECRET)).await.status(), 500);
    client.fix(&["s7".to_string()]).await.unwrap();
    assert_eq!(deliver(&url, 7, 2, Some(SECRET)).await.status(), 200);
    // Others keep their faults; a bad signature is still refused.
    let other = format!("{}/hook/s8?status=500", sink.url());
    assert_eq!(deliver(&other, 8, 1, Some(SECRET)).await.status(), 500);
    assert_eq!(deliver(&url, 7, 3, None).await.status(), 401);
    let stats = client.stats(false).await.unwrap();
    assert_eq!(stats.by_status.get("200"), Some(&1));
    assert_eq!(stats.by_status.get("500"), Some(&2));
}

/// Posts a completion callback the way the Worker does.
async fn call_back(url: &str, body: &serde_json::Value, secret: &str) -> reqwest::Response {
    let body = body.to_string();
    let t = chrono::Utc::now().timestamp();
    reqwest::Client::new()
        .post(url)
        .header("Idempotency-Key", "batch:b1")
        .header("Content-Type", "application/json")
        .header(
            signature::HEADER,
            signature::sign(secret.as_bytes(), t, body.as_bytes()),
        )
        .body(body)
        .send()
        .await
        .expect("sink reachable")
}

#[tokio::test]
async fn callbacks_are_recorded_apart_with_their_summary_and_faults() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let client = SinkClient::new(&sink.url());
    let url = client.callback_url(
        "done",
        &loadtest::sink::faults::Faults {
            fail_first: 2,
            ..Default::default()
        },
    );
    let summary = serde_json::json!({"batch_id": "b1", "key": "k", "status": "finished",
        "total": 3, "completed": 2, "failed": 1, "cancelled": 0,
        "created_at": "2026-11-21T12:00:00.000Z", "finished_at": "2026-11-21T12:01:00.000Z"});
    let statuses = [
        call_back(&url, &summary, SECRET).await.status(),
        call_back(&url, &summary, SECRET).await.status(),
        call_back(&url, &summary, SECRET).await.status(),
    ];
    assert_eq!(statuses.map(|s| s.as_u16()), [503, 503, 200]);
    let mut extra = summary.clone();
    extra["items"] = serde_json::json!([]);
    assert_eq!(call_back(&url, &extra, SECRET).await.status(), 400);
    assert_eq!(call_back(&url, &summary, "wrong").await.status(), 401);

    let stats = client.stats(false).await.unwrap();
    assert_eq!(stats.total, 0, "callbacks are not deliveries");
    let c = &stats.callbacks;
    assert_eq!(c.len(), 5);
    assert_eq!(
        c.iter().map(|r| r.delivery_no).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert_eq!(c[2].summary.as_ref().unwrap().completed, 2);
    assert_eq!(
        (c[2].name.as_str(), c[2].signature.as_str(), c[2].status),
        ("done", "valid", Some(200))
    );
    assert!(c[3].summary.is_none() && c[3].error.is_some());
    assert_eq!(c[4].signature, "mismatch");
}

/// The premise of the e2e kill check: a callback whose sender goes away while the
/// receiver is still working on it (latency) is never answered, so a receiver
/// answers each end once even when the Worker dies mid-delivery.
#[tokio::test]
async fn a_callback_its_sender_abandons_is_never_answered() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let client = SinkClient::new(&sink.url());
    let url = client.callback_url(
        "slow",
        &loadtest::sink::faults::Faults {
            latency_ms: 600,
            ..Default::default()
        },
    );
    let body = serde_json::json!({"batch_id": "b1", "key": "k", "status": "finished",
        "total": 1, "completed": 1, "failed": 0, "cancelled": 0,
        "created_at": "2026-11-21T12:00:00.000Z", "finished_at": "2026-11-21T12:01:00.000Z"})
    .to_string();
    let t = chrono::Utc::now().timestamp();
    let result = reqwest::Client::new()
        .post(&url)
        .header("Idempotency-Key", "batch:b1")
        .header(
            signature::HEADER,
            signature::sign(SECRET.as_bytes(), t, body.as_bytes()),
        )
        .body(body)
        .timeout(Duration::from_millis(150))
        .send()
        .await;
    assert!(result.is_err(), "the sender gives up first");
    // Past the latency: an answer, had one been made, would be recorded by now.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let c = client.stats(false).await.unwrap().callbacks;
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].signature.as_str(), c[0].status), ("valid", None));
}

/// Posts `n` deliveries at once to `<base>/hook/<subject>?latency_ms=<ms>`, each
/// naming `invocation` (or none) in `Fanout-Invocation`; returns when the last
/// one was answered, with every status.
async fn burst(base: &str, n: i64, first_id: i64, ms: u64, invocation: Option<&str>) -> Vec<u16> {
    let mut tasks = tokio::task::JoinSet::new();
    for id in first_id..first_id + n {
        let url = format!("{base}/hook/s{id}?latency_ms={ms}");
        let invocation = invocation.map(str::to_string);
        tasks.spawn(async move {
            let body = body(id, 1);
            let t = chrono::Utc::now().timestamp();
            let mut req = reqwest::Client::new()
                .post(url)
                .header("Idempotency-Key", id.to_string())
                .header(
                    signature::HEADER,
                    signature::sign(SECRET.as_bytes(), t, body.as_bytes()),
                );
            if let Some(inv) = invocation {
                req = req.header(sink::INVOCATION_HEADER, inv);
            }
            req.body(body)
                .send()
                .await
                .expect("sink reachable")
                .status()
                .as_u16()
        });
    }
    let mut statuses = Vec::new();
    while let Some(s) = tasks.join_next().await {
        statuses.push(s.unwrap());
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_makes_an_invocations_seventh_request_wait_for_a_slot() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let client = SinkClient::new(&sink.url());
    client.set_connection_cap(Some(6)).await.unwrap();
    // 12 requests of one invocation at 400 ms each: two rounds of 6.
    let started = Instant::now();
    let statuses = burst(&sink.url(), 12, 100, 400, Some("inv-a")).await;
    let elapsed = started.elapsed();
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert!(
        elapsed >= Duration::from_millis(800),
        "12 requests with 6 slots took {elapsed:?}, less than two rounds"
    );
    let stats = client.stats(true).await.unwrap();
    assert_eq!(stats.connection_cap, Some(6));
    assert_eq!((stats.peak_in_flight, stats.cap_waits), (6, 6));
    let deliveries = stats.deliveries.unwrap();
    assert!(deliveries
        .iter()
        .all(|d| d.invocation.as_deref() == Some("inv-a")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_is_per_invocation_and_requests_without_the_header_are_not_capped() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let client = SinkClient::new(&sink.url());
    client.set_connection_cap(Some(6)).await.unwrap();
    // Two invocations of 6 each, and 12 without the header, all at once: one
    // round of 400 ms for everyone.
    let base = sink.url();
    let started = Instant::now();
    let (a, b, none) = tokio::join!(
        burst(&base, 6, 200, 400, Some("inv-a")),
        burst(&base, 6, 300, 400, Some("inv-b")),
        burst(&base, 12, 400, 400, None),
    );
    let elapsed = started.elapsed();
    assert!(a.iter().chain(&b).chain(&none).all(|&s| s == 200));
    assert!(
        elapsed < Duration::from_millis(790),
        "one round should do, took {elapsed:?}"
    );
    let stats = client.stats(true).await.unwrap();
    assert_eq!(
        (stats.total, stats.cap_waits, stats.peak_in_flight),
        (24, 0, 6)
    );
    let unnamed = stats
        .deliveries
        .unwrap()
        .iter()
        .filter(|d| d.invocation.is_none())
        .count();
    assert_eq!(unnamed, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_cap_an_invocations_requests_all_run_at_once() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let client = SinkClient::new(&sink.url());
    let started = Instant::now();
    burst(&sink.url(), 12, 500, 400, Some("inv-c")).await;
    assert!(started.elapsed() < Duration::from_millis(790));
    let stats = client.stats(false).await.unwrap();
    assert_eq!(stats.connection_cap, None);
    assert_eq!((stats.peak_in_flight, stats.cap_waits), (12, 0));
    // Turned on, then off again: no cap.
    client.set_connection_cap(Some(2)).await.unwrap();
    client.set_connection_cap(None).await.unwrap();
    let started = Instant::now();
    burst(&sink.url(), 6, 600, 300, Some("inv-d")).await;
    assert!(started.elapsed() < Duration::from_millis(590));
    assert_eq!(client.stats(false).await.unwrap().cap_waits, 0);
}

#[tokio::test]
async fn requests_of_a_group_are_counted_in_flight_in_each_of_its_groups() {
    let sink = sink::start(0, SECRET).await.unwrap();
    let base = sink.url();
    // Three at once in `a` (and `all`), one more in `b` (and `all`), each held 300 ms.
    let urls = [
        format!("{base}/hook/s1?latency_ms=300&group=a,all"),
        format!("{base}/hook/s2?latency_ms=300&group=a,all"),
        format!("{base}/hook/s3?latency_ms=300&group=a,all"),
        format!("{base}/hook/s4?latency_ms=300&group=b,all"),
    ];
    let sent = urls
        .iter()
        .enumerate()
        .map(|(n, url)| deliver(url, n as i64 + 1, 1, Some(SECRET)));
    for resp in futures::future::join_all(sent).await {
        assert_eq!(resp.status(), 200);
    }
    // One after the others: in flight alone, the peaks stay.
    let later = deliver(&format!("{base}/hook/s5?group=a"), 5, 1, Some(SECRET)).await;
    assert_eq!(later.status(), 200);
    let client = SinkClient::new(&base);
    let peaks = client.stats(false).await.unwrap().peak_in_flight_by_group;
    let want: std::collections::BTreeMap<String, u32> =
        [("a".into(), 3), ("all".into(), 4), ("b".into(), 1)].into();
    assert_eq!(peaks, want);
    // A reset starts each peak again from what is in flight (nothing).
    client.reset().await.unwrap();
    let peaks = client.stats(false).await.unwrap().peak_in_flight_by_group;
    assert!(peaks.values().all(|&p| p == 0), "{peaks:?}");
}
