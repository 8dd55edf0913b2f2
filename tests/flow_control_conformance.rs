//! Flow control on real SQLite with the migrations: the claim's turns between
//! batches, priorities, and what limit keys let through (concurrency, rate,
//! partitions), one rule per test. The same rules in Rust are `core::limits`;
//! tests/flow_control_simulation.rs runs them with several drainers at once.

mod common;

use std::collections::BTreeMap;

use common::*;
use cron_fanout::core::limits::Gcra;
use cron_fanout::core::model::{ClaimedItem, Outcome};
use cron_fanout::sql::{self, Statement};
use cron_fanout::store::sqlite::SqliteDb;
use cron_fanout::store::{Claimed, LimitsInForce, Store};
use futures::executor::block_on;

/// Gives every item of `batch` whose subject is in `subjects` (all when empty)
/// the keys `keys` (as an enqueue would have copied them).
fn hold(store: &Store<SqliteDb>, batch: &str, keys: &[&str], nth: impl Fn(i64) -> bool) {
    let ids: Vec<i64> = {
        let conn = store.db().conn();
        let mut stmt = conn
            .prepare("SELECT id FROM cron_queue WHERE batch_id = ?1 ORDER BY id")
            .unwrap();
        let rows = stmt.query_map([batch], |r| r.get(0)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    let json = serde_json::to_string(keys).unwrap();
    for (i, id) in ids.iter().enumerate() {
        if nth(i as i64) {
            store
                .db()
                .conn()
                .execute(
                    "UPDATE cron_queue SET limits = ?1 WHERE id = ?2",
                    rusqlite::params![json, id],
                )
                .unwrap();
        }
    }
}

fn priority(store: &Store<SqliteDb>, batch: &str, p: i64) {
    store
        .db()
        .conn()
        .execute(
            "UPDATE batches SET priority = ?1 WHERE id = ?2",
            rusqlite::params![p, batch],
        )
        .unwrap();
}

/// A claimer that knows rate limits are defined: it charges from its first claim.
const RATES: LimitsInForce = LimitsInForce {
    any: true,
    rates: true,
};

fn by_batch(items: &[ClaimedItem]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for i in items {
        *m.entry(i.batch_id.clone()).or_insert(0) += 1;
    }
    m
}

fn claim_after(
    store: &Store<SqliteDb>,
    now: i64,
    limit: i64,
    prefix: &str,
    claimed: &mut Claimed,
) -> Vec<ClaimedItem> {
    let claim =
        block_on(store.claim_due_items_after(now, limit, prefix, now + LEASE_MS, claimed)).unwrap();
    claimed.note(&claim);
    claim.items
}

#[test]
fn a_claim_takes_turns_between_batches() {
    let store = setup();
    let big = batch_of(&store, "big", 100, 3);
    let small = batch_of(&store, "small", 5, 3);
    let items = claim(&store, 1_000, 10, "c1");
    let counts = by_batch(&items);
    assert_eq!(counts[&big], 5, "{counts:?}");
    assert_eq!(
        counts[&small], 5,
        "the small batch's 5 come in the first claim: {counts:?}"
    );
}

#[test]
fn a_higher_priority_is_claimed_first_and_equal_ones_take_turns() {
    let store = setup();
    let low = batch_of(&store, "low", 20, 3);
    let high = batch_of(&store, "high", 4, 3);
    let also_low = batch_of(&store, "also-low", 20, 3);
    priority(&store, &high, 5);
    let items = claim(&store, 1_000, 3, "c1");
    assert_eq!(
        by_batch(&items),
        BTreeMap::from([(high.clone(), 3)]),
        "priority 5 first"
    );
    let items = claim(&store, 1_001, 7, "c2");
    let counts = by_batch(&items);
    assert_eq!(counts[&high], 1, "{counts:?}");
    assert_eq!(
        (counts[&low], counts[&also_low]),
        (3, 3),
        "equal priorities take turns: {counts:?}"
    );
}

#[test]
fn a_key_at_its_concurrency_holds_its_items_and_frees_a_slot_when_one_commits() {
    let store = setup();
    let b = batch_of(&store, "b", 10, 3);
    hold(&store, &b, &["github"], |i| i < 6);
    limit(&store, "github", None, 1, None, Some(2));
    let items = claim(&store, 1_000, 10, "c1");
    let held = |items: &[ClaimedItem]| {
        items
            .iter()
            .filter(|i| i.subject_id.as_str() < "b-00006")
            .count()
    };
    assert_eq!(items.len(), 6, "2 of the 6 keyed items and the 4 free ones");
    assert_eq!(held(&items), 2);
    let pending_attempts = count(
        &store,
        "SELECT sum(attempt) FROM cron_queue WHERE status = 'pending'",
    );
    assert_eq!(pending_attempts, 0, "a held item spends no attempt");
    assert!(
        claim(&store, 1_001, 10, "c2").is_empty(),
        "no room until one ends"
    );
    let keyed: Vec<&ClaimedItem> = items
        .iter()
        .filter(|i| i.subject_id.as_str() < "b-00006")
        .collect();
    block_on(store.commit_outcomes(&[settle(keyed[0], Outcome::Done, 1_002)])).unwrap();
    let next = claim(&store, 1_003, 10, "c3");
    assert_eq!(next.len(), 1, "one slot given back by the commit");
}

#[test]
fn a_key_without_a_limit_holds_nothing_back() {
    let store = setup();
    let b = batch_of(&store, "b", 10, 3);
    hold(&store, &b, &["nobody-limits-me"], |_| true);
    limit(&store, "other", None, 1, None, Some(1));
    assert_eq!(claim(&store, 1_000, 10, "c1").len(), 10);
}

#[test]
fn a_rate_lets_its_burst_through_then_one_per_interval_each_claimed_a_second_ahead() {
    let store = setup();
    let b = batch_of(&store, "b", 60, 3);
    hold(&store, &b, &["telegram"], |_| true);
    // 20 a second, burst 5: one every 50 ms after the first 5.
    limit(&store, "telegram", Some(20), 1, Some(5), None);
    let gcra = Gcra {
        rate: 20,
        per_seconds: 1,
        burst: 5,
    };
    let mut claimed = Claimed::knowing(RATES);
    let now = 1_000_000;
    // The burst at once, and the 20 slots of the next second, each at its slot.
    let first = claim_after(&store, now, 60, "c1", &mut claimed);
    let mut starts: Vec<i64> = first.iter().map(|i| i.start_at).collect();
    starts.sort_unstable();
    let slots: Vec<i64> = (1..=25).map(|j| gcra.start_of(None, now, j)).collect();
    assert_eq!(starts, slots, "the SQL slots are core::limits::Gcra's");
    assert_eq!(&starts[..6], &[now, now, now, now, now, now + 50]);
    assert_eq!(starts[24], now + 1_000);
    let stored: i64 = count(&store, "SELECT max(started_at) FROM cron_queue");
    assert_eq!(stored, now + 1_000, "started_at is the slot");
    assert_eq!(
        claim_after(&store, now + 49, 60, "c2", &mut claimed).len(),
        0
    );
    let tat = gcra.charge(None, now, 25);
    let third = claim_after(&store, now + 100, 60, "c3", &mut claimed);
    let starts: Vec<i64> = third.iter().map(|i| i.start_at).collect();
    assert_eq!(starts.len(), 2);
    assert!(starts.contains(&(now + 1_050)) && starts.contains(&(now + 1_100)));
    assert_eq!(
        claim_after(&store, now + 10_000, 60, "c4", &mut claimed).len(),
        25,
        "refilled to the burst and a second's tokens, no more"
    );
    let tat_now: i64 = count(&store, "SELECT tat FROM limit_state WHERE key = 'telegram'");
    let expected = gcra.charge(Some(gcra.charge(Some(tat), now + 100, 2)), now + 10_000, 25);
    assert_eq!(tat_now, expected, "the SQL charge is core::limits::Gcra's");
}

#[test]
fn a_burst_of_one_at_a_rate_not_dividing_the_ms_is_claimed_token_by_token() {
    let store = setup();
    let b = batch_of(&store, "b", 10, 3);
    hold(&store, &b, &["slow"], |_| true);
    // 7 per 3 s: 428.57 ms apart; slots rounded up to the ms would drift.
    limit(&store, "slow", Some(7), 3, Some(1), None);
    let mut claimed = Claimed::knowing(RATES);
    let now = 1_000_000;
    let first = claim_after(&store, now, 10, "c1", &mut claimed);
    assert_eq!(first.iter().map(|i| i.start_at).collect::<Vec<_>>(), [now]);
    assert_eq!(
        claim_after(&store, now + 428, 10, "c2", &mut claimed).len(),
        0
    );
    let next = claim_after(&store, now + 429, 10, "c3", &mut claimed);
    assert_eq!(
        next.iter().map(|i| i.start_at).collect::<Vec<_>>(),
        [now + 429]
    );
}

#[test]
fn an_item_holding_two_rate_keys_starts_only_at_the_claim() {
    let store = setup();
    let b = batch_of(&store, "b", 20, 3);
    hold(&store, &b, &["a", "b"], |i| i < 10);
    hold(&store, &b, &["a"], |i| i >= 10);
    limit(&store, "a", Some(10), 1, Some(2), None);
    limit(&store, "b", Some(10), 1, Some(2), None);
    let mut claimed = Claimed::knowing(RATES);
    let now = 1_000_000;
    // Room now is 2 (the burst): the first two items, holding both keys, start
    // at once; the 8 more holding both wait. They still count against a's room
    // ahead (12), so only 2 of those holding a alone go, at a's next slots.
    let items = claim_after(&store, now, 20, "c1", &mut claimed);
    let starts = |pick: &dyn Fn(&ClaimedItem) -> bool| {
        let mut s: Vec<i64> = items
            .iter()
            .filter(|i| pick(i))
            .map(|i| i.start_at)
            .collect();
        s.sort_unstable();
        s
    };
    let both = |i: &ClaimedItem| i.limits.as_deref() == Some(r#"["a","b"]"#);
    assert_eq!(starts(&both), [now, now], "{items:?}");
    assert_eq!(starts(&|i| !both(i)), [now + 100, now + 200], "{items:?}");
}

#[test]
fn a_claim_sent_without_the_charge_holds_rate_limited_keys() {
    let store = setup();
    let b = batch_of(&store, "b", 10, 3);
    hold(&store, &b, &["telegram"], |i| i >= 5);
    limit(&store, "other", None, 1, None, Some(1));
    let mut claimed = Claimed::default();
    // Its first claim learns that limits, but no rate limits, are defined: its
    // next claims are sent without the charge.
    assert_eq!(claim_after(&store, 1_000, 2, "c1", &mut claimed).len(), 2);
    limit(&store, "telegram", Some(100), 1, Some(100), None);
    let next = claim_after(&store, 1_001, 10, "c2", &mut claimed);
    assert_eq!(
        next.len(),
        3,
        "the 3 free items, none holding the rate-limited key: {next:?}"
    );
    assert_eq!(
        count(&store, "SELECT count(*) FROM limit_state"),
        0,
        "nothing charged"
    );
    // A claimer that does not know yet holds them too, and learns that it must
    // charge at once; its next claim charges and takes them.
    let mut fresh = Claimed::default();
    let first =
        block_on(store.claim_due_items_after(1_002, 10, "c3", 1_002 + LEASE_MS, &fresh)).unwrap();
    assert_eq!((first.items.len(), first.held_until), (0, Some(1_002)));
    fresh.note(&first);
    assert_eq!(claim_after(&store, 1_002, 10, "c4", &mut fresh).len(), 5);
    assert_eq!(count(&store, "SELECT count(*) FROM limit_state"), 1);
}

#[test]
fn a_partitioned_limit_applies_to_each_member_and_a_members_own_limit_wins() {
    let store = setup();
    let b = batch_of(&store, "b", 12, 3);
    hold(&store, &b, &["tenant:acme"], |i| i < 4);
    hold(&store, &b, &["tenant:bolt"], |i| (4..8).contains(&i));
    hold(&store, &b, &["tenant:big"], |i| i >= 8);
    limit(&store, "tenant:*", None, 1, None, Some(1));
    limit(&store, "tenant:big", None, 1, None, Some(3));
    let items = claim(&store, 1_000, 12, "c1");
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for i in &items {
        let n: i64 = i.subject_id[2..].parse().unwrap();
        let tenant = if n < 4 {
            "acme"
        } else if n < 8 {
            "bolt"
        } else {
            "big"
        };
        *per.entry(tenant).or_insert(0) += 1;
    }
    assert_eq!(per, BTreeMap::from([("acme", 1), ("bolt", 1), ("big", 3)]));
}

#[test]
fn an_item_is_taken_only_when_every_key_it_holds_has_room() {
    let store = setup();
    let b = batch_of(&store, "b", 6, 3);
    hold(&store, &b, &["a", "b"], |i| i < 3);
    hold(&store, &b, &["b"], |i| i >= 3);
    limit(&store, "a", None, 1, None, Some(1));
    limit(&store, "b", None, 1, None, Some(2));
    let items = claim(&store, 1_000, 6, "c1");
    // The first item (a, b) fits both; the second (a, b) is held by a but still
    // counts against b's room (a claim may take fewer, never more), so b's
    // second slot goes unused in this claim.
    assert_eq!(items.len(), 1, "{items:?}");
    let in_flight_b = count(
        &store,
        "SELECT count(*) FROM cron_queue, json_each(cron_queue.limits) AS k
         WHERE status = 'processing' AND k.value = 'b'",
    );
    assert!(in_flight_b <= 2);
    // Once a is spent, its items are set aside before b's room is counted.
    let items = claim(&store, 1_001, 6, "c2");
    assert_eq!(
        items.len(),
        1,
        "b's last slot goes to an item holding b only: {items:?}"
    );
    assert_eq!(items[0].subject_id, "b-00003");
}

#[test]
fn items_in_flight_of_a_paused_batch_still_hold_their_slots() {
    let store = setup();
    let b = batch_of(&store, "b", 4, 3);
    let c = batch_of(&store, "c", 4, 3);
    hold(&store, &b, &["k"], |_| true);
    hold(&store, &c, &["k"], |_| true);
    limit(&store, "k", None, 1, None, Some(2));
    let items = claim(&store, 1_000, 2, "c1");
    assert_eq!(items.len(), 2);
    let paused = &items[0].batch_id;
    store
        .db()
        .conn()
        .execute(
            "UPDATE batches SET status = 'paused' WHERE id = ?1",
            [paused],
        )
        .unwrap();
    assert!(
        claim(&store, 1_001, 10, "c2").is_empty(),
        "the paused batch's 2 in flight fill k"
    );
}

#[test]
fn a_claim_says_when_its_held_items_may_go() {
    let store = setup();
    let b = batch_of(&store, "b", 40, 3);
    hold(&store, &b, &["telegram"], |i| i < 30);
    hold(&store, &b, &["db"], |i| i >= 30);
    limit(&store, "telegram", Some(20), 1, Some(2), None);
    limit(&store, "db", None, 1, None, Some(1));
    let now = 1_000_000;
    let claim = block_on(store.claim_due_items_after(
        now,
        40,
        "c1",
        now + LEASE_MS,
        &Claimed::knowing(RATES),
    ))
    .unwrap();
    assert_eq!(
        claim.items.len(),
        23,
        "the rate's burst (2) and a second's tokens (20), 1 of the concurrency"
    );
    let gcra = Gcra {
        rate: 20,
        per_seconds: 1,
        burst: 2,
    };
    // 8 held by the rate: it wakes a second before all 8 fit (1.4 s on), so
    // its next claim takes them, each at its slot.
    assert_eq!(
        claim.held_until,
        Some(gcra.wake_at(gcra.charge(None, now, 22), 8, true))
    );
    assert_eq!(claim.held_until, Some(now + 400));
    // Held by a concurrency only: a poll after the flush interval.
    let conc = setup();
    let c = batch_of(&conc, "c", 3, 3);
    hold(&conc, &c, &["db"], |_| true);
    limit(&conc, "db", None, 1, None, Some(1));
    assert_eq!(common::claim(&conc, now, 10, "d1").len(), 1);
    let rest = block_on(conc.claim_due_items_after(
        now + 5,
        10,
        "d2",
        now + LEASE_MS,
        &Claimed::default(),
    ))
    .unwrap();
    assert!(rest.items.is_empty());
    assert_eq!(
        rest.held_until,
        Some(now + 5 + cron_fanout::core::limits::HELD_POLL_MS)
    );
    // Nothing held, nothing to wait for.
    let empty = setup();
    limit(&empty, "db", None, 1, None, Some(1));
    let none =
        block_on(empty.claim_due_items_after(now, 10, "e", now + LEASE_MS, &Claimed::default()))
            .unwrap();
    assert_eq!((none.items.len(), none.held_until), (0, None));
    assert_eq!(
        none.in_force.map(|f| (f.any, f.rates)),
        Some((true, false)),
        "an empty claim still says what is defined"
    );
}

#[test]
fn a_clock_bound_as_d1_binds_it_keeps_the_rate_exact_and_its_wake_instant_whole() {
    // D1 binds the Worker's integers as REAL: ms × rate must still be an exact
    // INTEGER (a wake instant of 1795855599800.95 once failed every claim).
    for (rate, per, burst) in [(20, 1, 2), (1_000_000, 1, 3), (5_000, 3_600, 100)] {
        let store = setup();
        store.db().bind_numbers_as_d1();
        let b = batch_of(&store, "b", 200, 3);
        hold(&store, &b, &["github"], |_| true);
        limit(&store, "github", Some(rate), per, Some(burst), None);
        let gcra = Gcra {
            rate,
            per_seconds: per,
            burst,
        };
        let now = 1_795_855_599_801;
        let claim = block_on(store.claim_due_items_after(
            now,
            200,
            "c1",
            now + LEASE_MS,
            &Claimed::knowing(RATES),
        ))
        .unwrap();
        let taken = gcra.room_ahead(None, now).min(200);
        assert_eq!(claim.items.len() as i64, taken, "rate {rate}");
        let tat: i64 = count(&store, "SELECT tat FROM limit_state WHERE key = 'github'");
        assert_eq!(
            tat,
            gcra.charge(None, now, taken),
            "rate {rate}: the charge is exact"
        );
        let mut starts: Vec<i64> = claim.items.iter().map(|i| i.start_at).collect();
        starts.sort_unstable();
        let slots: Vec<i64> = (1..=taken).map(|j| gcra.start_of(None, now, j)).collect();
        assert_eq!(starts, slots, "rate {rate}: each at its whole slot");
        if taken < 200 {
            let waiting = 200 - taken;
            assert_eq!(
                claim.held_until,
                Some(gcra.wake_at(tat, waiting, true)),
                "rate {rate}"
            );
        }
    }
}

#[test]
fn a_claim_reads_as_much_with_20000_items_waiting_on_an_exhausted_key_as_with_2000() {
    // One start a day, spent: every item waits. Each statement of the claim reads
    // the batch's first HELD_WINDOW candidates and its lease window, never the
    // queue behind them (a join once read every item of the queue per claim).
    let measure = |n: usize| {
        let store = setup();
        let b = batch_of(&store, "b", n, 3);
        hold(&store, &b, &["exhausted"], |_| true);
        limit(&store, "exhausted", Some(1), 86_400, Some(1), None);
        let now = 1_000_000;
        assert_eq!(
            claim_after(&store, now, 31, "c1", &mut Claimed::knowing(RATES)).len(),
            1
        );
        let (token, claimed, per_batch) = ("c2", "{}", cron_fanout::core::limits::HELD_WINDOW);
        let held = sql::ClaimHeld {
            now,
            limit: 31,
            token_prefix: token,
            claimed,
            per_batch,
            charges: 1,
        }
        .params();
        let charge = sql::ChargeRateLimits {
            now,
            limit: 31,
            token_prefix: token,
            claimed,
            per_batch,
            charges: 1,
        }
        .params();
        let claim = sql::ClaimDueItems {
            now,
            limit: 31,
            token_prefix: token,
            claimed,
            per_batch,
            charges: 1,
            lease_expires_at: now + LEASE_MS,
        }
        .params();
        let statements = [
            (sql::CLAIM_HELD, held),
            (sql::CHARGE_RATE_LIMITS, charge),
            (sql::CLAIM_DUE_ITEMS_AT_SLOTS, claim),
        ];
        for (statement, params) in &statements {
            let plan = query_plan(&store, statement, params);
            assert!(
                scans(&plan).is_empty(),
                "{n} items: the claim scans the queue: {plan:?}"
            );
        }
        statements.map(|(statement, params)| vm_steps(&store, statement, &params))
    };
    let small = measure(2_000);
    let big = measure(20_000);
    eprintln!(
        "VM steps of the hold, charge and claim: {small:?} with 2,000 waiting, {big:?} with 20,000"
    );
    assert_eq!(small, big, "a claim's work grows with the items waiting");
}

/// A retry whose receiver asked for `delay_ms` (a 429 with Retry-After), as the
/// drain commits it (`retry::defer` sets the retry and the pause).
fn refused(item: &ClaimedItem, now: i64, delay_ms: i64) -> cron_fanout::core::model::Transition {
    let mut t = settle(item, Outcome::Retry("429 Too Many Requests".into()), now);
    cron_fanout::core::retry::defer(&mut t, Some(delay_ms), false, common::POLICY, now);
    t
}

fn paused(store: &Store<SqliteDb>) -> Vec<String> {
    texts(
        store,
        "SELECT key || '=' || paused_until FROM limit_state WHERE paused_until IS NOT NULL ORDER BY key",
    )
}

#[test]
fn a_receivers_delay_pauses_every_key_its_item_holds_and_no_item_holding_one_is_claimed_before_then(
) {
    let store = setup();
    let b = batch_of(&store, "b", 10, 3);
    hold(&store, &b, &["tenant:x", "host:a.example"], |i| i < 5);
    hold(&store, &b, &["host:b.example"], |i| i >= 5);
    let now = 1_000_000;
    let first = claim(&store, now, 1, "c1");
    assert_eq!(first[0].subject_id, "b-00000");
    block_on(store.commit_outcomes(&[refused(&first[0], now + 10, 2_000)])).unwrap();
    assert_eq!(
        paused(&store),
        [
            format!("host:a.example={}", now + 2_010),
            format!("tenant:x={}", now + 2_010)
        ],
        "every key the refused item holds, once"
    );
    let claim = block_on(store.claim_due_items_after(
        now + 20,
        10,
        "c2",
        now + LEASE_MS,
        &Claimed::default(),
    ))
    .unwrap();
    let subjects: Vec<&str> = claim.items.iter().map(|i| i.subject_id.as_str()).collect();
    assert_eq!(
        subjects,
        ["b-00005", "b-00006", "b-00007", "b-00008", "b-00009"],
        "only the items of the other key"
    );
    assert_eq!(
        claim.held_until,
        Some(now + 2_010),
        "held by the pause: the claimer looks again when it ends"
    );
    assert_eq!(
        count(
            &store,
            "SELECT sum(attempt) FROM cron_queue WHERE status = 'pending' AND id > 1"
        ),
        0,
        "a paused key's siblings spend no attempt"
    );
    assert!(claim_after(&store, now + 2_009, 10, "c3", &mut Claimed::default()).is_empty());
    let after = common::claim(&store, now + 2_010, 10, "c4");
    assert_eq!(
        after.len(),
        5,
        "the retried item and its 4 siblings, at the pause's end"
    );
}

#[test]
fn a_channels_refusal_pauses_and_teaches_its_key_only_and_the_item_keeps_its_attempt_and_streak() {
    let store = setup();
    let b = batch_of(&store, "b", 2, 3);
    hold(&store, &b, &["host:email.test", "host:push.test"], |_| true);
    let now = 1_000_000;
    let first = claim(&store, now, 1, "c1");
    // As the drain commits a multi item whose push channel was refused.
    let by = "host:push.test".to_string();
    let t = cron_fanout::core::retry::refused(
        &first[0],
        "channel push: HTTP 429",
        Some(2_000),
        common::POLICY,
        86_400_000,
        &by,
        now + 10,
        0.0,
    );
    let t = cron_fanout::core::model::Transition {
        refused_at: Some(now + 10),
        refused_keys: Some(vec![by.clone()]),
        ..t
    };
    block_on(store.commit_outcomes(&[t])).unwrap();
    assert_eq!(paused(&store), [format!("host:push.test={}", now + 2_010)]);
    let keys: Vec<String> = learned(&store).into_iter().map(|l| l.0).collect();
    assert_eq!(
        keys,
        ["host:push.test"],
        "the email channel's key learns nothing"
    );
    let row = |id: i64| {
        texts(
            &store,
            &format!("SELECT attempt || ' ' || coalesce(refused_since, 'none') FROM cron_queue WHERE id = {id}"),
        )
    };
    let id = first[0].item_id;
    assert_eq!(
        row(id),
        [format!("0 {}", now + 10)],
        "attempt given back, streak stored"
    );
    // The claim hands the streak back (once the key's learned rate of one a
    // minute lets it go); an outcome that is no refusal clears it.
    let again = claim_rated(&store, now + 600_000, 10, "c2");
    let item = again
        .iter()
        .find(|i| i.item_id == id)
        .expect("claimed again");
    assert_eq!(item.refused_since, Some(now + 10));
    block_on(store.commit_outcomes(&[settle(item, Outcome::Done, now + 600_010)])).unwrap();
    assert_eq!(row(id), ["1 none"]);
}

#[test]
fn a_pause_never_shortens_and_a_commit_without_a_receivers_delay_writes_none() {
    let store = setup();
    let b = batch_of(&store, "b", 4, 3);
    hold(&store, &b, &["host:a.example"], |_| true);
    let now = 1_000_000;
    let items = claim(&store, now, 4, "c1");
    // Plain retries (backoff), a success: no pause row at all.
    let plain = vec![
        settle(&items[0], Outcome::Retry("500".into()), now),
        settle(&items[1], Outcome::Done, now),
    ];
    block_on(store.commit_outcomes(&plain)).unwrap();
    assert_eq!(count(&store, "SELECT count(*) FROM limit_state"), 0);
    // Two refusals in one commit: one row, the later end.
    let two = vec![
        refused(&items[2], now, 3_000),
        refused(&items[3], now, 1_000),
    ];
    block_on(store.commit_outcomes(&two)).unwrap();
    assert_eq!(paused(&store), [format!("host:a.example={}", now + 3_000)]);
    let again = claim(&store, now + 6_000, 1, "c2");
    block_on(store.commit_outcomes(&[refused(&again[0], now + 6_000, 0)])).unwrap();
    assert_eq!(
        paused(&store),
        [format!("host:a.example={}", now + 6_000)],
        "a later pause moves it on, never back"
    );
}

#[test]
fn items_a_pause_held_wait_in_the_due_index_and_the_pause_is_kept_an_hour_after_it_ended() {
    let store = setup();
    let b = batch_of(&store, "b", 6, 3);
    hold(&store, &b, &["host:a.example"], |i| i < 3);
    let now = 1_000_000;
    store
        .db()
        .conn()
        .execute(
            "INSERT INTO limit_state (key, tat, basis, paused_until) VALUES ('host:a.example', 0, '', ?1)",
            [now + 1_000],
        )
        .unwrap();
    let free = claim(&store, now, 10, "c1");
    assert_eq!(free.len(), 3, "the three items of no paused key");
    block_on(store.commit_outcomes(&settle_all(&free, Outcome::Done, now + 1))).unwrap();
    assert_eq!(
        due_index_entries(&store),
        3,
        "passed by later items, the held ones wait in the due index"
    );
    assert_eq!(
        count(&store, "SELECT claim_after FROM batches"),
        count(&store, "SELECT max(id) FROM cron_queue"),
        "so the cursor no longer stops below them"
    );
    // The pause is still kept after it ended: the reaper forgets it an hour later.
    block_on(store.reap_expired_leases(now + 1_000 + 3_600_000, 100)).unwrap();
    assert_eq!(paused(&store).len(), 1);
    let held = claim(&store, now + 1_000, 10, "c2");
    assert_eq!(held.len(), 3, "claimed once the pause ended");
    block_on(store.reap_expired_leases(now + 1_001 + 3_600_000, 100)).unwrap();
    assert!(paused(&store).is_empty(), "forgotten an hour after its end");
}

#[test]
fn a_completion_callback_holds_the_host_key_of_its_url() {
    use cron_fanout::core::limits::host_key;
    for (url, key) in [
        (
            "https://Hooks.Example.com:8443/done?x=1",
            Some("host:hooks.example.com"),
        ),
        ("http://127.0.0.1:9000/cb", Some("host:127.0.0.1")),
        ("https://example.com", Some("host:example.com")),
        ("https://[::1]/cb", None),
    ] {
        let store = setup();
        let b = batch_of(&store, "b", 1, 3);
        let on_finish = serde_json::json!({ "url": url }).to_string();
        store
            .db()
            .conn()
            .execute(
                "UPDATE batches SET on_finish = ?1, callback_max_attempts = 3 WHERE id = ?2",
                rusqlite::params![on_finish, b],
            )
            .unwrap();
        store
            .db()
            .conn()
            .execute("UPDATE batches SET finished_at = 5 WHERE id = ?1", [&b])
            .unwrap();
        let stored = texts(
            &store,
            "SELECT coalesce(limits, 'NULL') FROM cron_queue WHERE kind = 'callback'",
        );
        let expected = key.map_or("NULL".to_string(), |k| format!("[\"{k}\"]"));
        assert_eq!(stored, [expected], "{url}");
        if key.is_some() {
            assert_eq!(
                host_key(url).as_deref(),
                key,
                "the trigger and core::limits agree: {url}"
            );
        }
    }
}

#[test]
fn deleting_the_last_limit_leaves_no_item_it_held_behind_its_batch_s_cursor() {
    let store = setup();
    let batch = batch_of(&store, "held", 3, 3);
    // The first two hold a key of concurrency 1: the second is held below the third.
    hold(&store, &batch, &["k"], |i| i < 2);
    limit(&store, "k", None, 1, None, Some(1));
    let first = claim(&store, 1_000, 10, "c1");
    let ids: Vec<String> = first.iter().map(|i| i.subject_id.clone()).collect();
    assert_eq!(ids, ["held-00000", "held-00002"], "the second is held");
    assert!(block_on(store.delete_limit("k", 1_000)).unwrap());
    // The commit of the third, with no limit defined any more, must not move
    // the cursor past the second.
    let done = settle_all(&first, Outcome::Done, 2_000);
    block_on(store.commit_outcomes(&done)).unwrap();
    let next = claim(&store, 2_000, 10, "c2");
    let ids: Vec<String> = next.iter().map(|i| i.subject_id.clone()).collect();
    assert_eq!(ids, ["held-00001"], "the item the limit held is claimed");
    // Deleting no limit writes nothing.
    let before = count(&store, "SELECT count(*) FROM limit_state");
    assert!(!block_on(store.delete_limit("none", 3_000)).unwrap());
    assert_eq!(count(&store, "SELECT count(*) FROM limit_state"), before);
}

/// A run its receiver refused with a `429` and no `Retry-After`, as the drain
/// commits it: a retry after the backoff, no pause, `refused_at` set.
fn refused_429(item: &ClaimedItem, now: i64) -> cron_fanout::core::model::Transition {
    let mut t = settle(item, Outcome::Retry("HTTP 429".into()), now);
    t.refused_at = Some(now);
    t
}

/// The learned state of each key: (key, per minute, changed at, refused at, refusals).
fn learned(store: &Store<SqliteDb>) -> Vec<(String, i64, i64, i64, i64)> {
    let conn = store.db().conn();
    let mut stmt = conn
        .prepare(
            "SELECT key, learned, learned_at, refused_at, refusals FROM limit_state
             WHERE learned IS NOT NULL ORDER BY key",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// A key's stored `learned_before` and `learned_from` (migration 0027).
fn learned_from(store: &Store<SqliteDb>, key: &str) -> (Option<i64>, String) {
    store
        .db()
        .conn()
        .query_row(
            "SELECT learned_before, learned_from FROM limit_state WHERE key = ?1",
            [key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

/// Sets a key's learned state as `learn_limit_keys.sql` would have stored it.
fn learn(store: &Store<SqliteDb>, key: &str, per_minute: i64, at: i64) {
    store
        .db()
        .conn()
        .execute(
            "INSERT INTO limit_state (key, tat, basis, paused_until, learned, learned_at, refused_at, refusals)
             VALUES (?1, 0, '', ?3, ?2, ?3, ?3, 1)
             ON CONFLICT (key) DO UPDATE SET learned = excluded.learned,
               learned_at = excluded.learned_at, refused_at = excluded.refused_at",
            rusqlite::params![key, per_minute, at],
        )
        .unwrap();
}

/// A claim by a claimer that knows rates are in force (it charges at once).
fn claim_rated(store: &Store<SqliteDb>, now: i64, limit: i64, prefix: &str) -> Vec<ClaimedItem> {
    claim_after(store, now, limit, prefix, &mut Claimed::knowing(RATES))
}

#[test]
fn a_first_refusal_learns_what_the_receiver_took_and_the_claim_keeps_to_it() {
    use cron_fanout::core::learn;
    let store = setup();
    let b = batch_of(&store, "b", 100, 5);
    hold(&store, &b, &["host:a.example"], |_| true);
    let now = 1_000_000;
    let items = claim(&store, now, 20, "c1");
    assert_eq!(items.len(), 20, "no limit, no learned rate yet");
    // The receiver took 5 of them and refused one (the others still run).
    let mut outcomes = vec![refused_429(&items[0], now + 10)];
    outcomes.extend(
        items[1..6]
            .iter()
            .map(|i| settle(i, Outcome::Done, now + 10)),
    );
    block_on(store.commit_outcomes(&outcomes)).unwrap();
    // 5 taken within a second: 5 a second, 300 a minute.
    let taken = learn::Seen {
        taken: 5,
        span_ms: 10,
        ..Default::default()
    };
    let rule = learn::learned_after(None, taken, None, now + 10);
    assert_eq!(rule.per_minute, 300);
    assert_eq!(
        learned(&store),
        [("host:a.example".to_string(), 300, now + 10, now + 10, 1)]
    );
    assert_eq!(
        paused(&store),
        [format!("host:a.example={}", now + 10)],
        "an ended pause: the claim stays careful while the rate may hold items"
    );
    // Five a second, one every 200 ms: the refusal emptied the bucket (no
    // burst), so a claim takes the next second's 5 slots, the first 200 ms after
    // the refusal.
    let next = claim_rated(&store, now + 20, 10, "c2");
    let mut starts: Vec<i64> = next.iter().map(|i| i.start_at).collect();
    starts.sort_unstable();
    assert_eq!(
        starts,
        (1..=5).map(|j| now + 10 + 200 * j).collect::<Vec<_>>()
    );
    assert_eq!(claim_rated(&store, now + 200, 10, "c3").len(), 0);
    assert_eq!(claim_rated(&store, now + 220, 10, "c4").len(), 1);
    // What was taken is held four windows, then probed above by an eighth of
    // it a window: five windows later, 337 a minute.
    let t = now + 10 + 5 * learn::WINDOW_MS;
    let raised = learn::at(rule, None, t).unwrap().per_minute;
    assert_eq!(raised, 300 + 300 / 8);
    let gcra = Gcra {
        rate: raised,
        per_seconds: 60,
        burst: learn::burst(raised),
    };
    assert_eq!(
        claim_rated(&store, t, 20, "c5").len() as i64,
        gcra.room_ahead(None, t),
        "a new rate, its full burst and a second's tokens"
    );
}

#[test]
fn the_claim_honours_the_lower_of_a_set_rate_and_a_learned_one() {
    let store = setup();
    let b = batch_of(&store, "b", 40, 3);
    hold(&store, &b, &["host:a.example"], |_| true);
    let now = 1_000_000;
    // Set 1 a second (burst 1), learned 10 a second: the set rate (its burst
    // now, its next token a second ahead).
    limit(&store, "host:a.example", Some(1), 1, Some(1), None);
    learn(&store, "host:a.example", 600, now);
    assert_eq!(claim_rated(&store, now, 10, "c1").len(), 2);
    assert_eq!(claim_rated(&store, now + 900, 10, "c2").len(), 0);
    assert_eq!(claim_rated(&store, now + 1_000, 10, "c3").len(), 1);
    // Set 100 a second (burst 100), learned 1 a second: the learned rate (60
    // a minute, burst 1: not claimed ahead, Gcra::claims_ahead).
    // The slot claimed ahead under the set rate (now + 2 s) still counts
    // (Gcra::state_of): the learned rate's first start is a second after it.
    limit(&store, "host:a.example", Some(100), 1, Some(100), None);
    learn(&store, "host:a.example", 60, now + 2_000);
    assert_eq!(claim_rated(&store, now + 2_000, 10, "c4").len(), 0);
    assert_eq!(claim_rated(&store, now + 2_900, 10, "c5").len(), 0);
    assert_eq!(claim_rated(&store, now + 3_000, 10, "c6").len(), 1);
    assert_eq!(claim_rated(&store, now + 3_900, 10, "c6b").len(), 0);
    assert_eq!(claim_rated(&store, now + 4_000, 10, "c6c").len(), 1);
    // An hour after the last refusal the learned rate lapses: the set one again.
    let idle = now + 2_000 + cron_fanout::core::learn::IDLE_MS;
    assert_eq!(claim_rated(&store, idle, 10, "c7").len(), 10);
}

#[test]
fn a_learned_rate_growing_past_the_set_one_keeps_the_starts_claimed_ahead_under_it() {
    let store = setup();
    let b = batch_of(&store, "b", 60, 3);
    hold(&store, &b, &["host:a.example"], |_| true);
    let now = 1_000_000;
    // Set 6 a second (burst 2); learned 292 a minute, under it, and growing
    // back towards the 445 it had before: 365 a minute (over the set 360) from
    // the first window, when the set rate is in force again.
    let set = Gcra {
        rate: 6,
        per_seconds: 1,
        burst: 2,
    };
    limit(&store, "host:a.example", Some(6), 1, Some(2), None);
    store
        .db()
        .conn()
        .execute(
            "INSERT INTO limit_state (key, tat, basis, learned, learned_at, refused_at, refusals,
                                      learned_before, learned_from)
             VALUES ('host:a.example', 0, '', 292, ?1, ?1, 1, 445, 'refusals')",
            [now],
        )
        .unwrap();
    // A drainer claims every 100 ms, across the switch at now + 5 s.
    let mut starts = Vec::new();
    for t in (0..9_000).step_by(100) {
        let items = claim_rated(&store, now + t, 20, &format!("c{t}"));
        starts.extend(items.iter().map(|i| i.start_at));
    }
    starts.sort_unstable();
    let before = starts.iter().filter(|&&s| s < now + 5_000).count();
    assert!(
        (20..=27).contains(&before),
        "{before} starts under the learned rate"
    );
    assert!(
        starts.len() > before + 10,
        "{starts:?}: the set rate took over"
    );
    // The set limit's bound over every interval, the switch included (a fresh
    // burst there put 10 starts in a second).
    for i in 0..starts.len() {
        for j in i..starts.len() {
            let allowed =
                set.burst as f64 + set.rate as f64 * (starts[j] - starts[i]) as f64 / 1000.0;
            assert!(
                (j - i + 1) as f64 <= allowed + 1e-9,
                "{} starts in {} ms from {}: {starts:?}",
                j - i + 1,
                starts[j] - starts[i],
                starts[i] - now
            );
        }
    }
}

#[test]
fn a_learned_rate_lapses_after_an_idle_hour_and_its_pause_row_is_cleared_after() {
    use cron_fanout::core::learn;
    let store = setup();
    let b = batch_of(&store, "b", 60, 3);
    hold(&store, &b, &["host:a.example"], |_| true);
    let now = 1_000_000;
    learn(&store, "host:a.example", 1, now);
    // Cut from one a minute: held there, then probing one a minute more a window.
    store
        .db()
        .conn()
        .execute(
            "UPDATE limit_state SET learned_before = 1, learned_from = 'refusals'",
            [],
        )
        .unwrap();
    assert_eq!(claim_rated(&store, now, 10, "c1").len(), 1);
    // Raised a step a window all hour long, its burst grew with it.
    let raised = learn::at(
        learn::Learned {
            per_minute: 1,
            before: Some(1),
            source: learn::Source::Refusals,
            changed_at: now,
            refused_at: now,
        },
        None,
        now + learn::IDLE_MS - 1,
    )
    .unwrap();
    let gcra = Gcra {
        rate: raised.per_minute,
        per_seconds: 60,
        burst: learn::burst(raised.per_minute),
    };
    assert_eq!(
        claim_rated(&store, now + learn::IDLE_MS - 1, 30, "c2").len() as i64,
        learn::burst(raised.per_minute) + raised.per_minute / 60,
        "its burst and a second's tokens"
    );
    assert_eq!(
        gcra.room_ahead(None, now + learn::IDLE_MS - 1),
        learn::burst(raised.per_minute) + raised.per_minute / 60
    );
    assert_eq!(
        claim_rated(&store, now + learn::IDLE_MS, 10, "c3").len(),
        10,
        "no rate after the idle hour"
    );
    // Items were held by the learned rate until it lapsed, and a lease taken just
    // before then may still run: the ended pause keeps the cursor careful for the
    // pauses' margin past the lapse (else that lease's commit could move the
    // cursor past an item the rate held, and strand it).
    let kept = cron_fanout::core::limits::PAUSE_KEPT_MS;
    block_on(store.reap_expired_leases(now + learn::IDLE_MS + 1, 100)).unwrap();
    assert_eq!(paused(&store), [format!("host:a.example={now}")]);
    block_on(store.reap_expired_leases(now + learn::IDLE_MS + kept - 1, 100)).unwrap();
    assert_eq!(paused(&store).len(), 1, "kept the margin past the lapse");
    block_on(store.reap_expired_leases(now + learn::IDLE_MS + kept + 1, 100)).unwrap();
    assert_eq!(paused(&store), Vec::<String>::new());
    assert_eq!(
        count(&store, "SELECT count(*) FROM limit_state"),
        0,
        "no limit governs the key: its row goes with its pause"
    );
}

/// The reaper forgets a key's state with its ended pause when no limit governs
/// the key (limit_state keeps a row per key in use, not one per host ever
/// refused); a key under a limit of its own or a partitioned one keeps its rate
/// state, its pause cleared.
#[test]
fn the_reaper_deletes_the_state_of_an_ungoverned_key_with_its_ended_pause() {
    let store = setup();
    limit(&store, "github", Some(10), 1, Some(10), None);
    limit(&store, "tenant:*", None, 1, None, Some(2));
    let now = 10_000_000;
    for key in [
        "github",
        "tenant:acme",
        "host:gone.example",
        "host:recent.example",
    ] {
        let until = if key == "host:recent.example" {
            now - 1
        } else {
            now - 3_600_001
        };
        store
            .db()
            .conn()
            .execute(
                "INSERT INTO limit_state (key, tat, basis, paused_until) VALUES (?1, 5, '10/1', ?2)",
                rusqlite::params![key, until],
            )
            .unwrap();
    }
    block_on(store.reap_expired_leases(now, 100)).unwrap();
    assert_eq!(
        texts(
            &store,
            "SELECT key || ' ' || tat || ' ' || coalesce(paused_until, 'none') FROM limit_state ORDER BY key"
        ),
        [
            "github 5 none".to_string(),
            format!("host:recent.example 5 {}", now - 1),
            "tenant:acme 5 none".to_string(),
        ]
    );
}

#[test]
fn the_stored_learned_state_follows_core_learn_across_refusals_a_ceiling_and_the_idle_hour() {
    use cron_fanout::core::learn;
    let store = setup();
    let b = batch_of(&store, "b", 400, 100);
    hold(&store, &b, &["host:a.example"], |_| true);
    let key = "host:a.example";
    let mut rule: Option<learn::Learned> = None;
    let mut ceiling;
    let mut refusals = 0;
    // (instant, items started just before, a set rate per second from then on)
    let steps: [(i64, i64, Option<i64>); 9] = [
        (1_000_000, 30, None),
        (1_000_400, 0, None),    // within the window: kept
        (1_007_000, 0, None),    // one window later: raised once, halved
        (1_031_000, 0, None),    // several windows later
        (1_032_000, 0, Some(1)), // a set rate of 1/s: its ceiling
        (1_090_000, 0, Some(1)),
        (1_090_000 + learn::IDLE_MS, 12, None), // after the idle hour: afresh
        (1_090_000 + learn::IDLE_MS + 4_999, 0, None),
        (1_090_000 + learn::IDLE_MS + 5_000, 0, None),
    ];
    // Items to refuse, started long before any window of the steps.
    let mut early = claim(&store, 980_000, 100, "early");
    for (n, (at, started, set)) in steps.into_iter().enumerate() {
        match set {
            Some(r) => limit(&store, key, Some(r), 1, Some(1), None),
            None => {
                store.db().conn().execute("DELETE FROM limits", []).unwrap();
            }
        }
        ceiling = set.map(|r| learn::ceiling_per_minute(r, 1));
        let items = if started > 0 {
            claim(&store, at, started, &format!("s{n}"))
        } else {
            vec![early.pop().unwrap()]
        };
        assert_eq!(items.len() as i64, started.max(1), "step {n}");
        // The receiver takes all but the first, which it refuses.
        let mut outcomes = vec![refused_429(&items[0], at)];
        outcomes.extend(items[1..].iter().map(|i| settle(i, Outcome::Done, at)));
        block_on(store.commit_outcomes(&outcomes)).unwrap();
        let alive = rule.filter(|l| at - l.refused_at < learn::IDLE_MS);
        refusals = if alive.is_some() { refusals + 1 } else { 1 };
        let taken = (started - 1).max(0);
        let seen = learn::Seen {
            taken,
            span_ms: 1_000,
            ..Default::default()
        };
        let expected = learn::learned_after(rule, seen, ceiling, at);
        rule = Some(expected);
        assert_eq!(
            learned(&store),
            [(
                key.to_string(),
                expected.per_minute,
                expected.changed_at,
                expected.refused_at,
                refusals
            )],
            "step {n}"
        );
        assert_eq!(
            learned_from(&store, key),
            (expected.before, expected.source.as_str().to_string()),
            "step {n}"
        );
    }
}

#[test]
fn with_learning_off_a_refusal_stores_no_learned_rate_and_a_success_writes_no_state() {
    let store = setup().with_learning(false);
    let b = batch_of(&store, "b", 6, 3);
    hold(&store, &b, &["host:a.example"], |_| true);
    let now = 1_000_000;
    let items = claim(&store, now, 2, "c1");
    block_on(store.commit_outcomes(&[settle(&items[0], Outcome::Done, now)])).unwrap();
    assert_eq!(count(&store, "SELECT count(*) FROM limit_state"), 0);
    block_on(store.commit_outcomes(&[refused_429(&items[1], now)])).unwrap();
    assert_eq!(count(&store, "SELECT count(*) FROM limit_state"), 0);
    assert_eq!(
        claim(&store, now + 10, 9, "c2").len(),
        4,
        "nothing held back"
    );
}

/// A claimer whose last claim said nothing is in force sends the plain claim,
/// which reads no key and no limit table (the hot path costs what it cost before
/// limits); a limit defined after that claim still holds the very next claim:
/// the plain selection takes nothing then, and the full one takes over.
#[test]
fn the_plain_claim_reads_no_limits_and_a_limit_defined_since_holds_the_next_claim() {
    let store = setup();
    let b = batch_of(&store, "b", 20, 3);
    hold(&store, &b, &["github"], |_| true);
    let mut claimed = Claimed::default();
    assert_eq!(claim_after(&store, 1_000, 4, "c1", &mut claimed).len(), 4);
    assert_eq!(claim_after(&store, 1_001, 4, "c2", &mut claimed).len(), 4);
    let (sql, params) = store.db().last_query().expect("a claim ran");
    assert_eq!(sql, sql::CLAIM_PLAIN, "nothing in force: the plain claim");
    let plan = query_plan(&store, &sql, &params).join("\n");
    assert!(!plan.contains("json_each"), "no key is read: {plan}");
    assert!(
        !plan.contains("SCAN limit_state") && !plan.contains("USING INDEX sqlite_autoindex_limit"),
        "no key's state or limit is looked up (only the partial indexes that say whether any is in force): {plan}"
    );

    limit(&store, "github", None, 1, None, Some(2));
    let next = claim_after(&store, 1_002, 4, "c3", &mut claimed);
    assert!(
        next.is_empty(),
        "8 in flight hold the key of concurrency 2: {} claimed",
        next.len()
    );
    let (sql, _) = store.db().last_query().unwrap();
    assert_eq!(sql, sql::CLAIM_DUE_ITEMS, "the full claim took over");
}

/// With nothing in force, the plain claim takes what the full one takes, in the
/// same order: priorities first, then turns between batches, then (run_after, id).
#[test]
fn the_plain_claim_takes_what_the_full_claim_takes_in_its_order() {
    let claims = |plain: bool| {
        let store = setup();
        batch_of(&store, "a", 30, 3);
        batch_of(&store, "b", 7, 3);
        let c = batch_of(&store, "c", 12, 3);
        priority(&store, &c, 1);
        let mut claimed = if plain {
            Claimed::knowing(LimitsInForce {
                any: false,
                rates: false,
            })
        } else {
            Claimed::default()
        };
        let mut order = Vec::new();
        for (i, now) in (1_000..1_006).enumerate() {
            let items = claim_after(&store, now, 9, &format!("c{i}"), &mut claimed);
            order.push(items.iter().map(|i| i.item_id).collect::<Vec<_>>());
            if !plain {
                claimed = Claimed::default();
            }
            let (sql, _) = store.db().last_query().unwrap();
            let expected = if plain {
                sql::CLAIM_PLAIN
            } else {
                sql::CLAIM_DUE_ITEMS
            };
            if !items.is_empty() {
                assert_eq!(sql, expected);
            }
        }
        order
    };
    let plain = claims(true);
    assert_eq!(plain.iter().map(Vec::len).sum::<usize>(), 49);
    assert_eq!(plain, claims(false));
}

/// A claimer whose clock is behind the one that learned a rate (the learned
/// instant is in its future) keeps the learned rate, as `core::learn::at` does:
/// no negative number of windows lowers it to nothing and blocks the key.
#[test]
fn a_claimer_s_clock_behind_the_learned_rate_s_writer_keeps_the_learned_rate() {
    use cron_fanout::core::learn;
    let store = setup();
    let b = batch_of(&store, "b", 20, 3);
    hold(&store, &b, &["host:a.example"], |_| true);
    let now = 1_000_000;
    // Learned 60 a minute by a clock a minute ahead of this claimer's.
    learn(&store, "host:a.example", 60, now + 60_000);
    // Its pause ended (only the learned rate is tested here).
    store
        .db()
        .conn()
        .execute("UPDATE limit_state SET paused_until = ?1", [now - 1])
        .unwrap();
    let rule = learn::Learned {
        per_minute: 60,
        before: None,
        source: learn::Source::Refusals,
        changed_at: now + 60_000,
        refused_at: now + 60_000,
    };
    assert_eq!(learn::at(rule, None, now).map(|l| l.per_minute), Some(60));
    assert_eq!(
        claim_rated(&store, now, 10, "c1").len(),
        1,
        "the learned rate's burst of one, as its Rust twin says"
    );
    assert_eq!(
        claim_rated(&store, now + 1_000, 10, "c2").len(),
        1,
        "then one a second"
    );
}

/// The full claim after an empty plain one is paid from what the budget has free:
/// with nothing free it is not sent (the budget is never exceeded), and the claim
/// comes back empty, saying nothing of the limits.
#[test]
fn an_empty_plain_claim_sends_the_full_one_only_within_the_budget() {
    use cron_fanout::core::budget::Budget;
    use cron_fanout::store::metered::Metered;
    let db = setup().into_db();
    let budget = Budget::new(1);
    let store = Store::new(Metered::new(db, budget.clone()));
    let nothing = LimitsInForce {
        any: false,
        rates: false,
    };
    let claim = block_on(store.claim_due_items_after(
        1_000,
        10,
        "c1",
        1_000 + LEASE_MS,
        &Claimed::knowing(nothing),
    ))
    .unwrap();
    assert!(
        claim.items.is_empty() && claim.in_force.is_none(),
        "{claim:?}"
    );
    assert_eq!(
        (budget.used(), store.usage().statements),
        (1, 1),
        "the plain claim alone"
    );

    let roomy = Budget::new(10);
    let store = Store::new(Metered::new(store.into_db().into_inner(), roomy.clone()));
    let claim = block_on(store.claim_due_items_after(
        1_000,
        10,
        "c2",
        1_000 + LEASE_MS,
        &Claimed::knowing(nothing),
    ))
    .unwrap();
    assert_eq!(roomy.used(), 2, "the plain claim, then the full one");
    assert_eq!(
        claim.in_force,
        Some(nothing),
        "the full claim's hold said so"
    );
}

/// The guide's GitHub limit (5,000 an hour, burst 100, concurrency 10): once 10
/// are in flight the rate still has tokens, and the claim must not say "claim
/// again now" (a drain would claim in a loop until its budget is gone): it waits
/// on a slot (its own commit, else the poll). An item holding a paused key beside
/// a rate key with tokens waits for the pause's end.
#[test]
fn a_claim_held_by_a_concurrency_or_a_pause_never_wakes_on_another_keys_tokens() {
    use cron_fanout::core::limits::HELD_POLL_MS;
    let store = setup();
    let b = batch_of(&store, "b", 60, 3);
    hold(&store, &b, &["github"], |_| true);
    limit(&store, "github", Some(5_000), 3_600, Some(100), Some(10));
    let now = 1_000_000;
    let mut claimed = Claimed::knowing(RATES);
    assert_eq!(claim_after(&store, now, 25, "c1", &mut claimed).len(), 10);
    let held =
        block_on(store.claim_due_items_after(now + 5, 25, "c2", now + LEASE_MS, &claimed)).unwrap();
    assert!(held.items.is_empty());
    assert_eq!(
        held.held_until,
        Some(now + 5 + HELD_POLL_MS),
        "at its concurrency: wait for a slot, not the rate's next token"
    );

    let store = setup();
    let b = batch_of(&store, "p", 10, 3);
    hold(&store, &b, &["tenant:x", "host:y"], |_| true);
    limit(&store, "host:y", Some(10), 1, Some(10), None);
    store
        .db()
        .conn()
        .execute(
            "INSERT INTO limit_state (key, tat, basis, paused_until) VALUES ('tenant:x', 0, '', ?1)",
            [now + 60_000],
        )
        .unwrap();
    let held = block_on(store.claim_due_items_after(
        now,
        25,
        "c3",
        now + LEASE_MS,
        &Claimed::knowing(RATES),
    ))
    .unwrap();
    assert!(held.items.is_empty());
    assert_eq!(held.held_until, Some(now + 60_000), "the pause's end");
}

/// Completion callbacks to a paused host do not hide other batches' callbacks:
/// with more of them due than a claim takes, the callback to another host is
/// still claimed.
#[test]
fn callbacks_held_by_a_paused_host_do_not_starve_other_batches_callbacks() {
    let store = setup();
    let now = 1_000_000;
    for (key, url) in [
        ("a1", "https://paused.example/cb"),
        ("a2", "https://paused.example/cb"),
        ("a3", "https://paused.example/cb"),
        ("b1", "https://fine.example/cb"),
    ] {
        let b = batch_of(&store, key, 1, 3);
        let on_finish = serde_json::json!({ "url": url }).to_string();
        let conn = store.db().conn();
        conn.execute(
            "UPDATE batches SET on_finish = ?1, callback_max_attempts = 3 WHERE id = ?2",
            rusqlite::params![on_finish, b],
        )
        .unwrap();
        conn.execute(
            "UPDATE cron_queue SET status = 'completed', run_after = 1 WHERE batch_id = ?1 AND kind <> 'callback'",
            [&b],
        )
        .unwrap();
        conn.execute(
            "UPDATE batches SET status = 'finished', finished_at = 5 WHERE id = ?1",
            [&b],
        )
        .unwrap();
    }
    store
        .db()
        .conn()
        .execute(
            "INSERT INTO limit_state (key, tat, basis, paused_until) VALUES ('host:paused.example', 0, '', ?1)",
            [now + 60_000],
        )
        .unwrap();
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM cron_queue WHERE kind = 'callback' AND status = 'pending'"
        ),
        4
    );
    let claimed = claim(&store, now, 2, "c1");
    let batches: Vec<&str> = claimed.iter().map(|i| i.batch_id.as_str()).collect();
    assert_eq!(batches, ["b-b1"], "the one callback not held by the pause");
}

/// The work of a claim's statements (hold, claim) as a drain with a pause in
/// force sends them, measured in SQLite's VM steps and rolled back.
fn claim_work(store: &Store<SqliteDb>, now: i64, limit: i64) -> [i32; 2] {
    let (token, claimed, per_batch) = ("m", "{}", cron_fanout::core::limits::HELD_WINDOW);
    let held = sql::ClaimHeld {
        now,
        limit,
        token_prefix: token,
        claimed,
        per_batch,
        charges: 0,
    }
    .params();
    let claim = sql::ClaimDueItems {
        now,
        limit,
        token_prefix: token,
        claimed,
        per_batch,
        charges: 0,
        lease_expires_at: now + LEASE_MS,
    }
    .params();
    [
        vm_steps(store, sql::CLAIM_HELD, &held),
        vm_steps(store, sql::CLAIM_DUE_ITEMS, &claim),
    ]
}

#[test]
fn a_claim_costs_the_same_at_19000_items_completed_behind_a_held_item_as_at_1000() {
    // One item at the batch's head holds a paused key for the whole run: the
    // claims take the items behind it. A claim once read every item completed
    // since the held one (the cursor and the lease window stayed below it).
    let store = setup();
    let b = batch_of(&store, "b", 20_000, 3);
    hold(&store, &b, &["tenant:slow"], |i| i == 0);
    let now = 1_000_000;
    store
        .db()
        .conn()
        .execute(
            "INSERT INTO limit_state (key, tat, basis, paused_until) VALUES ('tenant:slow', 0, '', ?1)",
            [now + 86_400_000],
        )
        .unwrap();
    let mut claimed = Claimed::default();
    let mut completed = 0;
    let mut work = Vec::new();
    let mut marks = [1_000, 19_000].into_iter().peekable();
    for (round, at) in (0..).zip((now..).step_by(10)) {
        let Some(&mark) = marks.peek() else { break };
        let items = claim_after(&store, at, 100, &format!("c{round}"), &mut claimed);
        assert!(
            items.len() >= 99,
            "round {round}: the items behind the held one"
        );
        block_on(store.commit_outcomes(&settle_all(&items, Outcome::Done, at + 1))).unwrap();
        completed += items.len();
        if completed >= mark {
            work.push((completed, claim_work(&store, at + 2, 100)));
            marks.next();
        }
    }
    eprintln!("VM steps of the hold and the claim by items completed: {work:?}");
    let [(_, early), (_, late)] = work[..] else {
        panic!("measured twice: {work:?}")
    };
    for (e, l) in early.iter().zip(late.iter()) {
        assert!(
            f64::from(*l) <= f64::from(*e) * 1.1,
            "a claim's work grew with the items completed: {work:?}"
        );
    }
    let head = count(&store, "SELECT min(id) FROM cron_queue");
    assert_eq!(
        count(
            &store,
            &format!("SELECT attempt FROM cron_queue WHERE id = {head} AND status = 'pending'")
        ),
        0,
        "the held item waits, unclaimed"
    );
    store
        .db()
        .conn()
        .execute("DELETE FROM limit_state", [])
        .unwrap();
    let first = claim_after(&store, now + 10_000, 1_000, "last", &mut claimed);
    assert_eq!(
        first[0].item_id, head,
        "the held item first: its place in the order kept"
    );
    let mut rest = first.len();
    for round in 0.. {
        let more = claim_after(
            &store,
            now + 10_001,
            1_000,
            &format!("r{round}"),
            &mut claimed,
        );
        if more.is_empty() {
            break;
        }
        rest += more.len();
    }
    assert_eq!(
        rest,
        20_000 - completed,
        "every item never claimed, the held one among them"
    );
}

#[test]
fn a_claim_reads_as_much_with_2000_tenant_limits_defined_as_with_one() {
    // Items of three batches, each holding its own receiver's key and a tenant's:
    // 300 keys in a claim's window. A key's partitioned limit was once looked for
    // among every limit defined, for each key.
    let measure = |tenants: usize| {
        let store = setup();
        for b in 0..3 {
            let id = batch_of(&store, &format!("b{b}"), 100, 3);
            let ids: Vec<i64> = {
                let conn = store.db().conn();
                let mut stmt = conn
                    .prepare("SELECT id FROM cron_queue WHERE batch_id = ?1 ORDER BY id")
                    .unwrap();
                let rows = stmt.query_map([&id], |r| r.get(0)).unwrap();
                rows.map(Result::unwrap).collect()
            };
            for (i, item) in ids.iter().enumerate() {
                let keys = serde_json::json!([
                    format!("host:h{b}-{i}.example"),
                    format!("tenant:t{:04}", i % 7)
                ]);
                store
                    .db()
                    .conn()
                    .execute(
                        "UPDATE cron_queue SET limits = ?1 WHERE id = ?2",
                        rusqlite::params![keys.to_string(), item],
                    )
                    .unwrap();
            }
        }
        // The items' first tenant, then tenants none of them holds.
        for t in std::iter::once(0).chain(1_000..).take(tenants) {
            limit(&store, &format!("tenant:t{t:04}"), None, 1, None, Some(1));
        }
        limit(&store, "host:*", None, 1, None, Some(50));
        let now = 1_000_000;
        let work = claim_work(&store, now, 100);
        let taken = claim_after(&store, now, 100, "c", &mut Claimed::knowing(RATES));
        (work, taken.len())
    };
    let (one, taken_one) = measure(1);
    let (many, taken_many) = measure(2_000);
    eprintln!(
        "VM steps of the hold and the claim: {one:?} with 1 tenant limit, {many:?} with 2,000"
    );
    assert_eq!(
        (taken_one, taken_many),
        (100, 100),
        "one item of tenant t0000 and 99 of the ungoverned ones, either way"
    );
    for (o, m) in one.iter().zip(many.iter()) {
        assert!(
            f64::from(*m) <= f64::from(*o) * 1.1,
            "a claim reads every limit defined: {one:?} with 1, {many:?} with 2,000"
        );
    }
}
