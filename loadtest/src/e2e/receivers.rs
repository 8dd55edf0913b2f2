//! Real receivers on `wrangler dev` (`loadtest e2e --only-receivers`, and in
//! the full suite): a batch of webhooks against each fake of
//! `sink::receivers` (GitHub's primary limit as a 403 and as a 429, its
//! secondary limit, Discord, Telegram with and without its header, Shopify's
//! leaky bucket, the IETF RateLimit fields, an HTTP-date `Retry-After`), each
//! on a loopback address of its own (its own `host:` key), no limit set,
//! drained by ticks. Per receiver: every item completes on its first
//! attempt (refusals spend none), at most 1.3 calls per send once it first
//! refused (the first wave, in flight then, excepted: the calls within a
//! second of the first refusal), a makespan at most twice what its own limit
//! allows, and, for those that tell their budget on every answer, no refusal
//! past that first wave after the first answer saying the budget was spent.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::drive::{self, Pace};
use crate::driver::receiver;
use crate::driver::target::{Target, TargetArgs};
use crate::sink::receivers::{Call, Dialect};
use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Calls per send allowed once the receiver first refused.
const MOST_CALLS_PER_SEND: f64 = 1.3;
const MOST_OVER_IDEAL: f64 = 2.0;
/// The first wave: calls already on their way when the first refusal (or the
/// first answer saying the budget was spent) came back.
const FIRST_WAVE_MS: u64 = 1_000;

/// Items per receiver: 10 s of its limit past its first window or bucket.
fn items(d: Dialect) -> usize {
    match d {
        Dialect::GithubPrimary403 | Dialect::GithubPrimary429 => 60,
        Dialect::Shopify => 150,
        _ => 55,
    }
}

/// What the receiver's own limit allows for `n` calls (s): whole windows past
/// the first for a window, the calls past the bucket at its rate for a bucket.
fn ideal_s(d: Dialect, n: usize) -> f64 {
    let (quota, window) = d.limit();
    let (q, w) = (quota as usize, window.as_secs_f64());
    match d {
        Dialect::Telegram | Dialect::TelegramBody | Dialect::Shopify => {
            n.saturating_sub(q) as f64 * w / q as f64
        }
        _ => ((n - 1) / q) as f64 * w,
    }
}

pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let mut target = receiver::open(args, "e2e-receivers", &[])
        .await
        .context("starting the receivers Worker")?;
    for d in Dialect::ALL {
        let mut r = Run {
            target: &target,
            timeout,
            dialect: d,
        };
        let list = vec![check!(
            format!(
                "receivers: {} webhooks to {} ({} per {:?}), no limit set: all complete on their first attempt, at most {MOST_CALLS_PER_SEND} calls per send after the first refusal, within {MOST_OVER_IDEAL} × what its limit allows{}",
                items(d),
                d.name(),
                d.limit().0,
                d.limit().1,
                if d.announces_budget() { ", no refusal after the first wave once it said its budget was spent" } else { "" }
            ),
            a_batch_against_the_receiver
        )];
        checks.run(&mut r, list).await;
    }
    target.stop_checked("receivers: ", checks).await;
    Ok(())
}

struct Run<'a> {
    target: &'a Target,
    timeout: Duration,
    dialect: Dialect,
}

async fn a_batch_against_the_receiver(r: &mut Run<'_>) -> Result<()> {
    let (d, target) = (r.dialect, r.target);
    let n = items(d);
    let base = target.sink.base().to_string();
    let http = reqwest::Client::new();
    http.post(format!("{base}/receivers/reset")).send().await?;
    let host = own_host(&http, &base, d).await;
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let id = format!("{}-{i:05}", d.name());
            json!({"subject_id": id, "kind": "webhook",
                   "payload": {"url": format!("{host}/receivers/{}/{id}", d.name()), "data": {}}})
        })
        .collect();
    let (created, b) = target
        .api
        .create_batch(&json!({"key": format!("receivers-{}", d.name()), "items": items}))
        .await?;
    ensure!(created, "batch for {} existed", d.name());
    let started = Instant::now();
    let pace = Pace {
        every: Duration::from_millis(200),
        max_in_flight: 1,
        timeout: r.timeout,
    };
    let driven = drive::until_finished(&target.api, &b, pace, JoinSet::new()).await?;
    let makespan_s = started.elapsed().as_secs_f64();
    let calls: Vec<Call> = http
        .get(format!("{base}/receivers/{}/calls", d.name()))
        .send()
        .await?
        .json()
        .await?;
    let attempts = target.api.all_items(&b.id, None).await?;
    let seen = Seen::of(&calls);
    let ideal = ideal_s(d, n);
    println!(
        "#   receivers: {}: {} completed, {} failed, {} on a later attempt; {} calls, {} refused; after the first refusal {} calls for {} sends ({:.2} per send); refusals after the first wave past the first spent budget: {}; makespan {makespan_s:.1} s, {:.2} × the {ideal:.1} s its limit allows",
        d.name(),
        driven.batch.completed,
        driven.batch.failed,
        attempts.iter().filter(|i| i.attempt > 1).count(),
        calls.len(),
        seen.refused,
        seen.calls_after,
        seen.sends_after,
        seen.calls_per_send(),
        seen.refused_after_spent,
        makespan_s / ideal.max(0.001),
    );
    ensure!(
        driven.batch.completed == n as u64 && driven.batch.failed == 0,
        "not all completed"
    );
    ensure!(
        attempts.iter().all(|i| i.attempt == 1),
        "refusals spent attempts"
    );
    ensure!(
        seen.calls_per_send() <= MOST_CALLS_PER_SEND,
        "too many calls per send"
    );
    ensure!(makespan_s <= MOST_OVER_IDEAL * ideal.max(1.0), "too slow");
    if d.announces_budget() {
        ensure!(
            seen.refused_after_spent == 0,
            "refused after it said its budget was spent"
        );
    }
    Ok(())
}

