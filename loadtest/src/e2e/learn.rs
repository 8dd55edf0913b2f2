//! Learned rates on `wrangler dev` (`loadtest e2e --only-learn`, and in the
//! full suite): a receiver that takes 10 requests a second and
//! answers `429` with `Retry-After: 1` above that, 300 webhooks to it with no
//! limit set, drained by ticks. Its refusals teach its implicit key
//! (`host:127.0.0.1`) a rate, so the batch completes with few refusals and in
//! at most twice the ideal time; `GET /limits` lists the learned key; and with
//! a limit of 6 a second set on the key the receiver refuses nothing. On a Worker
//! of its own with the bench's settings (`driver::receiver::open`) but the
//! default MAX_ATTEMPTS (5).

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::receiver::{self, Receiver};
use crate::driver::steps::put_limit;
use crate::driver::target::{Target, TargetArgs};
use anyhow::{ensure, Context, Result};
use reqwest::Method;
use serde_json::json;
use std::time::Duration;

/// The receiver's rate, and the items sent to it with no limit set.
const PER_S: u32 = 10;
const ITEMS: usize = 300;
/// Requests per item the receiver may see in all (refused ones included).
const MOST_CALLS_PER_ITEM: f64 = 1.3;
/// The makespan's bound: twice the ideal (items ÷ the receiver's rate).
const MOST_OVER_IDEAL: f64 = 2.0;
/// The limit set on the key afterwards (burst 2), and the items sent under it.
const SET_PER_S: u32 = 6;
const SET_ITEMS: usize = 60;
const SINK_KEY: &str = "host:127.0.0.1";

pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let mut target = receiver::open(args, "e2e-learn", &[("MAX_ATTEMPTS", "5")])
        .await
        .context("starting the learned-rates Worker")?;
    let mut l = Learn {
        target: &target,
        timeout,
    };
    let list = vec![
        check!(needed
            format!("learn: {ITEMS} webhooks to a receiver of {PER_S}/s (429 + Retry-After: 1 above), no limit set, drained by ticks: all complete, none fails, at most {MOST_CALLS_PER_ITEM} calls per item, within {MOST_OVER_IDEAL} × the ideal"),
            refusals_teach_the_key_its_receivers_rate
        ),
        check!(
            format!("learn: GET /limits lists {SINK_KEY} as learned, with its rate and refusals"),
            get_limits_lists_the_learned_key
        ),
        check!(
            format!("learn: with PUT /limits/{SINK_KEY} at {SET_PER_S}/s (burst 2), {SET_ITEMS} webhooks to the same receiver meet not one 429"),
            a_set_rate_under_the_receivers_meets_no_refusal
        ),
    ];
    checks.run(&mut l, list).await;
    target.stop_checked("learn: ", checks).await;
    Ok(())
}

struct Learn<'a> {
    target: &'a Target,
    timeout: Duration,
}

fn shown(r: &Receiver) -> String {
    format!(
        "{} completed, {} failed; {} calls ({} refused), {:.2} per item; makespan {:.1} s, {:.2} × the ideal {:.1} s",
        r.completed, r.failed, r.calls, r.refused, r.calls_per_item, r.makespan_s,
        r.makespan_over_ideal, r.ideal_s
    )
}

async fn refusals_teach_the_key_its_receivers_rate(l: &mut Learn<'_>) -> Result<()> {
    l.target.sink.reset().await?;
    let r = receiver::send(l.target, PER_S, ITEMS, "learn", l.timeout).await?;
    println!("#   learn: {}", shown(&r));
    ensure!(
        r.completed == ITEMS as u64 && r.failed == 0,
        "not all completed: {}",
        shown(&r)
    );
    ensure!(
        r.calls_per_item <= MOST_CALLS_PER_ITEM,
        "too many calls: {}",
        shown(&r)
    );
    ensure!(
        r.makespan_over_ideal <= MOST_OVER_IDEAL,
        "too slow: {}",
        shown(&r)
    );
    Ok(())
}

async fn get_limits_lists_the_learned_key(l: &mut Learn<'_>) -> Result<()> {
    let api = &l.target.api;
    let r = api.admin_raw(Method::GET, "/limits", None).await?;
    let body = r.json().context("GET /limits is not JSON")?;
    let learned = body["learned"].as_array().context("no learned list")?;
    let key = learned
        .iter()
        .find(|k| k["key"] == SINK_KEY)
        .with_context(|| format!("{SINK_KEY} is not learned: {learned:?}"))?;
    println!("#   learn: {key}");
    ensure!(key["learned"] == true, "{key}");
    ensure!(key["learned_per_seconds"] == 60, "{key}");
    let rate = key["learned_rate"].as_i64().context("no learned_rate")?;
    ensure!(rate >= 1, "{key}");
    ensure!(key["refusals"].as_i64().unwrap_or(0) >= 1, "{key}");
    let one = api
        .admin_raw(Method::GET, &format!("/limits/{SINK_KEY}"), None)
        .await?;
    let one = one.json().context("GET /limits/{key} is not JSON")?;
    ensure!(one["learned"] == true, "GET /limits/{SINK_KEY}: {one}");
    Ok(())
}

async fn a_set_rate_under_the_receivers_meets_no_refusal(l: &mut Learn<'_>) -> Result<()> {
    put_limit(
        &l.target.api,
        SINK_KEY,
        json!({"rate": SET_PER_S, "burst": 2}),
    )
    .await?;
    // The receiver's last second of the batch before is over.
    tokio::time::sleep(Duration::from_secs(1)).await;
    l.target.sink.reset().await?;
    let r = receiver::send(l.target, PER_S, SET_ITEMS, "set", l.timeout).await?;
    println!("#   learn: {}", shown(&r));
    if r.refused > 0 {
        print_the_second_before_each_refusal(l).await?;
    }
    ensure!(
        r.completed == SET_ITEMS as u64 && r.refused == 0,
        "{}",
        shown(&r)
    );
    Ok(())
}

/// What the receiver took in the second before each refusal: the instants and the
/// invocations that sent them, to tell a charge from a late dispatch.
async fn print_the_second_before_each_refusal(l: &Learn<'_>) -> Result<()> {
    let all = l.target.sink.deliveries().await?;
    let at = |d: &crate::sink::client::Delivery| {
        chrono::DateTime::parse_from_rfc3339(&d.received_at)
            .map(|t| t.timestamp_millis())
            .unwrap_or(0)
    };
    for refused in all.iter().filter(|d| d.status == Some(429)) {
        let end = at(refused);
        for d in all.iter().filter(|d| (end - 1000..=end).contains(&at(d))) {
            println!(
                "#   learn: {} {} {:?} {:?}",
                d.received_at, d.subject_id, d.status, d.invocation
            );
        }
    }
    Ok(())
}
