//! `loadtest bench --only-backpressure`: webhook items against receivers that
//! take 5, 50 and 500 requests a second and answer `429` with `Retry-After: 1`
//! above that (the sink's `accept_per_s` fault), no limit set, drained by ticks,
//! each on a fresh runtime: the receiver's calls per item (1.0 is no refusal at
//! all) and the makespan ÷ the ideal (items ÷ the receiver's rate). Local
//! `wrangler dev` starts about 150 webhooks a second at best, so the 500 a second
//! receiver is never the bound here. Then, on one more runtime, a batch against
//! each fake of a real receiver (`driver::real_receiver`, as the e2e receivers
//! part runs them): calls per send past the first refusal, refusals, and the
//! makespan ÷ what the receiver's own limit allows.

use crate::driver::real_receiver::{self, Against};
use crate::driver::receiver::{open, send, Receiver};
use crate::driver::target::TargetArgs;
use crate::run::table::Table;
use anyhow::Result;
use serde::Serialize;
use std::time::Duration;

/// (receiver's requests a second, items): about 10 s of the receiver's time
/// each, the fastest capped by what the local runtime can start.
const RECEIVERS: [(u32, usize); 3] = [(5, 50), (50, 500), (500, 1_000)];

#[derive(Debug, Serialize)]
pub struct BackpressureBench {
    pub receivers: Vec<Receiver>,
    /// Against each fake of a real receiver.
    pub real: Vec<Against>,
}

impl BackpressureBench {
    pub fn table(&self, t: &mut Table) {
        t.section("Backpressure (loadtest bench --only-backpressure)");
        for r in &self.receivers {
            t.row(&[format!(
                "receiver of {}/s, {} webhooks: {} completed, {} failed; {:.2} calls per item ({} refused); makespan {:.1} s, {:.2} × the ideal {:.1} s",
                r.accept_per_s,
                r.items,
                r.completed,
                r.failed,
                r.calls_per_item,
                r.refused,
                r.makespan_s,
                r.makespan_over_ideal,
                r.ideal_s,
            )]);
        }
        for a in &self.real {
            let sent = if a.channels == 1 {
                "webhooks".to_string()
            } else {
                format!("multi items of {} channels", a.channels)
            };
            // Only a receiver that tells its budget can say it is spent.
            let after_spent = if a.announces_budget {
                format!(
                    " ({} after a spent budget's first wave)",
                    a.refused_after_spent()
                )
            } else {
                String::new()
            };
            t.row(&[format!(
                "{}, {} {sent}: {} completed, {} failed, {} on a later attempt; {:.2} calls per send after the first refusal; {} refused{after_spent}; makespan {:.1} s, {:.2} × the {:.1} s its limit allows",
                a.receiver,
                a.items,
                a.completed,
                a.failed,
                a.later_attempts,
                a.calls_per_send(),
                a.refused(),
                a.makespan_s,
                a.over_ideal(),
                a.ideal_s,
            )]);
        }
    }
}

pub async fn measure(args: &TargetArgs, timeout: Duration) -> Result<BackpressureBench> {
    let mut receivers = Vec::new();
    for (per_s, items) in RECEIVERS {
        eprintln!("== backpressure: {items} webhooks to a receiver of {per_s}/s (429 + Retry-After: 1 above)");
        receivers.push(receiver(args, per_s, items, timeout).await?);
    }
    let mut target = open(args, "bench-bp-real", &[]).await?;
    let mut real = Vec::new();
    for (d, channels) in real_receiver::runs() {
        eprintln!(
            "== backpressure: {} ({channels} channel(s) an item)",
            d.name()
        );
        real.push(real_receiver::against(&target, d, channels, timeout).await?);
    }
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(BackpressureBench { receivers, real })
}

async fn receiver(args: &TargetArgs, per_s: u32, n: usize, timeout: Duration) -> Result<Receiver> {
    let mut target = open(args, &format!("bench-bp-{per_s}"), &[]).await?;
    let r = send(&target, per_s, n, "bp", timeout).await?;
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    Ok(r)
}