/// The sink's base on a loopback address of the receiver's own
/// (`sink::MORE_HOSTS`): its items hold a `host:` key no other receiver's
/// answers taught, as real receivers are each a host of their own. The shared
/// base when the sink does not answer there (a sink started elsewhere).
async fn own_host(http: &reqwest::Client, base: &str, d: Dialect) -> String {
    let place = Dialect::ALL.iter().position(|&x| x == d).unwrap_or(0) as u8;
    let n = *crate::sink::MORE_HOSTS.start() + place;
    if !crate::sink::MORE_HOSTS.contains(&n) || !base.contains("//127.0.0.1:") {
        return base.to_string();
    }
    let own = base.replacen("//127.0.0.1:", &format!("//127.0.0.{n}:"), 1);
    let answers = http
        .get(format!("{own}/receivers/{}/calls", d.name()))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    if answers {
        own
    } else {
        base.to_string()
    }
}

/// What the receiver's record says.
struct Seen {
    refused: usize,
    /// Calls, and distinct subjects sent, past the first wave after the first
    /// refusal.
    calls_after: usize,
    sends_after: usize,
    /// Refusals past the first wave after the first answer saying the budget
    /// was spent.
    refused_after_spent: usize,
}

impl Seen {
    fn of(calls: &[Call]) -> Seen {
        let first_refusal = calls.iter().find(|c| c.refused).map(|c| c.at_ms);
        let after: Vec<&Call> = match first_refusal {
            Some(at) => calls
                .iter()
                .filter(|c| c.at_ms > at + FIRST_WAVE_MS)
                .collect(),
            None => Vec::new(),
        };
        let mut subjects: Vec<&str> = after.iter().map(|c| c.subject.as_str()).collect();
        subjects.sort_unstable();
        subjects.dedup();
        let first_spent = calls.iter().find(|c| c.spent).map(|c| c.at_ms);
        Seen {
            refused: calls.iter().filter(|c| c.refused).count(),
            calls_after: after.len(),
            sends_after: subjects.len(),
            refused_after_spent: first_spent.map_or(0, |at| {
                calls
                    .iter()
                    .filter(|c| c.refused && c.at_ms > at + FIRST_WAVE_MS)
                    .count()
            }),
        }
    }

    fn calls_per_send(&self) -> f64 {
        if self.sends_after == 0 {
            return 1.0;
        }
        self.calls_after as f64 / self.sends_after as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(subject: &str, at_ms: u64, refused: bool, spent: bool) -> Call {
        Call {
            subject: subject.into(),
            at_ms,
            refused,
            announced: true,
            spent,
        }
    }

    #[test]
    fn calls_per_send_count_past_the_first_wave_after_the_first_refusal() {
        let calls = [
            call("a", 0, false, false),
            call("b", 10, true, true),
            call("c", 500, true, false),
            call("b", 1_500, false, false),
            call("c", 1_600, true, false),
            call("c", 2_600, false, false),
        ];
        let seen = Seen::of(&calls);
        assert_eq!(
            (seen.refused, seen.calls_after, seen.sends_after),
            (3, 3, 2)
        );
        assert!((seen.calls_per_send() - 1.5).abs() < 1e-9);
        assert_eq!(seen.refused_after_spent, 1, "c at 1,600 ms");
    }

    #[test]
    fn what_a_limit_allows_is_whole_windows_past_the_first_or_the_calls_past_a_bucket() {
        // 10 per 2 s: 60 in the first window and five more.
        assert_eq!(ideal_s(Dialect::GithubPrimary403, 60), 10.0);
        assert_eq!(ideal_s(Dialect::Ietf, 55), 10.0);
        // A bucket of 100 at 5 a second: the 50 past it in 10 s.
        assert_eq!(ideal_s(Dialect::Shopify, 150), 10.0);
        assert_eq!(ideal_s(Dialect::Telegram, 55), 10.0);
        assert_eq!(ideal_s(Dialect::Discord, 55), 10.0);
    }
}
