//! Per-invocation subrequest budget: the ledger and the planner. Locally nothing
//! enforces Cloudflare's limits, so this accounting is what keeps production safe
//! (invariant 7: an invocation never exceeds its subrequest budget or deadline).
//!
//! The ledger is charged where calls happen: every D1 call by the metered store
//! (`store::metered`), every `SELF` dispatch (or inline job) by the drain. The
//! planner reserves ahead what a step will need — a claim its statement and every
//! item it may return — and keeps room for the flushes, one commit retry and the
//! tail, so no step is started that the budget cannot finish.

use std::cell::Cell;
use std::fmt;
use std::rc::Rc;

use crate::core::batch::model::StopReason;
use crate::core::drain::timing::line_allowed;
pub use crate::core::drain::timing::{flush_reserve, FLUSH_MAX_ROWS};
use crate::core::schedule::tick::FIRE_APPLY_CALLS;

/// Subrequests kept back for the end of every drain: mark finished batches and
/// record the invocation summary.
pub const TAIL_SUBREQUESTS: i64 = 2;

/// Commit retries the plan keeps room for, per invocation: one transient D1
/// error on a commit (the last flush included) costs a statement, not a chunk of
/// delivered items left to the reaper. Spent once used; more retries go out only
/// when the budget has room to spare.
pub const RETRY_RESERVE: i64 = 1;

/// Most D1 calls a tick's schedule firing makes before the drain (`Store::fire_due`):
/// the due page (with whether a batch is still filling), the fills' continuation
/// (only while one fills), the zones in use, the apply `batch()`
/// calls (the whole page in one, which also reads back its batches; more only when
/// one fails, to keep a failing fire from holding up the others) and the backoff
/// of the fires that failed. An idle tick makes only the first, a page that
/// applies three.
pub const FIRE_SUBREQUESTS: i64 = 3 + FIRE_APPLY_CALLS + 1;

/// The reaper's one statement per tick.
pub const REAP_SUBREQUESTS: i64 = 1;

/// The smallest drain worth a tick: one claim, one item's dispatch, its flush and
/// the retry the plan keeps for it.
const SMALLEST_DRAIN: i64 = 3 + RETRY_RESERVE;

/// The smallest `SUBREQUEST_BUDGET` settings accept: a tick that fires schedules
/// and reaps still has room to drain one item, finish batches and record its
/// summary. Firing and reaping run before the drain, which plans with what is left.
pub const MIN_SUBREQUEST_BUDGET: i64 =
    FIRE_SUBREQUESTS + REAP_SUBREQUESTS + SMALLEST_DRAIN + TAIL_SUBREQUESTS;

/// One invocation's subrequests, shared (cheap clones of one ledger) by the drain,
/// which reserves and charges dispatches, and the metered store, which charges
/// each D1 call as it goes out.
#[derive(Debug, Clone)]
pub struct Budget(Rc<Cell<Ledger>>);

/// Where the budget stands: `used + reserved_calls + reserved <= limit` always.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ledger {
    pub limit: i64,
    /// Subrequests made (a refused call is not made and not counted).
    pub used: i64,
    /// D1 calls planned and not yet made; the meter draws on these first.
    pub reserved_calls: i64,
    /// Other subrequests held for later: the dispatches of claimed items.
    pub reserved: i64,
}

/// A subrequest the budget cannot pay for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    pub limit: i64,
    pub used: i64,
    pub reserved: i64,
    pub wanted: i64,
}

impl fmt::Display for OverBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "subrequest budget exceeded: {} used and {} reserved of {}, {} more wanted",
            self.used, self.reserved, self.limit, self.wanted
        )
    }
}

impl std::error::Error for OverBudget {}

impl Budget {
    pub fn new(limit: i64) -> Budget {
        Budget(Rc::new(Cell::new(Ledger {
            limit,
            used: 0,
            reserved_calls: 0,
            reserved: 0,
        })))
    }

