//! Real receivers on `wrangler dev` (`loadtest e2e --only-receivers`, and in
//! the full suite): a batch of webhooks against each fake of
//! `sink::receivers` (GitHub's primary limit as a 403 and as a 429, its
//! secondary limit, Discord, Telegram with and without its header, Shopify's
//! leaky bucket, the IETF RateLimit fields, an HTTP-date `Retry-After`), each
//! on a loopback address of its own (its own `host:` key), no limit set,
//! drained by ticks; then Discord again as the two channels of `multi` items,
//! each channel a webhook on a host of its own (its own bucket and `host:`
//! key). Per receiver: every item completes on its first
//! attempt (refusals spend none), at most 1.3 calls per send once it first
//! refused (the first wave, in flight then, excepted: the calls within a
//! second of the first refusal), a makespan at most twice what its own limit
//! allows, and, for the webhooks to those that tell their budget on every
//! answer, no refusal past that first wave after the first answer saying the
//! budget was spent.

use crate::check;
use crate::driver::checks::Checks;
use crate::driver::real_receiver::{self, Against};
use crate::driver::receiver;
use crate::driver::target::{Target, TargetArgs};
use crate::sink::receivers::Dialect;
use anyhow::{ensure, Context, Result};
use std::time::Duration;

/// Calls per send allowed once the receiver first refused.
const MOST_CALLS_PER_SEND: f64 = 1.3;
const MOST_OVER_IDEAL: f64 = 2.0;

pub async fn e2e(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let mut target = receiver::open(args, "e2e-receivers", &[])
        .await
        .context("starting the receivers Worker")?;
    for (d, channels) in real_receiver::runs() {
        let mut r = Run {
            target: &target,
            timeout,
            dialect: d,
            channels,
        };
        let sent = if channels == 1 {
            "webhooks".to_string()
        } else {
            format!("multi items of {channels} channels, each channel a receiver of its own,")
        };
        let list = vec![check!(
            format!(
                "receivers: {} {sent} to {} ({} per {:?}), no limit set: all complete on their first attempt, at most {MOST_CALLS_PER_SEND} calls per send after the first refusal, within {MOST_OVER_IDEAL} × what its limit allows{}",
                real_receiver::items(d),
                d.name(),
                d.limit().0,
                d.limit().1,
                budget_rule(d, channels)
            ),
            a_batch_against_the_receiver
        )];
        checks.run(&mut r, list).await;
    }
    target.stop_checked("receivers: ", checks).await;
    Ok(())
}

/// What the check says of refusals after a spent budget.
fn budget_rule(d: Dialect, channels: usize) -> &'static str {
    match (d.announces_budget(), channels) {
        (false, _) => "",
        (true, 1) => ", no refusal after the first wave once it said its budget was spent",
        // Items holding two rate keys start at the claim, 2 or 3 at once, and
        // a tick's new drain knows no budget left: one may meet the window's
        // last call (docs/guides/flow-control.md).
        (true, _) => " (refusals after a spent budget printed, not bounded)",
    }
}

struct Run<'a> {
    target: &'a Target,
    timeout: Duration,
    dialect: Dialect,
    /// 1: webhooks; more: `multi` items with a channel per receiver host.
    channels: usize,
}

async fn a_batch_against_the_receiver(r: &mut Run<'_>) -> Result<()> {
    let a: Against = real_receiver::against(r.target, r.dialect, r.channels, r.timeout).await?;
    for (c, seen) in a.hosts.iter().enumerate() {
        let channel = if a.channels == 1 {
            String::new()
        } else {
            format!(" channel-{c}")
        };
        println!(
            "#   receivers: {}{channel}: {} calls, {} refused; after the first refusal {} calls for {} sends ({:.2} per send); refusals after the first wave past the first spent budget: {}",
            a.receiver,
            seen.calls,
            seen.refused,
            seen.calls_after,
            seen.sends_after,
            seen.calls_per_send(),
            seen.refused_after_spent,
        );
    }
    println!(
        "#   receivers: {}: {} completed, {} failed, {} on a later attempt; makespan {:.1} s, {:.2} × the {:.1} s its limit allows",
        a.receiver,
        a.completed,
        a.failed,
        a.later_attempts,
        a.makespan_s,
        a.over_ideal(),
        a.ideal_s,
    );
    ensure!(
        a.completed == a.items as u64 && a.failed == 0,
        "not all completed"
    );
    ensure!(a.later_attempts == 0, "refusals spent attempts");
    ensure!(
        a.calls_per_send() <= MOST_CALLS_PER_SEND,
        "too many calls per send"
    );
    if r.dialect.announces_budget() && r.channels == 1 {
        ensure!(
            a.refused_after_spent() == 0,
            "refused after it said its budget was spent"
        );
    }
    ensure!(
        a.makespan_s <= MOST_OVER_IDEAL * a.ideal_s.max(1.0),
        "too slow"
    );
    Ok(())
}
