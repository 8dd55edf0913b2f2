//! `/limits` end to end over HTTP: a limit put, read with its live state, listed,
//! shown in `/metrics` under its key, deleted; bad limits and bad keys refused
//! with 400 `invalid_limit` and nothing written. Run by the e2e suite on its own
//! Worker after the bad-input checks.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::steps::{answer, limit_path};
use crate::e2e::metrics::parse_metrics;
use crate::runtime::api::{clip, Api};
use anyhow::{bail, ensure, Context, Result};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// A rate and concurrency limit, and a partitioned one, no item of the suite holds.
const RATE: &str = "e2e-github";
const PARTITION: &str = "e2e-tenant:*";

/// What the limits checks share: the Worker's API and what a check left.
struct Limits<'a> {
    api: &'a Api,
    /// The limits as `GET /limits` listed them before the bad requests.
    listed: Option<Value>,
}

pub async fn http(api: &Api, checks: &mut Checks) -> Result<()> {
    let mut f = Limits { api, listed: None };
    // What a scrape reads before any limit is defined, for the one after.
    let before = api.admin_raw(Method::GET, "/metrics", None).await?;
    println!(
        "#   GET /metrics without limits read {} rows (local D1)",
        before.header("Fanout-D1-Rows-Read").unwrap_or("?")
    );
    checks
        .run(
            &mut f,
            vec![
                check!(needed
                    "limits: PUT /limits/{key} answers 200 with the limit, its defaults filled in (a rate's burst, a partition's flag)",
                    put_answers_the_limit
                ),
                check!(
                    "limits: GET /limits/{key} answers the limit and its live state: nothing in flight, its whole burst of tokens, nothing waiting",
                    get_answers_the_live_state
                ),
                check!(
                    "limits: GET /limits lists every limit in key order",
                    get_lists_them_in_key_order
                ),
                check!(
                    "limits: /metrics has each limit's gauges under its key (tokens for the rate only)",
                    metrics_have_each_limits_gauges
                ),
                check!(
                    "limits: bad limits and bad keys are refused with 400 invalid_limit naming the field, and nothing is written",
                    bad_limits_are_refused_and_write_nothing
                ),
                check!(
                    "limits: DELETE /limits/{key} answers 200, then GET and DELETE of the key 404, and its gauges leave /metrics",
                    delete_removes_the_limit
                ),
            ],
        )
        .await;
    // Whatever failed above, leave no limit behind for the parts after this one.
    for key in [RATE, PARTITION] {
        let _ = f
            .api
            .admin_raw(Method::DELETE, &limit_path(key), None)
            .await;
    }
    Ok(())
}

async fn put_answers_the_limit(f: &mut Limits<'_>) -> Result<()> {
    let got = answer(
        f.api,
        Method::PUT,
        &limit_path(RATE),
        Some(json!({"rate": 20, "burst": 5, "concurrency": 3})),
        StatusCode::OK,
    )
    .await?;
    let want = json!({"key": RATE, "rate": 20, "per_seconds": 1, "burst": 5, "concurrency": 3, "partitioned": false});
    for (field, value) in want.as_object().unwrap() {
        ensure!(
            &got[field] == value,
            "{field}: {} in {got}, want {value}",
            got[field]
        );
    }
    let got = answer(
        f.api,
        Method::PUT,
        &limit_path(PARTITION),
        Some(json!({"concurrency": 2})),
        StatusCode::OK,
    )
    .await?;
    ensure!(
        got["partitioned"] == true && got["rate"].is_null() && got["concurrency"] == 2,
        "{got}"
    );
    Ok(())
}

async fn get_answers_the_live_state(f: &mut Limits<'_>) -> Result<()> {
    let got = answer(f.api, Method::GET, &limit_path(RATE), None, StatusCode::OK).await?;
    let seen = (
        &got["in_flight"],
        &got["tokens"],
        &got["waiting"],
        &got["waiting_capped"],
    );
    ensure!(
        seen == (&json!(0), &json!(5), &json!(0), &json!(false)),
        "{got}"
    );
    let r = f
        .api
        .admin_raw(Method::GET, &limit_path(RATE), None)
        .await?;
    println!(
        "#   GET /limits/{RATE} read {} rows (local D1)",
        r.header("Fanout-D1-Rows-Read").unwrap_or("?")
    );
    let got = answer(
        f.api,
        Method::GET,
        &limit_path(PARTITION),
        None,
        StatusCode::OK,
    )
    .await?;
    ensure!(
        got["tokens"].is_null() && got["partitions"] == json!([]) && got["in_flight"] == 0,
        "{got}"
    );
    Ok(())
}

/// Our two limits in the listing, in key order (other parts may have others).
async fn ours(api: &Api) -> Result<Vec<Value>> {
    let list = answer(api, Method::GET, "/limits?limit=1000", None, StatusCode::OK).await?;
    let all = list["limits"].as_array().context("no \"limits\" list")?;
    Ok(all
        .iter()
        .filter(|l| l["key"] == RATE || l["key"] == PARTITION)
        .cloned()
        .collect())
}

