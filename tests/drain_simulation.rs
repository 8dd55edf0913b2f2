//! The drain machine (`core::drain`) run by the Worker's own loop (`drain_loop`)
//! against the real store (SQLite with the D1 migrations, the metered `Db`) in
//! virtual time, over many seeded worlds: slow or failing D1, hanging children,
//! another tick's reaper, platform refusals, an operator, multi-channel items.
//! What the worlds are, what every run must hold, and which seeds catch which
//! regression: docs/architecture/drain.md, "The drain: a state machine and its shell".

mod common;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;

use cron_fanout::core::budget::{Budget, DrainLimits, TAIL_SUBREQUESTS};
use cron_fanout::core::control::{decide, BatchStatus, Control, Move};
use cron_fanout::core::cost::{self, Cost};
use cron_fanout::core::drain::{Drain, Policy, Refused, Report, Settled};
use cron_fanout::core::model::{
    ClaimedItem, InvocationSummary, Outcome, Ran, StopReason, Tally, Trigger,
};
use cron_fanout::core::receipts::{self, ChannelResults, Receipt};
use cron_fanout::core::retry::RetryPolicy;
use cron_fanout::core::timing::{call_ms, min_deadline_ms, min_lease_ms};
use cron_fanout::core::upkeep::Upkeep;
use cron_fanout::core::watchdog::COHORT_MS;
use cron_fanout::drain_loop::{self, Event, Ports};
use cron_fanout::sql;
use cron_fanout::store::metered::Metered;
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{
    BatchSource, Claim, Claimed, Db, Param, Store, StoreError, StoreResult, Usage,
};
use futures::FutureExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

/// Ticks per seed: one minute apart, each one invocation (reap, drain, finish,
/// summary), until the batch is finished.
const MAX_TICKS: i64 = 25;
const TICK_MS: i64 = 60_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// The call fails; nothing was applied.
    Before,
    /// The write was applied, but the call reports a failure.
    After,
}

/// SQLite that fails the next call when told to, and counts the calls that
/// reached it (what the meter let through).
struct Faulty {
    db: SqliteDb,
    next: Cell<Option<Fault>>,
    calls: Cell<i64>,
}

impl Faulty {
    fn fail(&self, fault: Fault) -> StoreError {
        StoreError::Db(format!("injected: failed {fault:?}"))
    }
}

impl Db for Faulty {
    async fn query<T: DeserializeOwned>(
        &self,
        sql: &str,
        params: Vec<Param>,
    ) -> StoreResult<Vec<T>> {
        self.calls.set(self.calls.get() + 1);
        match self.next.take() {
            None => self.db.query(sql, params).await,
            Some(Fault::Before) => Err(self.fail(Fault::Before)),
            Some(Fault::After) => {
                self.db.query::<Value>(sql, params).await?;
                Err(self.fail(Fault::After))
            }
        }
    }

    async fn batch_results(
        &self,
        statements: Vec<(&'static str, Vec<Param>)>,
    ) -> StoreResult<Vec<Vec<Value>>> {
        self.calls.set(self.calls.get() + 1);
        match self.next.take() {
            None => self.db.batch_results(statements).await,
            Some(Fault::Before) => Err(self.fail(Fault::Before)),
            Some(Fault::After) => {
                self.db.batch_results(statements).await?;
                Err(self.fail(Fault::After))
            }
        }
    }

    fn usage(&self) -> Usage {
        self.db.usage()
    }
}

/// How D1 fails in one seed.
#[derive(Debug, Clone, Copy)]
enum Faults {
    /// Each claim and commit call fails with these odds (so a commit may fail
    /// twice); `after_apply`: share of failures that had applied their write.
    Random {
        claim: f64,
        commit: f64,
        after_apply: f64,
    },
    /// In every invocation exactly one claim call (the n-th) and one commit call
    /// (the n-th, counting retries) fail: one transient error per kind.
    Nth {
        claim: (i64, Fault),
        commit: (i64, Fault),
    },
}

/// How long D1 takes to answer a call.
#[derive(Debug, Clone, Copy)]
enum Latency {
    /// Anywhere from 1 ms to this.
    Quick(i64),
    /// A busy D1 (the single writer on a daily INSERT … SELECT): every call,
    /// the invocation's first step included, takes between half of this and all
    /// of it, up to several times the 1 s wind-down.
    Busy(i64),
}

/// One seed's world.
#[derive(Debug, Clone)]
struct Params {
    items: usize,
    max_attempts: i64,
    policy: Policy,
    budget: i64,
    faults: Faults,
    latency: Latency,
    /// Child behaviour: share that never answer (abandoned), retry, fail.
    hang: f64,
    retry: f64,
    fail: f64,
    /// How far the other tick's clock runs ahead of this one's (isolates on
    /// different machines do not share a clock): when it does, that reaper takes
    /// live leases, and lost leases happen.
    reaper_ahead_ms: i64,
}

impl Params {
    /// One failure per kind, leases the rule sized: nothing may be lost to a
    /// commit error.
    fn strict(&self) -> bool {
        matches!(self.faults, Faults::Nth { .. }) && self.reaper_ahead_ms == 0
    }
}

fn params(rng: &mut StdRng) -> Params {
    // Sometimes calls as quick as a D1 round trip, so outcomes pile up behind a
    // running commit.
    let slowest_call = if rng.random_bool(0.3) { 100 } else { 3_000 };
    let job_timeout_ms = rng.random_range(10..=slowest_call);
    // Mostly small windows; sometimes lines longer than one commit (500 rows).
    let wide = rng.random_bool(0.2);
    let concurrency = rng.random_range(1..=if wide { 600 } else { 50 });
    let claim_chunk = rng.random_range(1..=if wide { 1_000 } else { 200 });

    let latency = if rng.random_bool(0.25) {
        Latency::Busy(rng.random_range(300..=2_500))
    } else {
        // Up to a slow D1: the 1 s wind-down covers a claim's and a few
        // commits' round trips.
        let slowest = if rng.random_bool(0.2) { 150 } else { 30 };
        Latency::Quick(rng.random_range(1..=slowest))
    };
    // Half the time exactly the smallest lease the settings accept.
    let lease_ms = min_lease_ms(job_timeout_ms, claim_chunk, concurrency)
        + [0, rng.random_range(0..=30_000)][rng.random_range(0..2)];
    let reaper_ahead_ms = if rng.random_bool(0.15) {
        rng.random_range(1..=lease_ms)
    } else {
        0
    };
    let faults = if rng.random_bool(0.4) {
        let fault = |rng: &mut StdRng| {
            if rng.random_bool(0.5) {
                Fault::After
            } else {
                Fault::Before
            }
        };
        Faults::Nth {
            claim: (rng.random_range(1..=3), fault(rng)),
            commit: (rng.random_range(1..=4), fault(rng)),
        }
    } else {
        let rate = [0.0, 0.0, 0.05, 0.3][rng.random_range(0..4)];
        Faults::Random {
            claim: rate / 3.0,
            commit: rate,
            after_apply: rng.random::<f64>(),
        }
    };
    Params {
        items: if rng.random_bool(0.1) {
            rng.random_range(0..=5)
        } else {
            rng.random_range(0..=1_500)
        },
        max_attempts: rng.random_range(1..=5),
        policy: Policy {
            limits: DrainLimits {
                concurrency,
                claim_chunk,
                per_item_cost: if rng.random_bool(0.8) {
                    1
                } else {
                    rng.random_range(2..=3)
                },
                job_timeout_ms,
                deadline_ms: min_deadline_ms(job_timeout_ms) + rng.random_range(0..=40_000),
                lease_ms,
                // Drawn by `Platform::for_seed`, from a stream of its own.
                max_children: i64::MAX,
            },
            retry: RetryPolicy {
                base_ms: 100,
                max_ms: 400,
            },
            refusal_give_up_ms: 86_400_000,
        },
        // Log-uniform over 5 ..= 10,000.
        budget: (5.0 * 2_000f64.powf(rng.random::<f64>())).round() as i64,
        faults,
        latency,
        // 1.0: every call takes its whole limit, the deadline's worst case.
        hang: [0.0, 0.01, 0.2, 1.0][rng.random_range(0..4)],
        retry: rng.random_range(0.0..0.4),
        fail: rng.random_range(0.0..0.1),
        reaper_ahead_ms,
    }
}

/// The tight family: a few slots, short chunks, leases at the smallest the
/// settings accept, a quick D1 and a budget of 6 to 30, so one invocation makes
/// several claims while the budget has room for only the flushes the plan kept
/// (a flush that spends the one kept for a claim still out leaves an older
/// lease's outcomes to a commit after it expired). Drawn from a stream of its
/// own over the seed's world.
fn tighten(p: &mut Params, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7167_4e55);
    let l = &mut p.policy.limits;
    l.concurrency = rng.random_range(1..=3);
    l.claim_chunk = rng.random_range(2..=8);
    l.job_timeout_ms = rng.random_range(100..=3_000);
    l.lease_ms = min_lease_ms(l.job_timeout_ms, l.claim_chunk, l.concurrency);
    l.deadline_ms = min_deadline_ms(l.job_timeout_ms) + rng.random_range(0..=60_000);
    p.budget = rng.random_range(8..=24);
    p.latency = Latency::Quick(rng.random_range(30..=150));
    p.reaper_ahead_ms = 0;
    p.items = rng.random_range(5..=40);
    // Calls that take their whole time: lines that fill their lease.
    p.hang = 1.0;
}

