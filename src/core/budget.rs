//! Per-invocation budget: subrequests and wall time. Locally nothing enforces
//! Cloudflare's limits, so this accounting is what keeps production safe
//! (invariant 7: an invocation never exceeds its subrequest budget or deadline).

use super::settings::DISPATCH_GRACE_MS;

/// Most outcomes one group-commit statement carries, which bounds its size
/// (about 150 bytes each, far below D1's statement and value limits).
pub const FLUSH_MAX_ROWS: i64 = 500;

/// Subrequests kept back for the end of every drain: mark finished batches and
/// record the invocation summary.
pub const TAIL_SUBREQUESTS: i64 = 2;

/// Wall time kept back after the last child can answer, for the final flush.
pub const WIND_DOWN_MS: i64 = 1_000;

/// Subrequests counted against a fixed limit. `spend` refuses to go over, so a
/// planning bug shows up as an error instead of a platform failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    limit: i64,
    used: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    pub limit: i64,
    pub used: i64,
    pub wanted: i64,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "subrequest budget exceeded: {} used of {}, {} more wanted",
            self.used, self.limit, self.wanted
        )
    }
}

impl Budget {
    pub fn new(limit: i64) -> Budget {
        Budget { limit, used: 0 }
    }

    pub fn limit(&self) -> i64 {
        self.limit
    }

    pub fn used(&self) -> i64 {
        self.used
    }

    pub fn remaining(&self) -> i64 {
        self.limit - self.used
    }

    /// Give back part of an earlier `spend` that was not used (a claim that came
    /// back with fewer rows than it paid for).
    pub fn refund(&mut self, n: i64) {
        self.used -= n.clamp(0, self.used);
    }

    pub fn spend(&mut self, n: i64) -> Result<(), OverBudget> {
        if n > self.remaining() {
            return Err(OverBudget {
                limit: self.limit,
                used: self.used,
                wanted: n,
            });
        }
        self.used += n;
        Ok(())
    }
}

/// Flush statements needed to commit `outstanding` outcomes.
pub fn flush_reserve(outstanding: i64) -> i64 {
    (outstanding + FLUSH_MAX_ROWS - 1).max(0) / FLUSH_MAX_ROWS
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
}

/// Where a drain is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainState {
    /// Items running now (at most the concurrency).
    pub in_flight: i64,
    /// Claimed items waiting for a free slot.
    pub queued: i64,
    /// Outcomes known but not yet committed.
    pub buffered: i64,
    pub elapsed_ms: i64,
    /// A claim came back short: nothing else is due right now.
    pub drained: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Drained,
    Budget,
    Deadline,
    /// A claim failed; what was running was still committed.
    Error,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Drained => "drained",
            StopReason::Budget => "budget",
            StopReason::Deadline => "deadline",
            StopReason::Error => "error",
        }
    }
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

/// Call times an item may spend between its claim and its outcome: it waits
/// behind at most `claim_chunk` queued items — `concurrency` slots each free up
/// within one call time, so that takes ⌈chunk / concurrency⌉ call times — then runs
/// for one. Leases and the claim deadline are sized from this.
pub fn call_rounds(claim_chunk: i64, concurrency: i64) -> i64 {
    (claim_chunk + concurrency - 1) / concurrency.max(1) + 1
}

/// The shortest lease that can never expire under a live item (see `call_rounds`),
/// including the wait for its group commit.
pub fn min_lease_ms(job_timeout_ms: i64, claim_chunk: i64, concurrency: i64) -> i64 {
    call_rounds(claim_chunk, concurrency) * (job_timeout_ms + DISPATCH_GRACE_MS) + WIND_DOWN_MS
}

/// Decide the next claim. Claims run up to a chunk ahead of the window: as soon as
/// half a chunk fits (running + queued ≤ concurrency + chunk), so the window never
/// runs dry while a claim is on its D1 round trip, and each claim takes many rows.
/// Measured: claiming only once the queue was empty left the window under-full
/// during every claim and cost about 15 % of fan-out throughput (docs/benchmarks.md).
pub fn next_claim(budget: &Budget, limits: DrainLimits, state: DrainState) -> NextClaim {
    if state.drained {
        return NextClaim::Stop(StopReason::Drained);
    }
    // An item claimed now must be able to wait, run and be committed before the
    // deadline.
    let call_ms = limits.job_timeout_ms + DISPATCH_GRACE_MS;
    let latest_claim = limits.deadline_ms
        - call_rounds(limits.claim_chunk, limits.concurrency) * call_ms
        - WIND_DOWN_MS;
    if state.elapsed_ms >= latest_claim {
        return NextClaim::Stop(StopReason::Deadline);
    }
    let capacity = limits.concurrency + limits.claim_chunk;
    let free = capacity - state.in_flight - state.queued;
    // Claim at least half a chunk at a time: claiming one item per freed slot
    // would cost one statement per item, the very cost we amortise.
    let refill_at = (limits.claim_chunk / 2).max(1);
    if free < refill_at {
        return NextClaim::Hold;
    }
    let outstanding = state.in_flight + state.queued + state.buffered;
    let mut k = free.min(limits.claim_chunk);
    let affordable = |k: i64| {
        1 + k * limits.per_item_cost + flush_reserve(outstanding + k) + TAIL_SUBREQUESTS
            <= budget.remaining()
    };
    while k > 0 && !affordable(k) {
        k -= 1;
    }
    if k == 0 {
        // Nothing affordable now; finishing in-flight calls never frees budget.
        return NextClaim::Stop(StopReason::Budget);
    }
    NextClaim::Take(k)
}