    pub fn ledger(&self) -> Ledger {
        self.0.get()
    }

    pub fn limit(&self) -> i64 {
        self.ledger().limit
    }

    pub fn used(&self) -> i64 {
        self.ledger().used
    }

    /// What is neither used nor reserved.
    pub fn free(&self) -> i64 {
        let l = self.ledger();
        l.limit - l.used - l.reserved_calls - l.reserved
    }

    /// Take `n` from what is free, or refuse without changing anything.
    fn take_free(&self, n: i64, apply: impl FnOnce(&mut Ledger)) -> Result<(), OverBudget> {
        let mut l = self.ledger();
        if n > self.free() {
            return Err(OverBudget {
                limit: l.limit,
                used: l.used,
                reserved: l.reserved_calls + l.reserved,
                wanted: n,
            });
        }
        apply(&mut l);
        self.0.set(l);
        Ok(())
    }

    /// Reserve what a step is about to need: `calls` D1 calls (its claim or commit
    /// statement) and `dispatches` subrequests held for later (the dispatches of
    /// the items a claim may return). All or nothing.
    pub fn reserve(&self, calls: i64, dispatches: i64) -> Result<(), OverBudget> {
        self.take_free(calls + dispatches, |l| {
            l.reserved_calls += calls;
            l.reserved += dispatches;
        })
    }

    /// Keep `n` out of the drain's reach (a drainer's last step and its
    /// continuation's send); [`Budget::give_back`] returns them.
    pub fn keep_back(&self, n: i64) {
        let mut l = self.ledger();
        l.limit -= n;
        self.0.set(l);
    }

    /// Return what [`Budget::keep_back`] kept.
    pub fn give_back(&self, n: i64) {
        let mut l = self.ledger();
        l.limit += n;
        self.0.set(l);
    }

    /// Give back held dispatches that will not be made (a claim that came back
    /// with fewer rows than it held for, or failed).
    pub fn release(&self, n: i64) {
        let mut l = self.ledger();
        l.reserved -= n.clamp(0, l.reserved);
        self.0.set(l);
    }

    /// A D1 call goes out (the metered store): paid by a planned call if there is
    /// one, otherwise from what is free, otherwise refused.
    pub fn charge_call(&self) -> Result<(), OverBudget> {
        let mut l = self.ledger();
        if l.reserved_calls > 0 {
            l.reserved_calls -= 1;
            l.used += 1;
            self.0.set(l);
            return Ok(());
        }
        self.take_free(1, |l| l.used += 1)
    }

    /// `n` other subrequests go out (a dispatch): paid from what was held for them,
    /// the rest from what is free, otherwise refused.
    pub fn charge(&self, n: i64) -> Result<(), OverBudget> {
        let l = self.ledger();
        let held = n.clamp(0, l.reserved);
        self.take_free(n - held, |l| {
            l.reserved -= held;
            l.used += n;
        })
    }
}

/// The fixed inputs of a drain's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainLimits {
    pub concurrency: i64,
    pub claim_chunk: i64,
    /// Subrequests one claimed item costs this invocation: 1 SELF call when fanning
    /// out, the job's own calls when running inline.
    pub per_item_cost: i64,
    pub job_timeout_ms: i64,
    pub deadline_ms: i64,
    /// How long a claim owns its items.
    pub lease_ms: i64,
    /// Most items one invocation dispatches (`MAX_CHILD_INVOCATIONS` when fanning
    /// out; `i64::MAX` inline, which makes no SELF calls).
    pub max_children: i64,
}