/// A fenced outcome is identified by its item and lease token.
type Key = (i64, String);

fn key(item: &ClaimedItem) -> Key {
    (item.item_id, item.lease_token.clone())
}

/// What the simulated world answers, and when (`Events`).
enum Scheduled {
    Child(ClaimedItem, Ran),
    /// The platform refused this item's dispatch.
    Refused(ClaimedItem),
    /// This item's child crashed: its call threw.
    Crashed(ClaimedItem),
    Claimed(StoreResult<Claim>),
    /// A commit's rows, its result, and the rows it really wrote.
    Committed(Vec<Settled>, StoreResult<Vec<i64>>, Vec<i64>),
}

/// Pending events in time order (ties in the order they were scheduled).
#[derive(Default)]
struct Events {
    pending: Vec<(i64, u64, Scheduled)>,
    seq: u64,
}

impl Events {
    fn push(&mut self, at: i64, event: Scheduled) {
        self.seq += 1;
        self.pending.push((at, self.seq, event));
    }

    fn next_at(&self) -> Option<i64> {
        self.pending.iter().map(|(at, _, _)| *at).min()
    }

    fn pop(&mut self) -> (i64, Scheduled) {
        let i = (0..self.pending.len())
            .min_by_key(|&i| (self.pending[i].0, self.pending[i].1))
            .expect("an event");
        let (at, _, event) = self.pending.swap_remove(i);
        (at, event)
    }
}

/// What one invocation's drain did, as the shell saw it.
#[derive(Default)]
struct Seen {
    claimed: BTreeSet<Key>,
    /// When each claimed item's lease expires.
    expires: BTreeMap<Key, i64>,
    /// Claimed here and not yet committed, lost or left to the reaper.
    live: BTreeMap<i64, Key>,
    /// What the machine was told was applied.
    applied: BTreeSet<Key>,
    lost: BTreeSet<Key>,
    left_to_reaper: BTreeSet<Key>,
    /// Live leases another tick's reaper took.
    reaped_live: BTreeSet<Key>,
    /// The rows of the commit whose failure was just fed to the machine.
    failed_commit: Vec<Key>,
    dispatches: i64,
    /// Dispatches the platform refused, and whether the machine was told yet.
    refused: BTreeSet<Key>,
    refusal_fed: bool,
    /// Dispatches whose child crashed (the call threw as a refused one does).
    crashed: BTreeSet<Key>,
    /// The items the machine reported given back after a refusal.
    given_back: Option<BTreeSet<i64>>,
    max_in_flight: i64,
    claims_sent: i64,
    commits_sent: i64,
    claim_rtt: i64,
    commit_rtt: i64,
}

impl Seen {
    fn end(&mut self, k: &Key) {
        if self.live.get(&k.0) == Some(k) {
            self.live.remove(&k.0);
        }
    }
}

/// How often each path was taken, over all seeds: the run must have exercised
/// every one, or it proves nothing about it.
#[derive(Debug, Default)]
struct Coverage {
    stops: [u32; 6],
    /// Dispatches the platform refused, and queued items given back with them.
    refused: u64,
    given_back_queued: u64,
    /// Throws of crashing children the machine took for a crash (an attempt
    /// spent), and for a refusal (before it knew better); crashing items that
    /// ended failed.
    crashes_spent: u64,
    crashes_given_back: u64,
    crashed_items_failed: u64,
    claimed: u64,
    lost: u64,
    left_to_reaper: u64,
    commit_retries: u64,
    /// Rows a failed commit had applied that its retry then found applied.
    found_applied: u64,
    /// ...and that someone had claimed again before the retry read them back
    /// (counted as lost leases: the documented exception).
    claimed_again_before_read_back: u64,
    /// Claimed items given back unrun.
    released: u64,
    claim_failures: u64,
    budget_over_1000: u64,
    strict_invocations: u64,
    busy_invocations_with_claims: u64,
    /// Channels of multi-channel items sent, and sent again after an attempt
    /// that got them through never landed (its lease taken, its commit failed for
    /// good), or never answered (abandoned by the watchdog).
    channels_sent: u64,
    channels_resent_after_lost: u64,
    channels_resent_unanswered: u64,
    /// Delivered receipts a replay kept (a failed item's delivered channels).
    receipts_kept_by_replays: u64,
    /// Operator requests that changed something (`Operator`).
    paused: u64,
    resumed: u64,
    cancelled: u64,
    replayed: u64,
    claims_while_operated: u64,
}

struct Sim<'a> {
    rng: StdRng,
    p: &'a Params,
    ctx: String,
    coverage: &'a mut Coverage,
    /// Every outcome that landed in any invocation of this seed, and when.
    landed: BTreeMap<Key, i64>,
    /// The ones a call that reported a failure had written.
    landed_unseen: BTreeSet<Key>,
    /// Attempts whose outcome never landed because their lease was taken or
    /// their commit failed for good: the only ones that may be delivered again
    /// after answering `Done`.
    expired: BTreeSet<Key>,
    /// Items whose child answered `Done`, by the attempt that did.
    done: BTreeMap<i64, Key>,
    summaries: Vec<InvocationSummary>,
    /// Pause, resume, cancel and replay requests arriving meanwhile, if any.
    operator: Option<Operator>,
    /// Multi-channel items, if the seed has them.
    channels: Option<Channels>,
    /// (item, channel) → the attempt whose run got it through.
    channel_done: BTreeMap<(i64, String), Key>,
    /// (item, channel) → `at` of its delivered receipt, as last read.
    delivered: BTreeMap<(i64, String), i64>,
    /// Attempts abandoned by the watchdog: their channels' answers never came back.
    unanswered: BTreeSet<Key>,
    /// The platform refusing dispatches, if the seed has it.
    platform: Option<Platform>,
    /// Items whose child crashes at every dispatch, if the seed has them.
    crashing: BTreeSet<i64>,
    /// The highest place at which a drain had a dispatch answered, handed from
    /// drain to drain as the Worker's isolate does (`edge::drain`).
    answered_up_to: i64,
}