/// Whether an early (timer or chunk) flush of `buffered` outcomes fits the budget
/// while keeping enough to commit the `unfinished` items (claimed, no outcome yet)
/// and for the tail.
pub fn may_flush(budget: &Budget, unfinished: i64, buffered: i64) -> bool {
    buffered > 0 && 1 + flush_reserve(unfinished) + TAIL_SUBREQUESTS <= budget.remaining()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: DrainLimits = DrainLimits {
        concurrency: 25,
        claim_chunk: 50,
        per_item_cost: 1,
        job_timeout_ms: 10_000,
        deadline_ms: 50_000,
    };

    fn state(in_flight: i64, buffered: i64) -> DrainState {
        DrainState {
            in_flight,
            queued: 0,
            buffered,
            elapsed_ms: 0,
            drained: false,
        }
    }

    #[test]
    fn spend_refuses_to_exceed_the_limit() {
        let mut b = Budget::new(3);
        assert!(b.spend(2).is_ok());
        let err = b.spend(2).unwrap_err();
        assert_eq!(
            err,
            OverBudget {
                limit: 3,
                used: 2,
                wanted: 2
            }
        );
        assert_eq!(b.used(), 2);
        assert!(b.spend(1).is_ok());
        assert_eq!(b.remaining(), 0);
    }

    #[test]
    fn refund_returns_unused_spending_but_never_below_zero() {
        let mut b = Budget::new(10);
        b.spend(8).unwrap();
        b.refund(3);
        assert_eq!(b.used(), 5);
        b.refund(50);
        assert_eq!(b.used(), 0);
        b.refund(-4);
        assert_eq!(b.used(), 0);
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
    fn call_rounds_and_lease_follow_the_queue_depth() {
        assert_eq!(call_rounds(50, 25), 3);
        assert_eq!(call_rounds(25, 25), 2);
        assert_eq!(call_rounds(26, 25), 3);
        assert_eq!(call_rounds(1, 100), 2);
        // Defaults: 3 × (10 s + 2 s) + 1 s.
        assert_eq!(min_lease_ms(10_000, 50, 25), 37_000);
    }

    #[test]
    fn free_plan_budget_of_45_leaves_room_for_claim_flush_and_tail() {
        // After reap (1): 44 left. 1 claim + k items + 1 flush + 2 tail ≤ 44 → k = 40.
        let mut b = Budget::new(45);
        b.spend(1).unwrap();
        assert_eq!(next_claim(&b, LIMITS, state(0, 0)), NextClaim::Take(40));
        b.spend(1 + 40).unwrap();
        // 3 left: exactly the flush and the tail; no further claim.
        assert_eq!(
            next_claim(&b, LIMITS, state(0, 40)),
            NextClaim::Stop(StopReason::Budget)
        );
    }

    #[test]
    fn the_whole_drain_never_exceeds_the_budget() {
        // Simulate a drain where every call finishes at once, for many budgets.
        for limit in 5..200 {
            let mut b = Budget::new(limit);
            b.spend(1).unwrap(); // the reaper
            let mut outstanding = 0;
            loop {
                match next_claim(&b, LIMITS, state(0, outstanding)) {
                    NextClaim::Take(k) => {
                        b.spend(1 + k).unwrap();
                        outstanding += k;
                        if may_flush(&b, 0, outstanding) {
                            b.spend(1).unwrap();
                            outstanding = 0;
                        }
                    }
                    NextClaim::Hold => unreachable!("nothing in flight"),
                    NextClaim::Stop(reason) => {
                        assert_eq!(reason, StopReason::Budget);
                        break;
                    }
                }
            }
            b.spend(flush_reserve(outstanding) + TAIL_SUBREQUESTS)
                .unwrap();
            assert!(b.used() <= limit);
        }
    }

    #[test]
    fn inline_items_that_cost_more_claim_fewer() {
        let b = Budget::new(45);
        let inline = DrainLimits {
            per_item_cost: 3,
            ..LIMITS
        };
        // 1 + 3k + 1 + 2 ≤ 45 → k = 13.
        assert_eq!(next_claim(&b, inline, state(0, 0)), NextClaim::Take(13));
    }

    #[test]
    fn stops_claiming_when_a_call_could_outlive_the_deadline() {
        let b = Budget::new(10_000);
        let latest =
            LIMITS.deadline_ms - 3 * (LIMITS.job_timeout_ms + DISPATCH_GRACE_MS) - WIND_DOWN_MS;
        let mut s = state(0, 0);
        s.elapsed_ms = latest - 1;
        assert_eq!(next_claim(&b, LIMITS, s), NextClaim::Take(50));
        s.elapsed_ms = latest;
        assert_eq!(
            next_claim(&b, LIMITS, s),
            NextClaim::Stop(StopReason::Deadline)
        );
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
    fn early_flush_keeps_the_reserve() {
        let mut b = Budget::new(10);
        b.spend(6).unwrap();
        // 4 left: flush 1 + reserve for 3 in flight (1) + tail 2 = 4.
        assert!(may_flush(&b, 3, 5));
        b.spend(1).unwrap();
        assert!(!may_flush(&b, 3, 5));
        assert!(!may_flush(&Budget::new(100), 3, 0));
    }
}
