//! One batch against a fake of a real receiver (`sink::receivers`), on a
//! Worker of `driver::receiver::open`: webhooks to the receiver on a loopback
//! address of its own (its own `host:` key), or `multi` items whose channels
//! are each the receiver on a host of its own (its own bucket and `host:` key),
//! no limit set, drained by ticks. What the e2e receivers part checks and
//! `bench --only-backpressure` reports per receiver.

use crate::driver::drive;
use crate::driver::target::Target;
use crate::sink::receivers::{Call, Dialect};
use anyhow::{ensure, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;

/// The first wave: calls already on their way when the first refusal (or the
/// first answer saying the budget was spent) came back.
pub const FIRST_WAVE_MS: u64 = 1_000;

/// Channels of the `multi` items run against Discord.
pub const MULTI_CHANNELS: usize = 2;

/// The runs: every receiver with webhooks, then Discord as `multi` channels;
/// only those `LOADTEST_RECEIVERS` names (`ietf,discord-multi`) when it is set.
pub fn runs() -> impl Iterator<Item = (Dialect, usize)> {
    let only = std::env::var("LOADTEST_RECEIVERS").ok();
    Dialect::ALL
        .iter()
        .map(|&d| (d, 1))
        .chain([(Dialect::Discord, MULTI_CHANNELS)])
        .filter(move |&(d, channels)| {
            only.as_deref().is_none_or(|names| {
                let name = run_name(d, channels);
                names.split(',').any(|n| n.trim() == name)
            })
        })
}

fn run_name(d: Dialect, channels: usize) -> String {
    if channels == 1 {
        d.name().to_string()
    } else {
        format!("{}-multi", d.name())
    }
}

/// Items per receiver: 10 s of its limit past its first window or bucket.
pub fn items(d: Dialect) -> usize {
    match d {
        Dialect::GithubPrimary403 | Dialect::GithubPrimary429 => 60,
        Dialect::Shopify => 150,
        Dialect::Discord => 30,
        _ => 55,
    }
}

/// What the receiver's own limit allows for `n` calls (s): whole windows past
/// the first for a window, the calls past the bucket at its rate for a bucket.
pub fn ideal_s(d: Dialect, n: usize) -> f64 {
    let (quota, window) = d.limit();
    let (q, w) = (quota as usize, window.as_secs_f64());
    match d {
        Dialect::Telegram | Dialect::TelegramBody | Dialect::Shopify => {
            n.saturating_sub(q) as f64 * w / q as f64
        }
        _ => ((n - 1) / q) as f64 * w,
    }
}

/// One run: the batch's end and what each receiver host saw.
#[derive(Debug, Serialize)]
pub struct Against {
    pub receiver: String,
    pub items: usize,
    pub channels: usize,
    /// The receiver tells its budget on every answer.
    pub announces_budget: bool,
    pub completed: u64,
    pub failed: u64,
    /// Items that ended on a later attempt than their first.
    pub later_attempts: usize,
    /// Per receiver host (a channel each for `multi`).
    pub hosts: Vec<Seen>,
    pub makespan_s: f64,
    pub ideal_s: f64,
}

impl Against {
    pub fn over_ideal(&self) -> f64 {
        self.makespan_s / self.ideal_s.max(0.001)
    }

    /// The most calls per send of any of its hosts.
    pub fn calls_per_send(&self) -> f64 {
        self.hosts
            .iter()
            .map(Seen::calls_per_send)
            .fold(1.0, f64::max)
    }

    pub fn refused(&self) -> usize {
        self.hosts.iter().map(|h| h.refused).sum()
    }

    pub fn refused_after_spent(&self) -> usize {
        self.hosts.iter().map(|h| h.refused_after_spent).sum()
    }
}

/// A batch of `items(d)` against `d`: webhooks (`channels` 1), else `multi`
/// items of `channels` channels, each the receiver on a host of its own.
pub async fn against(
    target: &Target,
    d: Dialect,
    channels: usize,
    timeout: Duration,
) -> Result<Against> {
    let n = items(d);
    let base = target.sink.base().to_string();
    let http = reqwest::Client::new();
    http.post(format!("{base}/receivers/reset")).send().await?;
    // A host per channel, past the hosts of the single-receiver runs.
    let mut hosts = Vec::new();
    for c in 0..channels {
        let place = if channels == 1 {
            Dialect::ALL.iter().position(|&x| x == d).unwrap_or(0)
        } else {
            Dialect::ALL.len() + c
        };
        hosts.push(own_host(&http, &base, d, place as u8).await);
    }
    ensure!(
        channels == 1 || hosts.iter().all(|h| *h != base),
        "the sink answers on no host of its own for each channel"
    );
    let name = run_name(d, channels);
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let id = format!("{name}-{i:05}");
            let url = |host: &str| format!("{host}/receivers/{}/{id}", d.name());
            if channels == 1 {
                return json!({"subject_id": id, "kind": "webhook",
                              "payload": {"url": url(&hosts[0]), "data": {}}});
            }
            let list: Vec<Value> = hosts
                .iter()
                .enumerate()
                .map(|(c, host)| json!({"name": format!("channel-{c}"), "url": url(host)}))
                .collect();
            json!({"subject_id": id, "kind": "multi",
                   "payload": {"channels": list, "data": {}}})
        })
        .collect();
    let key = format!("receivers-{name}");
    let (driven, makespan_s) =
        drive::batch_until_finished(&target.api, &key, items, timeout).await?;
    let attempts = target.api.all_items(&driven.batch.id, None).await?;
    let mut seen = Vec::new();
    for host in &hosts {
        let calls: Vec<Call> = http
            .get(format!("{host}/receivers/{}/calls", d.name()))
            .send()
            .await?
            .json()
            .await?;
        // Every call, for reading a run's timeline (`LOADTEST_RECEIVER_CALLS`: a folder).
        if let Ok(dir) = std::env::var("LOADTEST_RECEIVER_CALLS") {
            let file = format!("{dir}/{name}-{}.json", seen.len());
            std::fs::write(&file, serde_json::to_string(&calls)?)?;
        }
        seen.push(Seen::of(&calls));
    }
    Ok(Against {
        receiver: name,
        items: n,
        channels,
        announces_budget: d.announces_budget(),
        completed: driven.batch.completed,
        failed: driven.batch.failed,
        later_attempts: attempts.iter().filter(|i| i.attempt > 1).count(),
        hosts: seen,
        makespan_s,
        ideal_s: ideal_s(d, n),
    })
}