fn setup(items: usize, max_attempts: i64, channels: Option<&Channels>) -> Faulty {
    let store = common::setup();
    let (kind, payload) = match channels {
        None => ("noop", json!({})),
        Some(c) => {
            let list: Vec<Value> = c
                .names
                .iter()
                .map(|n| json!({"name": n, "url": format!("https://{n}.example.com/")}))
                .collect();
            ("multi", json!({ "channels": list }))
        }
    };
    let inputs = common::items_of(items, |i| format!("s{i:05}"), kind, &payload);
    block_on(store.create_batch("b", "sim", 0, max_attempts, BatchSource::Items(&inputs)))
        .expect("batch created");
    Faulty {
        db: store.into_db(),
        next: Cell::new(None),
        calls: Cell::new(0),
    }
}

fn count(db: &SqliteDb, sql: &str) -> i64 {
    db.conn().query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Another tick's reaper, outside this invocation's budget: the ids it took. Its
/// two statements (count the failures, reap) in one transaction, as the store's.
fn other_reaper(db: &SqliteDb, now: i64) -> Vec<i64> {
    let conn = db.conn();
    let tx = conn.unchecked_transaction().unwrap();
    tx.execute(sql::COUNT_REAPED_FAILURES, rusqlite::params![now, 1_000])
        .unwrap();
    let ids: Vec<i64> = {
        let mut stmt = tx.prepare(sql::REAP_EXPIRED_LEASES).unwrap();
        let rows = stmt
            .query_map(rusqlite::params![now, 1_000], |r| r.get::<_, i64>("id"))
            .unwrap();
        rows.map(|id| id.unwrap()).collect()
    };
    tx.commit().unwrap();
    ids
}

/// The outcomes among `rows` the table holds as applied: no longer processing,
/// still under the outcome's lease token (what `committed_outcomes.sql` reads).
fn applied(db: &SqliteDb, rows: &[Settled]) -> Vec<i64> {
    let json = cron_fanout::store::transitions_json(rows.iter().map(|r| &r.transition))
        .expect("a commit carries outcomes");
    let conn = db.conn();
    let mut stmt = conn.prepare(sql::COMMITTED_OUTCOMES).unwrap();
    let ids = stmt
        .query_map([json], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    ids
}

impl Sim<'_> {
    /// The failure for the `n`-th call of a kind in this invocation, if any.
    fn fault(&mut self, claim: bool, n: i64) -> Option<Fault> {
        match self.p.faults {
            Faults::Random {
                claim: claim_rate,
                commit,
                after_apply,
            } => {
                let rate = if claim { claim_rate } else { commit };
                if !self.rng.random_bool(rate) {
                    return None;
                }
                Some(if self.rng.random_bool(after_apply) {
                    Fault::After
                } else {
                    Fault::Before
                })
            }
            Faults::Nth {
                claim: (nth_claim, claim_fault),
                commit: (nth_commit, commit_fault),
            } => {
                let (nth, fault) = if claim {
                    (nth_claim, claim_fault)
                } else {
                    (nth_commit, commit_fault)
                };
                (n == nth).then_some(fault)
            }
        }
    }

    fn d1_latency(&mut self) -> i64 {
        match self.p.latency {
            Latency::Quick(max) => self.rng.random_range(1..=max),
            Latency::Busy(ms) => self.rng.random_range(ms / 2..=ms),
        }
    }

    fn child(&mut self, now: i64, cohort: i64, item: &ClaimedItem, ctx: &str) -> (i64, Ran) {
        // Abandoned when the cohort's watchdog fires, at the latest.
        let abandon_at = cohort + call_ms(self.p.policy.limits.job_timeout_ms);
        if self.rng.random_bool(self.p.hang) {
            return (abandon_at, self.abandoned(item, ctx));
        }
        let at = now
            + self
                .rng
                .random_range(1..=self.p.policy.limits.job_timeout_ms);
        let x: f64 = self.rng.random();
        let outcome = if x < self.p.fail {
            Outcome::Fail("HTTP 400".into())
        } else if x < self.p.fail + self.p.retry {
            Outcome::Retry("HTTP 503".into())
        } else {
            Outcome::Done
        };
        if at > abandon_at {
            return (abandon_at, self.abandoned(item, ctx));
        }
        match self.channels.is_some() {
            false => (at, outcome.into()),
            true => (at, self.send_channels(item, ctx)),
        }
    }

    /// A run abandoned by its watchdog. A multi-channel one may have sent its
    /// channels all the same: their answers are lost with it, so those that got
    /// through are sent again by the next attempt.
    fn abandoned(&mut self, item: &ClaimedItem, ctx: &str) -> Ran {
        if self.channels.is_some() {
            self.send_channels(item, ctx);
            self.unanswered.insert(key(item));
        }
        Outcome::Retry("dispatch failed: aborted".into()).into()
    }

    /// A multi-channel run: the channels its claim does not show delivered, each
    /// answering on its own (from the seed's channel stream). A channel that got
    /// through before is sent again only if that attempt's outcome never landed.
    fn send_channels(&mut self, item: &ClaimedItem, ctx: &str) -> Ran {
        let stored = receipts::parse(item.receipts.as_deref());
        let (fail, retry) = (self.p.fail / 2.0, self.p.retry);
        let c = self.channels.as_mut().expect("a multi-channel seed");
        let mut results = ChannelResults::new();
        for name in c
            .names
            .iter()
            .filter(|n| !receipts::is_delivered(&stored, n))
        {
            let x: f64 = c.rng.random();
            let o = if x < fail {
                Outcome::Fail("HTTP 400".into())
            } else if x < fail + retry {
                Outcome::Retry("HTTP 503".into())
            } else {
                Outcome::Done
            };
            let ch = (item.item_id, name.clone());
            self.coverage.channels_sent += 1;
            if let Some(earlier) = self.channel_done.get(&ch) {
                let lost = self.expired.contains(earlier);
                assert!(
                    lost || self.unanswered.contains(earlier),
                    "{ctx}: channel {ch:?} sent again although {earlier:?} got it through and landed"
                );
                if lost {
                    self.coverage.channels_resent_after_lost += 1;
                } else {
                    self.coverage.channels_resent_unanswered += 1;
                }
            }
            if o == Outcome::Done {
                self.channel_done.insert(ch, key(item));
            }
            results.insert(name.clone(), o);
        }
        let outcome = receipts::outcome(&results);
        Ran {
            channels: Some(results),
            ..Ran::from(outcome)
        }
    }

    /// Delivered receipts are never lost or changed, and each was answered 2xx.
    fn check_receipts(&mut self, db: &SqliteDb, ctx: &str) {
        if self.channels.is_none() {
            return;
        }
        let rows: Vec<(i64, Option<String>)> = {
            let conn = db.conn();
            let mut stmt = conn.prepare("SELECT id, receipts FROM cron_queue").unwrap();
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
            rows.map(Result::unwrap).collect()
        };
        let mut now_delivered = BTreeMap::new();
        for (id, text) in rows {
            for (name, r) in receipts::parse(text.as_deref()) {
                if let Receipt::Delivered { at } = r {
                    assert!(
                        self.channel_done.contains_key(&(id, name.clone())),
                        "{ctx}: item {id} channel {name} delivered without a 2xx"
                    );
                    now_delivered.insert((id, name), at);
                }
            }
        }
        for (ch, at) in &self.delivered {
            assert_eq!(
                now_delivered.get(ch),
                Some(at),
                "{ctx}: the delivered receipt of {ch:?} was lost or changed"
            );
        }
        self.delivered = now_delivered;
    }

    /// One commit call (`again`: the retry of a failed one): its result, and
    /// the ids it really wrote (also when it failed after applying). A retry's
    /// answer also names the rows the failed attempt before it wrote.
    fn commit_call(
        &mut self,
        store: &Store<Metered<Faulty>>,
        rows: &[Settled],
        again: bool,
        seen: &mut Seen,
    ) -> (StoreResult<Vec<i64>>, Vec<i64>) {
        seen.commits_sent += 1;
        let fault = self.fault(false, seen.commits_sent);
        store.db().inner().next.set(fault);
        let transitions = rows.iter().map(|r| &r.transition);
        let result = if again {
            block_on(store.recommit_outcomes(transitions))
        } else {
            block_on(store.commit_outcomes(transitions))
        };
        let answered = match &result {
            Ok(ids) => ids.clone(),
            // Failed after applying: what the table says this commit (or, for a
            // retry, the attempt before it) applied, read right after the call.
            Err(_) => applied(&store.db().inner().db, rows),
        };
        let wrote = rows
            .iter()
            .filter(|r| answered.contains(&r.item.item_id))
            .filter(|r| !self.landed.contains_key(&key(&r.item)))
            .map(|r| r.item.item_id)
            .collect();
        (result, wrote)
    }

    /// One tick: reap, drain, finish, summary. Returns the database back.
    fn invocation(&mut self, db: Faulty, started: i64) -> Faulty {
        let ctx = format!("{} at {started}", self.ctx);
        let budget = Budget::new(self.p.budget);
        let store = Store::new(Metered::new(db, budget.clone()));
        let calls_before = store.db().inner().calls.get();
        let mut tally = Tally::default();
        let reaped = block_on(store.reap_expired_leases(started, 1_000)).expect("reap");
        tally.reaped = reaped.len() as i64;
        // The first step is a D1 round trip too: the drain starts once it answered.
        let prepare_ms = self.d1_latency();

        let mut m = Drain::new(self.p.policy, budget.clone(), started);
        m.prepared(prepare_ms);
        m.knows_answered(self.answered_up_to);
        // The platform refuses this request's dispatches past the n-th.
        let refuse_after = self.platform.as_ref().map(|p| p.cap);
        let now = started + prepare_ms;
        let mut ports = SimPorts {
            sim: self,
            store: &store,
            ctx: &ctx,
            refuse_after,
            events: Events::default(),
            seen: Seen::default(),
            now,
            in_flight: 0,
            cohort: now,
            sent: Vec::new(),
            claimed: Claimed::default(),
        };
        let stop = block_on(drain_loop::run(&mut m, &mut ports));
        let (seen, now) = (ports.seen, ports.now);
        self.answered_up_to = m.answered_up_to();
        self.check_done(
            &m,
            &seen,
            &budget,
            &store,
            calls_before,
            started,
            now,
            stop,
            &ctx,
        );
        self.cover(&seen, stop);

        // The tail: finish batches, then the summary, as edge::schedule does.
        let drained = m.into_tally();
        // The per-batch counts the timeline is read from add up to the tally.
        let per_batch = drained
            .per_batch
            .values()
            .fold((0, 0), |(c, f), b| (c + b.completed, f + b.failed));
        assert_eq!(per_batch, (drained.completed, drained.failed), "{ctx}");
        assert!(drained
            .per_batch
            .keys()
            .all(|b| drained.batch_ids.contains(b)));
        tally = Tally {
            reaped: tally.reaped,
            ..drained
        };
        block_on(store.finish_tick(now, &Upkeep::at(now, 30)))
            .unwrap_or_else(|e| panic!("{ctx}: finish: {e}"));
        let own = i64::from(budget.free() >= 1);
        assert_eq!(own, 1, "{ctx}: no room left for the summary");
        let usage = store.usage();
        let mut summary = InvocationSummary {
            invocation: None,
            trigger: Trigger::Tick,
            started_at: started,
            elapsed_ms: now - started,
            tally,
            subrequests: budget.used() + own,
            subrequest_budget: budget.limit(),
            d1_statements: usage.statements + own,
            d1_rows_written: usage.rows_written + own,
            d1_rows_read: Some(usage.rows_read),
            stop_reason: stop,
            drainer: None,
            chain: None,
        };
        // Each batch's share goes with the summary, as edge::schedule stores it.
        cost::attach(&mut summary);
        block_on(store.record_invocation(&summary)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(budget.used(), summary.subrequests, "{ctx}");
        assert!(budget.used() <= self.p.budget, "{ctx}");
        self.summaries.push(summary);
        store.into_db().into_inner()
    }

    /// Items given back unrun (released late, or after a refusal) spent no
    /// attempt and are due at once: as the commit that wrote them left them.
    fn check_given_back(
        &mut self,
        db: &SqliteDb,
        rows: &[Settled],
        wrote: &[i64],
        now: i64,
        seen: &Seen,
        ctx: &str,
    ) {
        for r in rows.iter().filter(|r| wrote.contains(&r.item.item_id)) {
            let k = key(&r.item);
            let refused = seen.refused.contains(&k);
            if !r.transition.is_release() {
                // A refusal spends nothing; a crash is a run.
                assert!(!refused, "{ctx}: refused {k:?} committed as {r:?}");
                if seen.crashed.contains(&k) {
                    let error = r.transition.error.as_deref().unwrap_or("");
                    assert!(error.contains("child crashed: "), "{ctx}: {k:?} {r:?}");
                    self.coverage.crashes_spent += 1;
                }
                continue;
            }
            let (attempt, run_after): (i64, i64) = db
                .conn()
                .query_row(
                    "SELECT attempt, run_after FROM cron_queue WHERE id = ?1",
                    [k.0],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .unwrap();
            assert_eq!(attempt, r.item.attempt - 1, "{ctx}: {k:?} spent an attempt");
            assert!(
                run_after <= now,
                "{ctx}: {k:?} given back due at {run_after}"
            );
        }
    }

    /// A dispatch: an item that answered `Done` before runs again only if that
    /// attempt's outcome never landed because its lease expired.
    fn dispatched(&mut self, item: &ClaimedItem, ctx: &str) {
        if let Some(done) = self.done.get(&item.item_id) {
            assert!(
                self.expired.contains(done),
                "{ctx}: item {} delivered again after answering Done under a lease that held",
                item.item_id
            );
        }
    }

    /// Rows a commit call wrote: each once, before its lease expired (leases the
    /// rule sized).
    fn landed(
        &mut self,
        rows: &[Settled],
        wrote: &[i64],
        unseen: bool,
        now: i64,
        seen: &Seen,
        ctx: &str,
    ) {
        for r in rows.iter().filter(|r| wrote.contains(&r.item.item_id)) {
            let k = key(&r.item);
            if unseen {
                self.landed_unseen.insert(k.clone());
            }
            assert!(
                self.landed.insert(k.clone(), now).is_none(),
                "{ctx}: outcome of {k:?} applied twice"
            );
            let expires = seen.expires[&k];
            {
                assert!(
                    now < expires,
                    "{ctx}: the commit of {k:?} landed at {now}, its lease expired at {expires}"
                );
            }
        }
    }

    /// Another tick's reaper runs now: with leases the rule sized it never takes
    /// a live one.
    fn reap_now(&mut self, store: &Store<Metered<Faulty>>, seen: &mut Seen, now: i64, ctx: &str) {
        let ahead = self.p.reaper_ahead_ms;
        for id in other_reaper(&store.db().inner().db, now + ahead) {
            if let Some(k) = seen.live.remove(&id) {
                assert!(
                    ahead > 0,
                    "{ctx}: a live lease {k:?} (expiring at {}) reaped at {now}",
                    seen.expires[&k]
                );
                self.expired.insert(k.clone());
                seen.reaped_live.insert(k);
            }
        }
    }

    /// One thing the machine reported, checked against what the shell saw.
    fn report(&mut self, report: Report, seen: &mut Seen, db: &SqliteDb, ctx: &str) {
        match report {
            Report::LeaseLost(item) => {
                let k = key(&item);
                // The one exception: a row a lost-answer attempt applied and
                // someone claimed again before the retry read it back (only an
                // outcome that made it due at once: a release, a short backoff).
                let token: Option<String> = db
                    .conn()
                    .query_row(
                        "SELECT lease_token FROM cron_queue WHERE id = ?1",
                        [k.0],
                        |r| r.get(0),
                    )
                    .unwrap();
                let claimed_again =
                    self.landed_unseen.contains(&k) && token.is_some_and(|t| t != k.1);
                assert!(
                    seen.reaped_live.contains(&k) || claimed_again,
                    "{ctx}: {k:?} counted as a lost lease, but no reaper took it"
                );
                self.coverage.claimed_again_before_read_back += u64::from(claimed_again);
                assert!(seen.lost.insert(k), "{ctx}");
            }
            Report::Released(item) => {
                let k = key(&item);
                assert!(seen.live.contains_key(&k.0), "{ctx}: released {k:?}");
                self.coverage.released += 1;
            }
            Report::CommitFailed { error, item_ids } => {
                assert!(
                    !matches!(error, StoreError::OverBudget(_)),
                    "{ctx}: {error}"
                );
                let ids: Vec<i64> = seen.failed_commit.iter().map(|k| k.0).collect();
                assert_eq!(item_ids, ids, "{ctx}");
                for k in std::mem::take(&mut seen.failed_commit) {
                    seen.end(&k);
                    if !self.landed.contains_key(&k) {
                        self.expired.insert(k.clone());
                    }
                    seen.left_to_reaper.insert(k);
                }
            }
            Report::ClaimFailed(e) => {
                assert!(!matches!(e, StoreError::OverBudget(_)), "{ctx}: {e}");
                self.coverage.claim_failures += 1;
            }
            Report::CommitRetry { .. } => self.coverage.commit_retries += 1,
            Report::DispatchRefused { message, item_ids } => {
                assert!(
                    message == REFUSAL || message == CRASH,
                    "{ctx}: the first refusal's message: {message}"
                );
                assert!(seen.given_back.is_none(), "{ctx}: a refusal reported twice");
                let ids: BTreeSet<i64> = item_ids.iter().copied().collect();
                assert_eq!(ids.len(), item_ids.len(), "{ctx}: given back twice");
                // Every refused item, and only items claimed here.
                assert!(seen.refused.iter().all(|k| ids.contains(&k.0)), "{ctx}");
                assert!(
                    ids.iter().all(|id| seen.claimed.iter().any(|k| k.0 == *id)),
                    "{ctx}: gave back {ids:?}"
                );
                let crashes = seen.crashed.iter().filter(|k| ids.contains(&k.0)).count();
                self.coverage.refused += seen.refused.len() as u64;
                self.coverage.crashes_given_back += crashes as u64;
                self.coverage.given_back_queued +=
                    (ids.len() - seen.refused.len() - crashes) as u64;
                seen.given_back = Some(ids);
            }
            Report::Settled(_) => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_done(
        &self,
        m: &Drain,
        seen: &Seen,
        budget: &Budget,
        store: &Store<Metered<Faulty>>,
        calls_before: i64,
        started: i64,
        now: i64,
        stop: StopReason,
        ctx: &str,
    ) {
        let limits = self.p.policy.limits;
        assert!(seen.max_in_flight <= limits.concurrency, "{ctx}: window");
        assert!(
            seen.dispatches <= limits.max_children,
            "{ctx}: {} dispatches, cap {}",
            seen.dispatches,
            limits.max_children
        );
        // A refusal is reported once, and the drain says it stopped for it
        // (unless a failed claim stopped it first).
        if !seen.refused.is_empty() {
            assert!(seen.given_back.is_some(), "{ctx}: a refusal not reported");
        }
        if seen.given_back.is_some() {
            // ...and only a throw (a refusal, or a crash not yet known for one).
            assert!(
                !(seen.refused.is_empty() && seen.crashed.is_empty()),
                "{ctx}"
            );
            assert!(
                matches!(stop, StopReason::Refused | StopReason::Error),
                "{ctx}: {stop:?}"
            );
        }
        // The first step may itself run past the deadline; then nothing starts.
        if seen.claims_sent > 0 {
            assert!(
                now - started <= limits.deadline_ms,
                "{ctx}: done at {} ms, deadline {} ms",
                now - started,
                limits.deadline_ms
            );
        }
        // Every claimed outcome: committed, lost, or left to the reaper.
        let ends = [&seen.applied, &seen.lost, &seen.left_to_reaper];
        let accounted: usize = ends.iter().map(|s| s.len()).sum();
        let union: BTreeSet<&Key> = ends.iter().flat_map(|s| s.iter()).collect();
        assert_eq!(union.len(), accounted, "{ctx}: an outcome counted twice");
        assert_eq!(
            union,
            seen.claimed.iter().collect::<BTreeSet<_>>(),
            "{ctx}: claimed items without an end"
        );
        if self.p.strict() {
            assert!(
                seen.left_to_reaper.is_empty(),
                "{ctx}: one failed call left {:?} to the reaper",
                seen.left_to_reaper
            );
        }
        let t = m.tally();
        assert_eq!(t.claimed, seen.claimed.len() as i64, "{ctx}");
        assert_eq!(
            t.completed + t.retried + t.failed + t.released,
            seen.applied.len() as i64,
            "{ctx}"
        );
        assert_eq!(t.lost_leases, seen.lost.len() as i64, "{ctx}");
        if matches!(self.p.faults, Faults::Random { claim, .. } if claim == 0.0) {
            assert_ne!(stop, StopReason::Error, "{ctx}");
        }
        // The ledger: nothing left reserved; what was used is exactly what the
        // store sent plus the dispatches; the tail still fits.
        let l = budget.ledger();
        assert_eq!((l.reserved_calls, l.reserved), (0, 0), "{ctx}: {l:?}");
        let calls = store.db().inner().calls.get() - calls_before;
        assert_eq!(
            l.used,
            calls + seen.dispatches * limits.per_item_cost,
            "{ctx}: the meter and the planner disagree"
        );
        assert!(budget.free() >= TAIL_SUBREQUESTS, "{ctx}: {l:?}");
        let rtt = m.round_trips();
        assert_eq!(
            (rtt.claim_ms, rtt.commit_ms),
            (seen.claim_rtt, seen.commit_rtt),
            "{ctx}"
        );
    }

    fn cover(&mut self, seen: &Seen, stop: StopReason) {
        let strict = self.p.strict();
        let busy = matches!(self.p.latency, Latency::Busy(_));
        let c = &mut *self.coverage;
        c.stops[stop as usize] += 1;
        c.claimed += seen.claimed.len() as u64;
        c.lost += seen.lost.len() as u64;
        c.left_to_reaper += seen.left_to_reaper.len() as u64;
        c.budget_over_1000 += u64::from(self.p.budget > 1_000);
        c.strict_invocations += u64::from(strict);
        c.busy_invocations_with_claims += u64::from(busy && !seen.claimed.is_empty());
        // Written by an attempt whose answer was lost, then reported applied.
        c.found_applied += seen
            .applied
            .iter()
            .filter(|k| self.landed_unseen.contains(*k))
            .count() as u64;
    }
}

/// The oldest running call of a kind (claims and commits run one at a time
/// each): when it was sent, and a claim's lease expiry.
fn take_sent(sent: &mut Vec<(i64, bool, i64)>, claim: bool) -> (i64, bool, i64) {
    let i = sent
        .iter()
        .position(|(_, c, _)| *c == claim)
        .expect("a call was sent");
    sent.remove(i)
}

/// The drain loop's ports in virtual time: children, claims and commits are
/// answered at drawn instants, another tick's reaper and the operator act while
/// the loop waits, and every answer and report is checked as it passes.
struct SimPorts<'s, 'a> {
    sim: &'s mut Sim<'a>,
    store: &'s Store<Metered<Faulty>>,
    ctx: &'s str,
    /// The platform refuses dispatches past this many.
    refuse_after: Option<i64>,
    events: Events,
    seen: Seen,
    now: i64,
    in_flight: i64,
    /// When the current watchdog cohort started.
    cohort: i64,
    /// (sent at, is claim, lease expiry of a claim) of running D1 calls.
    sent: Vec<(i64, bool, i64)>,
    /// What this drain claimed, as the Worker's drain remembers it.
    claimed: Claimed,
}

impl Ports for SimPorts<'_, '_> {
    fn now(&mut self) -> i64 {
        self.now
    }

    fn dispatch(&mut self, now: i64, item: ClaimedItem, new_watchdog: bool) {
        let ctx = self.ctx;
        if new_watchdog {
            self.cohort = now;
        }
        assert!(now - self.cohort < COHORT_MS, "{ctx}: a stale cohort");
        assert!(!self.seen.refusal_fed, "{ctx}: a dispatch after a refusal");
        self.sim.dispatched(&item, ctx);
        let crashes = self.sim.crashing.contains(&item.item_id);
        self.in_flight += 1;
        let seen = &mut self.seen;
        seen.dispatches += 1;
        seen.max_in_flight = seen.max_in_flight.max(self.in_flight);
        if self.refuse_after.is_some_and(|n| seen.dispatches > n) {
            // Thrown at once, before any child ran.
            let at = now + self.sim.platform.as_mut().map_or(0, Platform::delay);
            self.events.push(at, Scheduled::Refused(item));
        } else if crashes {
            // The child starts and dies: its call throws a while later.
            let at = now
                + self
                    .sim
                    .rng
                    .random_range(1..=self.sim.p.policy.limits.job_timeout_ms / 2);
            self.events.push(at, Scheduled::Crashed(item));
        } else {
            let (at, ran) = self.sim.child(now, self.cohort, &item, ctx);
            self.events.push(at, Scheduled::Child(item, ran));
        }
    }

    fn claim(&mut self, now: i64, limit: i64, lease_expires_at: i64) {
        self.seen.claims_sent += 1;
        let fault = self.sim.fault(true, self.seen.claims_sent);
        self.store.db().inner().next.set(fault);
        let token = format!("c{now}");
        let result = block_on(self.store.claim_due_items_after(
            now,
            limit,
            &token,
            lease_expires_at,
            &self.claimed,
        ));
        self.sim.check_claim(
            &self.store.db().inner().db,
            &result
                .as_ref()
                .map(|c| c.items.clone())
                .map_err(Clone::clone),
            self.ctx,
        );
        let at = now + self.sim.d1_latency();
        self.sent.push((now, true, lease_expires_at));
        self.events.push(at, Scheduled::Claimed(result));
    }

    fn commit(&mut self, now: i64, rows: Vec<Settled>, again: bool) {
        let (result, wrote) = self
            .sim
            .commit_call(self.store, &rows, again, &mut self.seen);
        self.sim.check_given_back(
            &self.store.db().inner().db,
            &rows,
            &wrote,
            now,
            &self.seen,
            self.ctx,
        );
        let at = now + self.sim.d1_latency();
        self.sent.push((now, false, 0));
        self.events
            .push(at, Scheduled::Committed(rows, result, wrote));
    }

    async fn wait(&mut self, until: Option<i64>) -> Event {
        let ctx = self.ctx;
        let Some(next) = [self.events.next_at(), until].into_iter().flatten().min() else {
            panic!("{ctx}: the machine waits for nothing");
        };
        let now = self.now;
        assert!(next >= now, "{ctx}: asked to wake at {next}, now {now}");
        self.now = next;
        let now = next;
        if self.sim.rng.random_bool(0.05) {
            self.sim.reap_now(self.store, &mut self.seen, now, ctx);
        }
        self.sim.operate(&self.store.db().inner().db, now, 0.01);
        if self.events.next_at() != Some(now) {
            return Event::Timer;
        }
        let seen = &mut self.seen;
        match self.events.pop().1 {
            Scheduled::Refused(item) => {
                self.in_flight -= 1;
                seen.refused.insert(key(&item));
                seen.refusal_fed = true;
                Event::Finished(item, Err(Refused(REFUSAL.into())))
            }
            Scheduled::Crashed(item) => {
                self.in_flight -= 1;
                seen.crashed.insert(key(&item));
                Event::Finished(item, Err(Refused(CRASH.into())))
            }
            Scheduled::Child(item, ran) => {
                self.in_flight -= 1;
                if ran.outcome == Outcome::Done {
                    self.sim.done.insert(item.item_id, key(&item));
                }
                Event::Finished(item, Ok(ran))
            }
            Scheduled::Claimed(result) => {
                let (at, _, expires) = take_sent(&mut self.sent, true);
                seen.claim_rtt = seen.claim_rtt.max(now - at);
                if let Ok(claim) = &result {
                    self.claimed.note(claim);
                    for item in &claim.items {
                        assert!(seen.claimed.insert(key(item)), "{ctx}: claimed twice");
                        seen.expires.insert(key(item), expires);
                        seen.live.insert(item.item_id, key(item));
                    }
                }
                let held_until = result.as_ref().ok().and_then(|c| c.held_until);
                Event::Claimed(result.map(|c| c.items), held_until)
            }
            Scheduled::Committed(rows, result, wrote) => {
                let (at, _, _) = take_sent(&mut self.sent, false);
                seen.commit_rtt = seen.commit_rtt.max(now - at);
                self.sim
                    .landed(&rows, &wrote, result.is_err(), now, seen, ctx);
                match &result {
                    Ok(ids) => {
                        for r in rows.iter().filter(|r| ids.contains(&r.item.item_id)) {
                            let k = key(&r.item);
                            assert!(self.sim.landed.contains_key(&k), "{ctx}: {k:?}");
                            assert!(seen.applied.insert(k.clone()), "{ctx}: {k:?}");
                            seen.end(&k);
                        }
                    }
                    Err(e) => {
                        assert!(!matches!(e, StoreError::OverBudget(_)), "{ctx}: {e}");
                        seen.failed_commit = rows.iter().map(|r| key(&r.item)).collect();
                    }
                }
                Event::Committed(rows, result)
            }
        }
    }

    fn jitter(&mut self) -> f64 {
        self.sim.rng.random()
    }

    fn report(&mut self, report: Report) {
        let db = &self.store.db().inner().db;
        self.sim.report(report, &mut self.seen, db, self.ctx);
    }
}

/// The simulated runtime answers at once: every future here (SQLite, the loop
/// over these ports) is ready when first polled.
fn block_on<F: Future>(f: F) -> F::Output {
    f.now_or_never()
        .expect("the simulation's futures never wait")
}

fn simulate(seed: u64, tight: bool, coverage: &mut Coverage) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut p = params(&mut rng);
    if tight {
        tighten(&mut p, seed);
    }
    let operator = Operator::for_seed(seed);
    let platform = Platform::for_seed(seed, &mut p);
    let channels = Channels::for_seed(seed, &p);
    let mut db = setup(p.items, p.max_attempts, channels.as_ref());
    let mut sim = Sim {
        rng,
        p: &p,
        ctx: format!(
            "{}seed {seed}: {p:?}, operated: {}, channels: {:?}",
            if tight { "tight " } else { "" },
            operator.is_some(),
            channels.as_ref().map(|c| &c.names)
        ),
        coverage,
        landed: BTreeMap::new(),
        landed_unseen: BTreeSet::new(),
        expired: BTreeSet::new(),
        done: BTreeMap::new(),
        summaries: Vec::new(),
        operator,
        channels,
        channel_done: BTreeMap::new(),
        delivered: BTreeMap::new(),
        unanswered: BTreeSet::new(),
        platform,
        crashing: crashing_items(seed, p.items),
        answered_up_to: 0,
    };
    for tick in 0..MAX_TICKS {
        if tick == MAX_TICKS / 2 {
            // The operator goes home, resuming what they paused: the rest drains.
            sim.operate(&db.db, tick * TICK_MS, 0.0);
            sim.operator = None;
        }
        // Requests between ticks, too.
        sim.operate(&db.db, tick * TICK_MS, 0.5);
        db = sim.invocation(db, 1 + tick * TICK_MS);
        let ctx = sim.ctx.clone();
        sim.check_receipts(&db.db, &ctx);
        if count(
            &db.db,
            "SELECT count(*) FROM batches WHERE finished_at IS NOT NULL",
        ) == 1
        {
            break;
        }
    }
    let ctx = &sim.ctx;
    // What the drains emitted, stored and read back as GET /invocations lists it.
    let store = Store::new(db);
    let listed = block_on(store.list_invocations(1_000)).unwrap();
    let read: Vec<InvocationSummary> = listed.into_iter().rev().map(|i| i.summary).collect();
    assert_eq!(read, sim.summaries, "{ctx}");
    check_costs(&store, &sim.summaries, ctx);
    // Nothing lost: once every lease has expired, every item is pending or
    // terminal, within its attempts, and the batch counters are exact.
    let db = store.into_db();
    other_reaper(&db.db, i64::MAX / 2);
    let q = |sql: &str| count(&db.db, sql);
    assert_eq!(
        q("SELECT count(*) FROM cron_queue WHERE status = 'processing'"),
        0,
        "{ctx}"
    );
    assert_eq!(
        q("SELECT count(*) FROM cron_queue"),
        p.items as i64,
        "{ctx}"
    );
    assert_eq!(
        q("SELECT count(*) FROM cron_queue WHERE attempt > max_attempts"),
        0,
        "{ctx}"
    );
    for status in ["completed", "failed", "cancelled"] {
        assert_eq!(
            q(&format!("SELECT {status} FROM batches")),
            q(&format!(
                "SELECT count(*) FROM cron_queue WHERE status = '{status}'"
            )),
            "{ctx}: the {status} counter"
        );
    }
    // A batch that ended has nothing left; a cancelled one ends once a tick ran
    // after its last item in flight.
    if q("SELECT count(*) FROM batches WHERE finished_at IS NOT NULL") == 1 {
        assert_eq!(
            q("SELECT count(*) FROM cron_queue WHERE status = 'pending'"),
            0,
            "{ctx}"
        );
    }
    // An item whose child crashes at every dispatch never completes; once it
    // ended it failed within its attempts, saying so (or, when its last
    // attempt's commit never landed, as the reaper says it).
    for id in &sim.crashing {
        let (status, error): (String, Option<String>) = db
            .db
            .conn()
            .query_row(
                "SELECT status, last_error FROM cron_queue WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_ne!(status, "completed", "{ctx}: crashing item {id}");
        if status == "failed" {
            let error = error.unwrap_or_default();
            let crashed = error.contains("child crashed: ");
            assert!(
                crashed || error.contains("lease expired"),
                "{ctx}: item {id}: {error}"
            );
            sim.coverage.crashed_items_failed += u64::from(crashed);
        }
    }
    // An item whose child answered Done ends completed, unless that attempt's
    // lease really expired (then it ran again and its later attempts decided).
    for (id, k) in &sim.done {
        if sim.expired.contains(k) {
            continue;
        }
        let status: String = db
            .db
            .conn()
            .query_row("SELECT status FROM cron_queue WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(status, "completed", "{ctx}: item {id} answered Done");
    }
    if p.strict() {
        assert!(sim.expired.is_empty(), "{ctx}: {:?}", sim.expired);
    }
    // Multi-channel items: completed means every channel delivered; failed means
    // none left pending.
    if let Some(c) = &sim.channels {
        let conn = db.db.conn();
        let mut stmt = conn
            .prepare("SELECT id, status, receipts FROM cron_queue")
            .unwrap();
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })
            .unwrap();
        for row in rows {
            let (id, status, text) = row.unwrap();
            let stored = receipts::parse(text.as_deref());
            match status.as_str() {
                "completed" => assert!(
                    c.names.iter().all(|n| receipts::is_delivered(&stored, n)),
                    "{ctx}: item {id} completed with receipts {stored:?}"
                ),
                "failed" => assert!(
                    !stored
                        .values()
                        .any(|r| matches!(r, Receipt::Pending { .. })),
                    "{ctx}: item {id} failed with receipts {stored:?}"
                ),
                _ => {}
            }
        }
    }
}

/// Every batch's cost is the sum of the shares its invocations' summaries carry,
/// and the batches together cost exactly what the invocations that charged
/// them measured: nothing lost or counted twice by the split or the trigger.
fn check_costs<D: Db>(store: &Store<D>, summaries: &[InvocationSummary], ctx: &str) {
    let mut shares: BTreeMap<String, Cost> = BTreeMap::new();
    let mut measured = Cost::default();
    for s in summaries {
        if cost::charged(&s.tally) > 0 {
            measured.add(&Cost::of(s));
        }
        for (batch, t) in &s.tally.per_batch {
            if let Some(share) = &t.cost {
                shares.entry(batch.clone()).or_default().add(share);
            }
        }
    }
    let mut stored = Cost::default();
    for (batch, expected) in &shares {
        let row = block_on(store.get_batch(batch))
            .unwrap()
            .expect("the batch");
        let cost = Cost::stored(row.cost.as_deref()).expect("a batch's cost");
        assert_eq!(&cost, expected, "{ctx}: batch {batch}");
        stored.add(&cost);
    }
    assert_eq!(stored, measured, "{ctx}");
}

/// The items whose child crashes at every dispatch: in about one seed of four,
/// each item with a chance of 1 in 30 (at least one). From a stream of its own.
fn crashing_items(seed: u64, items: usize) -> BTreeSet<i64> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xc4a5_4ed0);
    if !rng.random_bool(0.25) {
        return BTreeSet::new();
    }
    let mut ids: BTreeSet<i64> = (1..=items as i64)
        .filter(|_| rng.random_bool(1.0 / 30.0))
        .collect();
    ids.insert(rng.random_range(1..=items as i64));
    ids
}

/// What the simulated runtime answers a refused dispatch with.
const REFUSAL: &str = "Error: A single request has a maximum of 32 Worker invocations";
/// What a crashed child's call throws.
const CRASH: &str = "Error: internal error";

/// The platform's cap on one request's service-binding calls, unknown to the
/// Worker: in about two seeds of five, each invocation's dispatches past the
/// n-th (1 to 60, drawn once: a platform limit is a constant) throw at once.
/// Half the seeds also draw the Worker's own `MAX_CHILD_INVOCATIONS`, which,
/// when under n, keeps the refusal from happening. Drawn from a stream of its
/// own; not in seeds whose other reaper runs ahead.
struct Platform {
    rng: StdRng,
    cap: i64,
}

impl Platform {
    fn for_seed(seed: u64, p: &mut Params) -> Option<Platform> {
        // Seeds whose other reaper runs ahead are the ones that lose leases: left
        // as they were, so that path stays as well covered.
        if p.reaper_ahead_ms > 0 {
            return None;
        }
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5e1f_ca11);
        if rng.random_bool(0.5) {
            p.policy.limits.max_children = rng.random_range(1..=60);
        }
        if !rng.random_bool(0.4) {
            return None;
        }
        let cap = rng.random_range(1..=60);
        Some(Platform { rng, cap })
    }

    /// How long a refused call takes to throw.
    fn delay(&mut self) -> i64 {
        self.rng.random_range(0..=3)
    }
}

/// Multi-channel items in a seed: their channels' names and the stream their
/// answers are drawn from (its own, so the seed's other draws stay as they were).
struct Channels {
    rng: StdRng,
    names: Vec<String>,
}

impl Channels {
    /// One seed in three has them (seed mod 3 = 2), and every seed whose other
    /// reaper runs ahead: lost leases, after which a channel that got through
    /// must be sent again.
    fn for_seed(seed: u64, p: &Params) -> Option<Channels> {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xc4a2_2e15);
        let n = rng.random_range(2..=3);
        let names = ["email", "push", "sms"][..n]
            .iter()
            .map(|s| s.to_string())
            .collect();
        (seed % 3 == 2 || p.reaper_ahead_ms > 0).then_some(Channels { rng, names })
    }
}