/// Where a drain is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainState {
    /// Items running now (at most the concurrency).
    pub in_flight: i64,
    /// Claimed items waiting for a free slot.
    pub queued: i64,
    /// Flush statements kept for the outcomes not yet in a commit (queued,
    /// running, waiting): one per 500 of each lease, so the outcomes of an older
    /// claim can be committed before their lease expires without waiting for the
    /// newer ones (`Drain`'s lease rule).
    pub flushes: i64,
    /// Commit retries still kept (`RETRY_RESERVE` less those sent).
    pub retries: i64,
    pub elapsed_ms: i64,
    /// What a claim's items need besides their call times, at the D1 round trips
    /// seen (`timing::wind_down_ms`).
    pub wind_down_ms: i64,
    /// A claim came back short: nothing else is due right now.
    pub drained: bool,
    /// Items dispatched or waiting to be: what counts against `max_children`.
    pub children: i64,
    /// Queued items enough to keep the window busy through the slowest D1 round
    /// trip seen, at the rate items have been finishing (`cover_items`); `None`
    /// until the rate is measured.
    pub cover: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextClaim {
    /// Claim up to this many items now.
    Take(i64),
    /// Let in-flight calls finish first: too few free slots to be worth a statement.
    Hold,
    /// Claim nothing more in this invocation.
    Stop(StopReason),
}

/// Fewest items worth a claim statement: half a chunk. Claiming one item per freed
/// slot would cost one statement per item, the very cost claims amortise.
pub fn refill_at(claim_chunk: i64) -> i64 {
    (claim_chunk / 2).max(1)
}

/// Queued items that keep the window busy while a claim is out: those that finish
/// during the slowest D1 round trip seen (`d1_ms`: a claim waits behind a commit
/// on D1's one writer, so the slowest of any call, not a typical claim), at the
/// rate items have finished since the first dispatch (`finished` in `since_ms`).
/// `None` before `sample` have finished (the drain's chunk or window, the
/// larger): too few to know a rate by.
pub fn cover_items(finished: i64, since_ms: i64, d1_ms: i64, sample: i64) -> Option<i64> {
    if finished < sample.max(1) || since_ms <= 0 {
        return None;
    }
    // ceil(finished × d1 / since), in i128: no overflow for any i64 inputs.
    let n = (finished as i128) * (d1_ms.max(0) as i128);
    let d = since_ms as i128;
    Some(((n + d - 1) / d).min(i64::MAX as i128) as i64)
}

/// Decide the next claim. Claims run up to a chunk ahead of the window: as soon as
/// half a chunk fits (running + queued ≤ concurrency + chunk), so the window never
/// runs dry while a claim is on its D1 round trip, and each claim takes many rows.
/// Measured: claiming only once the queue was empty left the window under-full
/// during every claim and cost about 15 % of fan-out throughput (docs/benchmarks/history-2026-11-21.md).
/// Once the drain knows how fast items finish and how slow D1 answers
/// (`state.cover`), a claim waits for a whole chunk while the queue still holds
/// more than that cover: half-chunk claims cost up to twice the statements, and
/// the cover is what keeps the window full during the claim. Claims never grow
/// past a chunk, nor the line past `concurrency + chunk` (the lease rule's).
///
/// The deadline and the lease shorten the line instead of ending the claims
/// early: an item is claimed only if it can wait, run and be committed before the
/// deadline and before its lease expires, at the D1 round trips seen
/// (`timing::line_allowed` with `state.wind_down_ms`). A line shorter than half a
/// chunk is claimed only once it is all free (it is a whole number of windows),
/// so claims stay at least half a chunk or one window long.
///
/// A claim is affordable when its statement, every item it may return, the flushes
/// for everything outstanding and for its own items, the retry kept and the tail
/// all fit in what the budget has free.
pub fn next_claim(budget: &Budget, limits: DrainLimits, state: DrainState) -> NextClaim {
    if state.drained {
        return NextClaim::Stop(StopReason::Drained);
    }
    let children_left = limits.max_children.saturating_sub(state.children);
    if children_left <= 0 {
        return NextClaim::Stop(StopReason::ChildCap);
    }
    let allowed = line_allowed(
        state.elapsed_ms,
        limits.deadline_ms,
        limits.lease_ms,
        state.wind_down_ms,
        limits.job_timeout_ms,
        limits.concurrency,
    );
    let line = (limits.concurrency + limits.claim_chunk).min(allowed);
    if line == 0 {
        // Not even an item that starts at once could finish; it only gets later
        // (or D1 is too slow for the lease: nothing claimed could be committed).
        return NextClaim::Stop(StopReason::Deadline);
    }
    // The cap shortens the claim, and a claim of all that is left of it is worth
    // a statement however short.
    let free = (line - state.in_flight - state.queued).min(children_left);
    if free < refill_at(limits.claim_chunk).min(line).min(children_left) {
        return NextClaim::Hold;
    }
    let whole = limits.claim_chunk.min(line).min(children_left);
    if free < whole && state.cover.is_some_and(|cover| state.queued > cover) {
        return NextClaim::Hold;
    }
    let kept = state.flushes + state.retries + TAIL_SUBREQUESTS;
    let mut k = free.min(limits.claim_chunk);
    let affordable =
        |k: i64| 1 + k * limits.per_item_cost + flush_reserve(k) + kept <= budget.free();
    while k > 0 && !affordable(k) {
        k -= 1;
    }
    if k == 0 {
        // Nothing affordable now; finishing in-flight calls never frees budget.
        return NextClaim::Stop(StopReason::Budget);
    }
    NextClaim::Take(k)
}