/// The sink's base on a loopback address of the run's own
/// (`sink::MORE_HOSTS`, the `place`-th): its items hold a `host:` key no other
/// receiver's answers taught, as real receivers are each a host of their own.
/// The shared base when the sink does not answer there (a sink started
/// elsewhere).
async fn own_host(http: &reqwest::Client, base: &str, d: Dialect, place: u8) -> String {
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

/// What one receiver host's record says.
#[derive(Debug, Serialize)]
pub struct Seen {
    pub calls: usize,
    pub refused: usize,
    /// Calls, and distinct subjects sent, past the first wave after the first
    /// refusal.
    pub calls_after: usize,
    pub sends_after: usize,
    /// Refusals past the first wave after the first answer saying the budget
    /// was spent.
    pub refused_after_spent: usize,
}

impl Seen {
    pub fn of(calls: &[Call]) -> Seen {
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
            calls: calls.len(),
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

    pub fn calls_per_send(&self) -> f64 {
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
            (seen.calls, seen.refused, seen.calls_after, seen.sends_after),
            (6, 3, 3, 2)
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
        assert_eq!(ideal_s(Dialect::Discord, 30), 10.0);
    }

    #[test]
    fn a_run_counts_the_worst_of_its_hosts() {
        let host = |calls_after, sends_after, refused| Seen {
            calls: 10,
            refused,
            calls_after,
            sends_after,
            refused_after_spent: refused,
        };
        let a = Against {
            receiver: "discord-multi".into(),
            items: 55,
            channels: 2,
            announces_budget: true,
            completed: 55,
            failed: 0,
            later_attempts: 0,
            hosts: vec![host(10, 10, 0), host(12, 10, 2)],
            makespan_s: 15.0,
            ideal_s: 10.0,
        };
        assert!((a.calls_per_send() - 1.2).abs() < 1e-9);
        assert_eq!((a.refused(), a.refused_after_spent()), (2, 2));
        assert!((a.over_ideal() - 1.5).abs() < 1e-9);
    }
}