/// An operator sending pause, resume, cancel and replay requests to the batch
/// while it drains, through the same `Store` methods as the HTTP
/// handlers, on the same database but outside the invocation's budget (another
/// request). Drawn from a stream of its own, so a seed without one runs exactly
/// as it did before batch control existed. Every claim made while one is about
/// must return only items of a running batch.
struct Operator {
    rng: StdRng,
}

impl Operator {
    /// Two seeds in five have one: those ending in 1, 3, 6 or 8.
    fn for_seed(seed: u64) -> Option<Operator> {
        let rng = StdRng::seed_from_u64(seed ^ 0x0b5e_55ed);
        matches!(seed % 5, 1 | 3).then_some(Operator { rng })
    }
}

impl Sim<'_> {
    /// With probability `rate`, one request; with rate 0, resume a paused batch.
    fn operate(&mut self, db: &SqliteDb, now: i64, rate: f64) {
        let Some(op) = self.operator.as_mut() else {
            return;
        };
        let store = Store::new(db);
        let status = |store: &Store<&SqliteDb>| {
            let row = block_on(store.get_batch("b")).unwrap().unwrap();
            BatchStatus::parse(&row.status).unwrap()
        };
        let request = |c: Control| {
            let from = status(&store);
            match decide(c, from) {
                Move::To(to) => block_on(store.set_batch_status("b", from, to)).unwrap(),
                Move::Already | Move::Refused => false,
            }
        };
        if rate == 0.0 {
            self.coverage.resumed += u64::from(request(Control::Resume));
            return;
        }
        if !op.rng.random_bool(rate) {
            return;
        }
        let c = &mut *self.coverage;
        match op.rng.random_range(0..20) {
            0..=5 => c.paused += u64::from(request(Control::Pause)),
            6..=11 => c.resumed += u64::from(request(Control::Resume)),
            12 => c.cancelled += u64::from(request(Control::Cancel)),
            13..=17 => {
                let limit = op.rng.random_range(1..50);
                let grow = op.rng.random_range(1..=3);
                let kept = count(
                    db,
                    "SELECT count(*) FROM cron_queue WHERE status = 'failed' AND receipts LIKE '%delivered%'",
                );
                let moved =
                    block_on(store.requeue_failed_page("b", "", None, limit, now, grow)).unwrap();
                c.replayed += moved.len() as u64;
                c.receipts_kept_by_replays += (kept > 0 && !moved.is_empty()) as u64;
            }
            _ => {
                let failed: Vec<i64> = {
                    let conn = db.conn();
                    let mut stmt = conn
                        .prepare("SELECT id FROM cron_queue WHERE status = 'failed' LIMIT 1")
                        .unwrap();
                    let ids = stmt.query_map([], |r| r.get(0)).unwrap();
                    ids.map(Result::unwrap).collect()
                };
                if let Some(id) = failed.first() {
                    let grow = op.rng.random_range(1..=3);
                    let moved = block_on(store.requeue_failed_item(*id, now, grow)).unwrap();
                    c.replayed += u64::from(moved);
                }
            }
        }
    }

    /// Claims take only items of a running batch.
    fn check_claim(&mut self, db: &SqliteDb, result: &StoreResult<Vec<ClaimedItem>>, ctx: &str) {
        let Ok(items) = result else { return };
        if items.is_empty() || self.operator.is_none() {
            return;
        }
        self.coverage.claims_while_operated += 1;
        assert_eq!(
            count(
                db,
                "SELECT count(*) FROM batches WHERE id = 'b' AND status = 'running'"
            ),
            1,
            "{ctx}: claimed {} items of a batch that is not running",
            items.len()
        );
    }
}