/// Whether a commit statement (a flush, or a retry of one) fits the budget while
/// keeping `flushes` for the outcomes it does not carry (items still running,
/// queued or being claimed, outcomes waiting behind it; counted per lease, see
/// `DrainState::flushes`), `retries` commit retries and the tail.
pub fn may_commit(budget: &Budget, flushes: i64, retries: i64) -> bool {
    1 + flushes + retries + TAIL_SUBREQUESTS <= budget.free()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::drain::timing::{call_ms, WIND_DOWN_MS};

    const LIMITS: DrainLimits = DrainLimits {
        concurrency: 25,
        claim_chunk: 50,
        per_item_cost: 1,
        job_timeout_ms: 10_000,
        deadline_ms: 50_000,
        lease_ms: 3_600_000,
        max_children: i64::MAX,
    };

    /// `flushes` kept for outstanding outcomes, the retry still kept, quick D1.
    fn state(in_flight: i64, flushes: i64) -> DrainState {
        DrainState {
            in_flight,
            queued: 0,
            flushes,
            retries: RETRY_RESERVE,
            elapsed_ms: 0,
            wind_down_ms: WIND_DOWN_MS,
            drained: false,
            children: 0,
            cover: None,
        }
    }

    fn ledger(b: &Budget) -> (i64, i64, i64) {
        let l = b.ledger();
        (l.used, l.reserved_calls, l.reserved)
    }

    #[test]
    fn charges_refuse_to_exceed_the_limit() {
        let b = Budget::new(3);
        assert!(b.charge(2).is_ok());
        let err = b.charge(2).unwrap_err();
        assert_eq!(
            err,
            OverBudget {
                limit: 3,
                used: 2,
                reserved: 0,
                wanted: 2
            }
        );
        assert_eq!(b.used(), 2);
        assert!(b.charge_call().is_ok());
        assert_eq!(b.free(), 0);
        assert!(b.charge_call().is_err());
        assert_eq!(b.used(), 3);
    }

    #[test]
    fn a_planned_call_is_paid_by_its_reservation() {
        let b = Budget::new(2);
        b.reserve(1, 0).unwrap();
        b.charge(1).unwrap();
        // Nothing free, but the call was planned: the meter lets it through.
        assert_eq!(b.free(), 0);
        b.charge_call().unwrap();
        assert_eq!(ledger(&b), (2, 0, 0));
        // An unplanned call now has nothing to draw on.
        assert!(b.charge_call().is_err());
    }

    #[test]
    fn dispatches_draw_on_what_their_claim_held() {
        let b = Budget::new(10);
        b.reserve(0, 6).unwrap();
        assert_eq!(b.free(), 4);
        // Nothing else can take what is held for dispatches; a refused reservation
        // reserves nothing.
        assert!(b.reserve(1, 4).is_err());
        assert_eq!(ledger(&b), (0, 0, 6));
        b.charge(2).unwrap();
        assert_eq!(ledger(&b), (2, 0, 4));
        b.release(3);
        assert_eq!(ledger(&b), (2, 0, 1));
        // Releasing more than is held, or a negative amount, is clamped.
        b.release(50);
        b.release(-4);
        assert_eq!(ledger(&b), (2, 0, 0));
        // A charge beyond what is held takes the rest from what is free.
        b.reserve(0, 1).unwrap();
        b.charge(3).unwrap();
        assert_eq!(ledger(&b), (5, 0, 0));
    }

    #[test]
    fn clones_share_one_ledger() {
        let b = Budget::new(5);
        let meter = b.clone();
        meter.charge_call().unwrap();
        assert_eq!(b.used(), 1);
    }

    #[test]
    fn flush_reserve_rounds_up() {
        assert_eq!(flush_reserve(0), 0);
        assert_eq!(flush_reserve(1), 1);
        assert_eq!(flush_reserve(FLUSH_MAX_ROWS), 1);
        assert_eq!(flush_reserve(FLUSH_MAX_ROWS + 1), 2);
    }

    #[test]
    fn first_claim_takes_a_full_chunk() {
        let b = Budget::new(10_000);
        assert_eq!(next_claim(&b, LIMITS, state(0, 0)), NextClaim::Take(50));
        let small_chunk = DrainLimits {
            claim_chunk: 10,
            ..LIMITS
        };
        assert_eq!(
            next_claim(&b, small_chunk, state(0, 0)),
            NextClaim::Take(10)
        );
    }

    #[test]
    fn claims_ahead_while_half_a_chunk_fits() {
        let b = Budget::new(10_000);
        // Capacity 75 (window 25 + chunk 50); refill once 25 fit.
        let mut s = state(25, 0);
        s.queued = 26;
        assert_eq!(next_claim(&b, LIMITS, s), NextClaim::Hold);
        s.queued = 25;
        assert_eq!(next_claim(&b, LIMITS, s), NextClaim::Take(25));
        s.queued = 0;
        assert_eq!(next_claim(&b, LIMITS, s), NextClaim::Take(50));
    }

    #[test]
    fn the_cover_is_what_finishes_in_a_round_trip_once_a_sample_finished() {
        // 100 finished in 250 ms (0.4 an ms), D1 at 10 ms: 4 items.
        assert_eq!(cover_items(100, 250, 10, 100), Some(4));
        // Rounded up: 0.4 × 12 = 4.8.
        assert_eq!(cover_items(100, 250, 12, 100), Some(5));
        // Too few finished, or no time yet: unknown.
        assert_eq!(cover_items(99, 250, 5, 100), None);
        assert_eq!(cover_items(100, 0, 5, 100), None);
        assert_eq!(cover_items(0, 10, 5, 0), None);
        assert_eq!(cover_items(i64::MAX, 1, i64::MAX, 1), Some(i64::MAX));
    }

    #[test]
    fn a_covered_queue_waits_for_a_whole_chunk() {
        let b = Budget::new(10_000);
        // Capacity 75 (window 25 + chunk 50), the window full.
        let mut s = state(25, 0);
        s.queued = 20;
        // Unknown cover: half a chunk fits, so it is claimed, as before.
        assert_eq!(next_claim(&b, LIMITS, s), NextClaim::Take(30));
        // The queue covers more than the round trip: wait for a whole chunk.
        s.cover = Some(5);
        assert_eq!(next_claim(&b, LIMITS, s), NextClaim::Hold);
        s.queued = 6;
        assert_eq!(next_claim(&b, LIMITS, s), NextClaim::Hold);
        // Down to the cover: claim what fits (a claim never exceeds a chunk).
        s.queued = 5;
        assert_eq!(next_claim(&b, LIMITS, s), NextClaim::Take(45));
        s.queued = 0;
        assert_eq!(next_claim(&b, LIMITS, s), NextClaim::Take(50));
        // D1 slow against the rate (a cover of half a chunk or more): half-chunk
        // claims, as before.
        s.cover = Some(25);
        s.queued = 25;
        assert_eq!(next_claim(&b, LIMITS, s), NextClaim::Take(25));
    }

    #[test]
    fn free_plan_budget_of_45_leaves_room_for_claim_flush_retry_and_tail() {
        // After the due-schedules read and the reap (2): 43 left. 1 claim + k items
        // + 1 flush + 1 retry + 2 tail ≤ 43 → k = 38.
        let b = Budget::new(45);
        b.charge_call().unwrap();
        b.charge_call().unwrap();
        assert_eq!(next_claim(&b, LIMITS, state(0, 0)), NextClaim::Take(38));
        b.reserve(1, 38).unwrap();
        // 4 left: exactly the flush, its retry and the tail; no further claim.
        assert_eq!(b.free(), 4);
        assert_eq!(
            next_claim(&b, LIMITS, state(0, 1)),
            NextClaim::Stop(StopReason::Budget)
        );
        // The last flush goes out keeping the retry; if it fails, the retry fits.
        assert!(may_commit(&b, 0, RETRY_RESERVE));
        b.reserve(1, 0).unwrap();
        assert!(may_commit(&b, 0, 0));
    }

    #[test]
    fn reservations_count_against_the_next_claim() {
        // Held dispatches are as spent as made ones for planning.
        let b = Budget::new(100);
        b.reserve(0, 50).unwrap();
        // 50 free: 1 + k + 1 flush + 1 retry + 2 tail ≤ 50 → k = 45 of the chunk's 50.
        assert_eq!(next_claim(&b, LIMITS, state(0, 0)), NextClaim::Take(45));
    }

    #[test]
    fn the_plan_keeps_a_flush_per_lease_and_the_retry_until_it_is_spent() {
        let b = Budget::new(60);
        // Outcomes of two earlier claims outstanding (two flushes kept): 1 + k + 1
        // + 2 + 1 + 2 ≤ 60 → k = 53, capped by the chunk.
        assert_eq!(next_claim(&b, LIMITS, state(25, 2)), NextClaim::Take(50));
        let b = Budget::new(20);
        assert_eq!(next_claim(&b, LIMITS, state(25, 2)), NextClaim::Take(13));
        // Once the retry was sent, it is no longer kept.
        let spent = DrainState {
            retries: 0,
            ..state(25, 2)
        };
        assert_eq!(next_claim(&b, LIMITS, spent), NextClaim::Take(14));
    }

    #[test]
    fn the_smallest_budget_drains_an_item_after_a_full_firing_step() {
        assert_eq!(MIN_SUBREQUEST_BUDGET, 15);
        let b = Budget::new(MIN_SUBREQUEST_BUDGET);
        for _ in 0..FIRE_SUBREQUESTS + REAP_SUBREQUESTS {
            b.charge_call().unwrap();
        }
        let one = DrainLimits {
            claim_chunk: 1,
            ..LIMITS
        };
        assert_eq!(next_claim(&b, one, state(0, 0)), NextClaim::Take(1));
        // One subrequest less and the drain could not claim at all.
        b.charge_call().unwrap();
        assert!(matches!(
            next_claim(&b, one, state(0, 0)),
            NextClaim::Stop(_)
        ));
    }

    #[test]
    fn inline_items_that_cost_more_claim_fewer() {
        let b = Budget::new(45);
        let inline = DrainLimits {
            per_item_cost: 3,
            ..LIMITS
        };
        // 1 + 3k + 1 + 1 + 2 ≤ 45 → k = 13.
        assert_eq!(next_claim(&b, inline, state(0, 0)), NextClaim::Take(13));
    }

    #[test]
    fn the_deadline_shortens_the_line_then_stops_claims() {
        let b = Budget::new(10_000);
        let call = call_ms(LIMITS.job_timeout_ms);
        let at = |elapsed_ms: i64, in_flight: i64, queued: i64| {
            next_claim(
                &b,
                LIMITS,
                DrainState {
                    in_flight,
                    queued,
                    elapsed_ms,
                    ..state(0, 0)
                },
            )
        };
        // 50 s deadline less the wind-down, 12 s calls: with 3 call times left
        // (elapsed ≤ 12 s) the whole capacity of 75 fits; with 2, a line of 50;
        // with 1, of 25.
        assert_eq!(
            at((50_000 - WIND_DOWN_MS) - 3 * call, 25, 0),
            NextClaim::Take(50)
        );
        assert_eq!(
            at((50_000 - WIND_DOWN_MS) - 3 * call + 1, 25, 0),
            NextClaim::Take(25)
        );
        assert_eq!(
            at((50_000 - WIND_DOWN_MS) - 2 * call, 0, 0),
            NextClaim::Take(50)
        );
        assert_eq!(
            at((50_000 - WIND_DOWN_MS) - 2 * call, 25, 1),
            NextClaim::Hold
        );
        assert_eq!(
            at((50_000 - WIND_DOWN_MS) - call, 0, 0),
            NextClaim::Take(25)
        );
        assert_eq!(at((50_000 - WIND_DOWN_MS) - call, 1, 0), NextClaim::Hold);
        // Less than one call time left: not even an item that starts at once
        // could finish in time.
        assert_eq!(
            at((50_000 - WIND_DOWN_MS) - call + 1, 0, 0),
            NextClaim::Stop(StopReason::Deadline)
        );
    }

    #[test]
    fn a_line_shorter_than_half_a_chunk_is_claimed_whole() {
        let b = Budget::new(10_000);
        let big = DrainLimits {
            claim_chunk: 100,
            ..LIMITS
        };
        let mut s = state(0, 0);
        // One call time left: a line of 25, under half the chunk (50).
        s.elapsed_ms = (50_000 - WIND_DOWN_MS) - call_ms(big.job_timeout_ms);
        assert_eq!(next_claim(&b, big, s), NextClaim::Take(25));
        s.in_flight = 1;
        assert_eq!(next_claim(&b, big, s), NextClaim::Hold);
    }

    #[test]
    fn every_claimed_item_can_finish_by_the_deadline() {
        // Worst case: every call takes the full call time. Simulate the window in
        // whole call times; an item claimed at t in line position w must be done by
        // t + ceil(w / concurrency) call times, within the deadline less the wind-down.
        for (concurrency, chunk, deadline) in [
            (25, 50, 50_000),
            (25, 100, 50_000),
            (10, 35, 41_000),
            (3, 7, 100_000),
        ] {
            let limits = DrainLimits {
                concurrency,
                claim_chunk: chunk,
                deadline_ms: deadline,
                ..LIMITS
            };
            let call = call_ms(limits.job_timeout_ms);
            let b = Budget::new(1_000_000);
            let mut line: Vec<i64> = Vec::new(); // finish time of each item in line
            let mut now = 0;
            let mut claimed = 0;
            loop {
                line.retain(|&done| done > now);
                let running = line.len().min(concurrency as usize) as i64;
                let state = DrainState {
                    in_flight: running,
                    queued: line.len() as i64 - running,
                    elapsed_ms: now,
                    ..state(0, 0)
                };
                match next_claim(&b, limits, state) {
                    NextClaim::Take(k) => {
                        for _ in 0..k {
                            let w = line.len() as i64 + 1;
                            let done = now + (w + concurrency - 1) / concurrency * call;
                            assert!(done + WIND_DOWN_MS <= deadline, "{limits:?} at {now}");
                            line.push(done);
                        }
                        claimed += k;
                    }
                    NextClaim::Hold => now += call,
                    NextClaim::Stop(reason) => {
                        assert_eq!(reason, StopReason::Deadline);
                        break;
                    }
                }
            }
            assert!(claimed >= concurrency, "{limits:?} claimed {claimed}");
        }
    }

    #[test]
    fn the_shortest_deadline_allows_one_window() {
        let limits = DrainLimits {
            claim_chunk: 100,
            deadline_ms: crate::core::drain::timing::min_deadline_ms(10_000),
            ..LIMITS
        };
        assert_eq!(
            next_claim(&Budget::new(10_000), limits, state(0, 0)),
            NextClaim::Take(25)
        );
    }

    #[test]
    fn the_child_cap_shortens_claims_then_stops_them() {
        let b = Budget::new(10_000);
        let capped = DrainLimits {
            max_children: 31,
            ..LIMITS
        };
        let at = |children: i64, in_flight: i64| {
            let s = DrainState {
                in_flight,
                children,
                ..state(0, 0)
            };
            next_claim(&b, capped, s)
        };
        assert_eq!(at(0, 0), NextClaim::Take(31));
        // 6 left, under half a chunk: claimed whole, the window busy or not.
        assert_eq!(at(25, 25), NextClaim::Take(6));
        assert_eq!(at(31, 25), NextClaim::Stop(StopReason::ChildCap));
        assert_eq!(at(40, 0), NextClaim::Stop(StopReason::ChildCap));
    }

    #[test]
    fn a_short_claim_ends_the_drain() {
        let b = Budget::new(10_000);
        let mut s = state(0, 0);
        s.drained = true;
        assert_eq!(
            next_claim(&b, LIMITS, s),
            NextClaim::Stop(StopReason::Drained)
        );
    }

    #[test]
    fn a_commit_keeps_the_reserve_for_every_other_outcome() {
        let b = Budget::new(10);
        b.charge(5).unwrap();
        // 5 free: this commit 1 + one flush for the others + the retry + tail 2.
        assert!(may_commit(&b, 1, 1));
        b.charge(1).unwrap();
        assert!(!may_commit(&b, 1, 1));
        // A retry (no retry kept behind it) still fits; so does the last flush.
        assert!(may_commit(&b, 1, 0));
        assert!(may_commit(&b, 0, 1));
    }

    #[test]
    fn a_slow_d1_or_a_short_lease_shortens_the_line() {
        let b = Budget::new(10_000);
        let limits = DrainLimits {
            lease_ms: crate::core::drain::timing::min_lease_ms(10_000, 50, 25),
            ..LIMITS
        };
        // The smallest lease: 3 call times and 1 s, a full line of 75 with quick D1.
        assert_eq!(next_claim(&b, limits, state(0, 0)), NextClaim::Take(50));
        assert_eq!(next_claim(&b, limits, state(25, 0)), NextClaim::Take(50));
        // D1 at 1 s: the wind-down is 8.1 s, two call times fit in the lease.
        let slow = DrainState {
            wind_down_ms: crate::core::drain::timing::wind_down_ms(1_000, 25),
            ..state(25, 0)
        };
        assert_eq!(next_claim(&b, limits, slow), NextClaim::Take(25));
        // D1 so slow that not one call and its commits fit in the lease.
        let hopeless = DrainState {
            wind_down_ms: 30_000,
            ..state(0, 0)
        };
        assert_eq!(
            next_claim(&b, limits, hopeless),
            NextClaim::Stop(StopReason::Deadline)
        );
    }
}
