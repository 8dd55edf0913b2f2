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
/// for one. Leases are sized from this.
pub fn call_rounds(claim_chunk: i64, concurrency: i64) -> i64 {
    (claim_chunk + concurrency - 1) / concurrency.max(1) + 1
}

/// The shortest lease that can never expire under a live item (see `call_rounds`),
/// including the wait for its group commit.
pub fn min_lease_ms(job_timeout_ms: i64, claim_chunk: i64, concurrency: i64) -> i64 {
    call_rounds(claim_chunk, concurrency) * (job_timeout_ms + DISPATCH_GRACE_MS) + WIND_DOWN_MS
}

/// Fewest items worth a claim statement: half a chunk. Claiming one item per freed
/// slot would cost one statement per item, the very cost claims amortise.
pub fn refill_at(claim_chunk: i64) -> i64 {
    (claim_chunk / 2).max(1)
}

/// The longest line of items (running, queued and being claimed) whose last item
/// still finishes, and is committed, by the deadline. All running calls end within
/// one call time, and so does each of the next `concurrency` starts, so the w-th
/// item in line is done within ⌈w / concurrency⌉ call times: a line of
/// `rounds × concurrency` items fits in `rounds` call times.
pub fn line_allowed(limits: DrainLimits, elapsed_ms: i64) -> i64 {
    let call_ms = limits.job_timeout_ms + DISPATCH_GRACE_MS;
    let left = limits.deadline_ms - elapsed_ms - WIND_DOWN_MS;
    (left.max(0) / call_ms) * limits.concurrency
}

/// The shortest deadline that allows a claim at all: one call time for items that
/// start at once, plus the wind-down.
pub fn min_deadline_ms(job_timeout_ms: i64) -> i64 {
    job_timeout_ms + DISPATCH_GRACE_MS + WIND_DOWN_MS
}

/// Decide the next claim. Claims run up to a chunk ahead of the window: as soon as
/// half a chunk fits (running + queued ≤ concurrency + chunk), so the window never
/// runs dry while a claim is on its D1 round trip, and each claim takes many rows.
/// Measured: claiming only once the queue was empty left the window under-full
/// during every claim and cost about 15 % of fan-out throughput (docs/benchmarks.md).
///
/// The deadline shortens the line instead of ending the claims early: an item is
/// claimed only if it can wait, run and be committed before the deadline
/// (`line_allowed`). A line shorter than half a chunk is claimed only once it is
/// all free (it is a whole number of windows), so claims stay at least half a chunk
/// or one window long.
pub fn next_claim(budget: &Budget, limits: DrainLimits, state: DrainState) -> NextClaim {
    if state.drained {
        return NextClaim::Stop(StopReason::Drained);
    }
    let line =
        (limits.concurrency + limits.claim_chunk).min(line_allowed(limits, state.elapsed_ms));
    if line == 0 {
        // Not even an item that starts at once could finish; it only gets later.
        return NextClaim::Stop(StopReason::Deadline);
    }
    let free = line - state.in_flight - state.queued;
    if free < refill_at(limits.claim_chunk).min(line) {
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
    fn the_deadline_shortens_the_line_then_stops_claims() {
        let b = Budget::new(10_000);
        let call = LIMITS.job_timeout_ms + DISPATCH_GRACE_MS;
        let at = |elapsed_ms: i64, in_flight: i64, queued: i64| {
            next_claim(
                &b,
                LIMITS,
                DrainState {
                    in_flight,
                    queued,
                    buffered: 0,
                    elapsed_ms,
                    drained: false,
                },
            )
        };
        // 50 s deadline, 12 s calls: with 3 call times left (elapsed ≤ 13 s) the
        // whole capacity of 75 fits; with 2, a line of 50; with 1, of 25.
        assert_eq!(at(49_000 - 3 * call, 25, 0), NextClaim::Take(50));
        assert_eq!(at(49_000 - 3 * call + 1, 25, 0), NextClaim::Take(25));
        assert_eq!(at(49_000 - 2 * call, 0, 0), NextClaim::Take(50));
        assert_eq!(at(49_000 - 2 * call, 25, 1), NextClaim::Hold);
        assert_eq!(at(49_000 - call, 0, 0), NextClaim::Take(25));
        assert_eq!(at(49_000 - call, 1, 0), NextClaim::Hold);
        // Less than one call time left: not even an item that starts at once
        // could finish in time.
        assert_eq!(
            at(49_000 - call + 1, 0, 0),
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
        let call = big.job_timeout_ms + DISPATCH_GRACE_MS;
        let mut s = state(0, 0);
        // One call time left: a line of 25, under half the chunk (50).
        s.elapsed_ms = 49_000 - call;
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
            let call = limits.job_timeout_ms + DISPATCH_GRACE_MS;
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
                    buffered: 0,
                    elapsed_ms: now,
                    drained: false,
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
    fn min_deadline_allows_one_claim() {
        assert_eq!(min_deadline_ms(10_000), 13_000);
        let limits = DrainLimits {
            claim_chunk: 100,
            deadline_ms: 13_000,
            ..LIMITS
        };
        assert_eq!(line_allowed(limits, 0), 25);
        assert_eq!(
            next_claim(&Budget::new(10_000), limits, state(0, 0)),
            NextClaim::Take(25)
        );
        assert_eq!(line_allowed(limits, 1), 0);
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