#[test]
fn the_drain_keeps_its_invariants_over_random_runs() {
    let seeds: u64 = std::env::var("DRAIN_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let mut coverage = Coverage::default();
    for seed in 0..seeds {
        simulate(seed, false, &mut coverage);
    }
    let tight: u64 = std::env::var("DRAIN_SIM_TIGHT_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(seeds);
    for seed in 0..tight {
        simulate(seed, true, &mut coverage);
    }
    eprintln!("{seeds} seeds: {coverage:?}");
    let c = &coverage;
    assert!(c.stops.iter().all(|&n| n > 0), "every stop reason: {c:?}");
    let paths = [
        c.lost,
        c.left_to_reaper,
        c.commit_retries,
        c.found_applied,
        c.released,
        c.refused,
        c.given_back_queued,
        c.crashes_spent,
        c.crashes_given_back,
        c.crashed_items_failed,
        c.claim_failures,
        c.budget_over_1000,
        c.strict_invocations,
        c.busy_invocations_with_claims,
        c.paused,
        c.resumed,
        c.cancelled,
        c.replayed,
        c.claims_while_operated,
        c.channels_sent,
        c.channels_resent_after_lost,
        c.channels_resent_unanswered,
        c.receipts_kept_by_replays,
    ];
    assert!(paths.iter().all(|&n| n > 0), "every path: {c:?}");
}