async fn get_lists_them_in_key_order(f: &mut Limits<'_>) -> Result<()> {
    let ours = ours(f.api).await?;
    let keys: Vec<&str> = ours.iter().filter_map(|l| l["key"].as_str()).collect();
    ensure!(keys == [RATE, PARTITION], "listed {keys:?}");
    f.listed = Some(json!(ours));
    Ok(())
}

async fn scrape(api: &Api) -> Result<std::collections::BTreeMap<String, f64>> {
    let r = api.admin_raw(Method::GET, "/metrics", None).await?;
    ensure!(
        r.status.is_success(),
        "GET /metrics: {} {}",
        r.status,
        clip(&r.body)
    );
    println!(
        "#   GET /metrics read {} rows (local D1)",
        r.header("Fanout-D1-Rows-Read").unwrap_or("?")
    );
    parse_metrics(&r.body)
}

async fn metrics_have_each_limits_gauges(f: &mut Limits<'_>) -> Result<()> {
    let samples = scrape(f.api).await?;
    let get = |name: &str, key: &str| samples.get(&format!("{name}{{key=\"{key}\"}}")).copied();
    let seen = [
        get("cron_fanout_limit_in_flight", RATE),
        get("cron_fanout_limit_tokens", RATE),
        get("cron_fanout_limit_waiting", RATE),
        get("cron_fanout_limit_in_flight", PARTITION),
        get("cron_fanout_limit_tokens", PARTITION),
        get("cron_fanout_limit_waiting", PARTITION),
    ];
    ensure!(
        seen == [Some(0.0), Some(5.0), Some(0.0), Some(0.0), None, Some(0.0)],
        "in_flight, tokens, waiting of {RATE} then {PARTITION}: {seen:?}"
    );
    Ok(())
}

async fn bad_limits_are_refused_and_write_nothing(f: &mut Limits<'_>) -> Result<()> {
    let long = "k".repeat(129);
    let cases: Vec<(String, Value, &str)> = vec![
        (limit_path(RATE), json!({"rate": 0}), "rate"),
        (
            limit_path(RATE),
            json!({"rate": 1, "per_seconds": 86_401}),
            "per_seconds",
        ),
        (
            limit_path(RATE),
            json!({"concurrency": 10_001}),
            "concurrency",
        ),
        (
            limit_path(RATE),
            json!({"concurrency": 3, "burst": 2}),
            "burst",
        ),
        (limit_path(RATE), json!({"rate": 5, "speed": 1}), "speed"),
        (limit_path(RATE), json!({}), "rate or concurrency"),
        (limit_path("e2e-new"), json!({"rate": "5"}), "rate"),
        (limit_path("e2e bad"), json!({"rate": 5}), "key"),
        (limit_path("e2e-tenant*"), json!({"rate": 5}), "key"),
        (limit_path(&long), json!({"rate": 5}), "key"),
    ];
    let mut wrong = Vec::new();
    for (p, body, field) in &cases {
        let r = f
            .api
            .admin_raw(Method::PUT, p, Some(body.to_string()))
            .await?;
        match r.error_shape() {
            Some((code, message))
                if r.status == StatusCode::BAD_REQUEST
                    && code == "invalid_limit"
                    && message.contains(field) => {}
            _ => wrong.push(format!("PUT {p} {body}: {} {}", r.status, clip(&r.body))),
        }
    }
    if !wrong.is_empty() {
        bail!("{}", wrong.join("; "));
    }
    let after = json!(ours(f.api).await?);
    ensure!(
        Some(&after) == f.listed.as_ref(),
        "the limits changed: {after}"
    );
    answer(
        f.api,
        Method::GET,
        &limit_path("e2e-new"),
        None,
        StatusCode::NOT_FOUND,
    )
    .await?;
    Ok(())
}

async fn delete_removes_the_limit(f: &mut Limits<'_>) -> Result<()> {
    let got = answer(
        f.api,
        Method::DELETE,
        &limit_path(RATE),
        None,
        StatusCode::OK,
    )
    .await?;
    ensure!(got == json!({"deleted": RATE}), "{got}");
    answer(
        f.api,
        Method::GET,
        &limit_path(RATE),
        None,
        StatusCode::NOT_FOUND,
    )
    .await?;
    answer(
        f.api,
        Method::DELETE,
        &limit_path(RATE),
        None,
        StatusCode::NOT_FOUND,
    )
    .await?;
    let samples = scrape(f.api).await?;
    let left: Vec<&String> = samples
        .keys()
        .filter(|k| k.contains(&format!("key=\"{RATE}\"")))
        .collect();
    ensure!(left.is_empty(), "still scraped: {left:?}");
    Ok(())
}
