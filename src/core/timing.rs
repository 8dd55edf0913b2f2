//! The timing rules: how long one call may take, how long an item may wait between
//! its claim and its commit, and so how long leases and deadlines must be. Settings
//! validate against these rules, the drain's planner claims by them, and loadtest
//! sizes its leases with them.

/// Time the dispatcher allows on top of the job timeout for a child to answer.
pub const DISPATCH_GRACE_MS: i64 = 2_000;

/// Wall time kept back after the last child can answer, for the final flush.
pub const WIND_DOWN_MS: i64 = 1_000;

/// The longest one call can take before the dispatcher abandons it: the job's own
/// timeout plus the grace for the child's answer to come back.
pub fn call_ms(job_timeout_ms: i64) -> i64 {
    job_timeout_ms + DISPATCH_GRACE_MS
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
    call_rounds(claim_chunk, concurrency) * call_ms(job_timeout_ms) + WIND_DOWN_MS
}

/// The shortest deadline that allows a claim at all: one call time for items that
/// start at once, plus the wind-down.
pub fn min_deadline_ms(job_timeout_ms: i64) -> i64 {
    call_ms(job_timeout_ms) + WIND_DOWN_MS
}

/// The longest line of items (running, queued and being claimed) whose last item
/// still finishes, and is committed, by the deadline. All running calls end within
/// one call time, and so does each of the next `concurrency` starts, so the w-th
/// item in line is done within ⌈w / concurrency⌉ call times: a line of
/// `rounds × concurrency` items fits in `rounds` call times.
pub fn line_allowed(
    elapsed_ms: i64,
    deadline_ms: i64,
    job_timeout_ms: i64,
    concurrency: i64,
) -> i64 {
    let left = deadline_ms - elapsed_ms - WIND_DOWN_MS;
    (left.max(0) / call_ms(job_timeout_ms)) * concurrency
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_rounds_and_lease_follow_the_queue_depth() {
        assert_eq!(call_rounds(50, 25), 3);
        assert_eq!(call_rounds(25, 25), 2);
        assert_eq!(call_rounds(26, 25), 3);
        assert_eq!(call_rounds(1, 100), 2);
        // 3 × (10 s + 2 s) + 1 s.
        assert_eq!(min_lease_ms(10_000, 50, 25), 37_000);
        // Defaults (chunk 100 behind 25 slots): 5 × 12 s + 1 s.
        assert_eq!(min_lease_ms(10_000, 100, 25), 61_000);
    }

    #[test]
    fn the_line_shrinks_by_a_window_per_call_time() {
        // 50 s deadline, 12 s calls, 1 s wind-down: 4 call times fit at the start.
        assert_eq!(line_allowed(0, 50_000, 10_000, 25), 100);
        assert_eq!(line_allowed(1_000, 50_000, 10_000, 25), 100);
        assert_eq!(line_allowed(1_001, 50_000, 10_000, 25), 75);
        assert_eq!(line_allowed(25_001, 50_000, 10_000, 25), 25);
        assert_eq!(line_allowed(37_000, 50_000, 10_000, 25), 25);
        assert_eq!(line_allowed(37_001, 50_000, 10_000, 25), 0);
        assert_eq!(line_allowed(90_000, 50_000, 10_000, 25), 0);
    }

    #[test]
    fn min_deadline_allows_exactly_one_window() {
        assert_eq!(min_deadline_ms(10_000), 13_000);
        assert_eq!(line_allowed(0, 13_000, 10_000, 25), 25);
        assert_eq!(line_allowed(1, 13_000, 10_000, 25), 0);
    }
}
