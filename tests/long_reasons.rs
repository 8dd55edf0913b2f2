//! A kind's reason on its way to `last_error`, as the drain's own isolate runs it
//! (inline mode, and kinds that run in the drain: no SELF child and its header in
//! between): whatever a kind returns, its run's outcome keeps at most 1,000 bytes,
//! and so does the row the group commit writes on real SQLite.

mod common;

use common::{batch_of, claim, settle, setup};
use cron_fanout::core::model::{ClaimedItem, Outcome, MAX_REASON_BYTES};
use cron_fanout::jobs::memory::MemoryOutbound;
use cron_fanout::jobs::{Context, Job, Jobs, Ran, RunConfig};
use futures::executor::block_on;
use serde_json::Value;

/// Three megabytes of reason: a kind that hands back a whole error page.
const PAGE_BYTES: usize = 3 << 20;

/// Fails every run with a 3 MB page of text (`"fail"` in its payload: for good).
struct Verbose;

impl Job for Verbose {
    type Payload = Value;

    fn name(&self) -> &'static str {
        "verbose"
    }

    async fn run(&self, _ctx: &Context<'_>, payload: Value) -> Outcome {
        // Two-byte characters, so a cut must find a character boundary.
        let page = "é".repeat(PAGE_BYTES / 2);
        if payload.get("fail").is_some() {
            Outcome::Fail(page)
        } else {
            Outcome::Retry(page)
        }
    }
}

fn run(item: &ClaimedItem) -> Ran {
    let jobs = Jobs::builtin().with(Verbose);
    let out = MemoryOutbound::new(0);
    let mut cfg = RunConfig::default();
    cfg.job_timeout_ms = 10_000;
    out.block_on(jobs.run(item, &cfg, &out, None))
}

fn reason_bytes(outcome: &Outcome) -> usize {
    match outcome {
        Outcome::Done => 0,
        Outcome::Retry(r) | Outcome::Fail(r) => r.len(),
    }
}

#[test]
fn a_kinds_3_mb_reason_leaves_its_run_cut_to_1000_bytes() {
    let store = setup();
    batch_of(&store, "pages", 2, 3);
    let mut items = claim(&store, 0, 2, "t");
    items[1].payload = r#"{"fail": true}"#.into();
    for mut item in items {
        item.kind = "verbose".into();
        let ran = run(&item);
        let bytes = reason_bytes(&ran.outcome);
        // 1,000 bytes hold 500 two-byte characters exactly.
        assert_eq!(bytes, MAX_REASON_BYTES, "{}", item.payload);
    }
}

#[test]
fn a_kinds_3_mb_reason_is_stored_in_at_most_1000_bytes_on_every_attempt() {
    let store = setup();
    batch_of(&store, "pages", 1, 3);
    for attempt in 1..=3 {
        let now = attempt * 100_000;
        let mut items = claim(&store, now, 1, &format!("t{attempt}"));
        assert_eq!(items.len(), 1, "attempt {attempt} claimed");
        let item = &mut items[0];
        item.kind = "verbose".into();
        let ran = run(item);
        let t = settle(item, ran.outcome, now);
        assert_eq!(block_on(store.commit_outcomes(&[t])).unwrap().len(), 1);
        let (status, stored): (String, String) = store
            .db()
            .conn()
            .query_row(
                "SELECT status, last_error FROM cron_queue WHERE id = ?1",
                [item.item_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert!(
            stored.len() <= MAX_REASON_BYTES,
            "attempt {attempt} ({status}): {} bytes stored",
            stored.len()
        );
        let want = if attempt < 3 { "pending" } else { "failed" };
        assert_eq!(status, want);
    }
}
