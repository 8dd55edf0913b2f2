//! The timing rules: how long one call may take, how long an item may wait between
//! its claim and its commit, and so how long leases and deadlines must be. Settings
//! validate against these rules, the drain's planner claims by them, and loadtest
//! sizes its leases with them.
//!
//! Two kinds of rule. The static ones (`min_lease_ms`, `min_deadline_ms`) know no
//! D1 round trip and keep [`WIND_DOWN_MS`] for them. The drain's own rules
//! (`wind_down_ms`, `commit_allowance_ms`) use the slowest D1 round trip it has
//! seen in the invocation, so a slow D1 (the single writer busy with a daily
//! `INSERT … SELECT`) shortens the line and holds items back instead of letting a
//! lease expire under a live item or the deadline pass.

/// Most outcomes one group-commit statement carries, which bounds its size
/// (about 150 bytes each, far below D1's statement and value limits).
pub const FLUSH_MAX_ROWS: i64 = 500;

/// Flush statements needed to commit `outstanding` outcomes.
pub fn flush_reserve(outstanding: i64) -> i64 {
    (outstanding + FLUSH_MAX_ROWS - 1).max(0) / FLUSH_MAX_ROWS
}

/// Time the dispatcher allows on top of the job timeout for a child to answer.
pub const DISPATCH_GRACE_MS: i64 = 2_000;

/// Wall time kept for the D1 round trips around an item's calls (its claim
/// before, its group commit after) until the drain has seen D1: what the minimum
/// lease and the minimum deadline add to the call times, and the least the drain
/// keeps whatever it sees.
pub const WIND_DOWN_MS: i64 = 2_000;

/// Group-commit interval: an outcome waits at most this long (plus a running
/// commit) before its commit starts; a commit also starts once FLUSH_MAX_ROWS are
/// waiting, and at once when nothing else runs. One commit per second rather than
/// per 100 ms carries ten times the outcomes of a slow stream (webhooks at a few
/// hundred items a second), and the batches' counter row per flush with it: the
/// webhook scenario's 0.094 D1 statements per item became 0.041 at 2,000 items,
/// 0.027 at 10,000 (docs/benchmarks/history-2026-11-24-27.md, Round 10).
pub const FLUSH_INTERVAL_MS: i64 = 1_000;

/// The safety margin on D1 round trips: the drain's rules cover calls up to this
/// many times slower than the slowest one seen so far in the invocation. An
/// assumption (production D1's variation is not measured here); the host
/// simulation checks the rules hold for a D1 within it.
pub const ROUND_TRIP_MARGIN: i64 = 2;

/// The longest one call can take before the dispatcher abandons it: the job's own
/// timeout plus the grace for the child's answer to come back.
pub fn call_ms(job_timeout_ms: i64) -> i64 {
    job_timeout_ms + DISPATCH_GRACE_MS
}

/// How much sooner than the job's timeout a multi-channel item gives up on a
/// channel that has not answered, so the run returns every channel's result
/// (a late channel as timed out) before the job-level timer fires and throws
/// them all away (`channel_deadline_ms`).
pub const CHANNEL_MARGIN_MS: i64 = 500;

/// How long one channel of a multi-channel item may take: `JOB_TIMEOUT_MS` less
/// [`CHANNEL_MARGIN_MS`], but never less than three quarters of it (short
/// timeouts keep most of their time and still end a quarter early), and at least
/// 1 ms. The job-level timeout stays the backstop.
pub fn channel_deadline_ms(job_timeout_ms: i64) -> i64 {
    (job_timeout_ms - CHANNEL_MARGIN_MS)
        .max(job_timeout_ms * 3 / 4)
        .max(1)
}

/// Call times an item may spend between its claim and its outcome: it waits
/// behind at most `claim_chunk` queued items — `concurrency` slots each free up
/// within one call time, so that takes ⌈chunk / concurrency⌉ call times — then runs
/// for one. Leases are sized from this.
pub fn call_rounds(claim_chunk: i64, concurrency: i64) -> i64 {
    (claim_chunk + concurrency - 1) / concurrency.max(1) + 1
}

/// The shortest lease that can never expire under a live item (see `call_rounds`),
/// including the wind-down for D1 round trips.
pub fn min_lease_ms(job_timeout_ms: i64, claim_chunk: i64, concurrency: i64) -> i64 {
    call_rounds(claim_chunk, concurrency) * call_ms(job_timeout_ms) + WIND_DOWN_MS
}

/// The shortest deadline that allows a claim at all: one call time for items that
/// start at once, plus the wind-down.
pub fn min_deadline_ms(job_timeout_ms: i64) -> i64 {
    call_ms(job_timeout_ms) + WIND_DOWN_MS
}

/// Commit statements an outcome may wait for, from the moment it is known to its
/// commit landing: one already running, the flushes of a whole window of outcomes
/// that ended together (⌈concurrency / 500⌉), and a retry of its own.
pub fn commit_round_trips(concurrency: i64) -> i64 {
    2 + flush_reserve(concurrency.max(1))
}

/// How long an outcome, once known, may take to be committed with D1 round trips
/// of up to `d1_ms` (with the margin): the flush interval, then
/// `commit_round_trips`. The drain dispatches an item only if its call and this
/// still end before its lease expires and before the deadline, and starts a
/// waiting outcome's commit this long before its lease expires at the latest.
pub fn commit_allowance_ms(d1_ms: i64, concurrency: i64) -> i64 {
    FLUSH_INTERVAL_MS + ROUND_TRIP_MARGIN * commit_round_trips(concurrency) * d1_ms
}

/// What the items of a claim sent now need besides their call times: the claim's
/// own round trip and the commit allowance (margins included), never less than
/// [`WIND_DOWN_MS`]. With D1 round trips up to about 125 ms (a window of at most
/// 500) this is the static 2 s.
pub fn wind_down_ms(d1_ms: i64, concurrency: i64) -> i64 {
    WIND_DOWN_MS.max(ROUND_TRIP_MARGIN * d1_ms + commit_allowance_ms(d1_ms, concurrency))
}

/// The longest line of items (running, queued and being claimed) whose last item
/// still finishes and is committed, `wind_down_ms` included, both before the
/// deadline and before the lease of a claim sent now expires. All running calls
/// end within one call time, and so does each of the next `concurrency` starts, so
/// the w-th item in line is done within ⌈w / concurrency⌉ call times: a line of
/// `rounds × concurrency` items fits in `rounds` call times.
pub fn line_allowed(
    elapsed_ms: i64,
    deadline_ms: i64,
    lease_ms: i64,
    wind_down_ms: i64,
    job_timeout_ms: i64,
    concurrency: i64,
) -> i64 {
    let left = (deadline_ms - elapsed_ms).min(lease_ms) - wind_down_ms;
    (left.max(0) / call_ms(job_timeout_ms)) * concurrency
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lease that never binds before the deadline does.
    const LONG_LEASE: i64 = 3_600_000;

    #[test]
    fn a_channel_gives_up_before_its_job_does() {
        assert_eq!(channel_deadline_ms(10_000), 9_500);
        assert_eq!(channel_deadline_ms(900_000), 899_500);
        assert_eq!(channel_deadline_ms(2_000), 1_500);
        // Short timeouts: three quarters, never the whole job's time or nothing.
        assert_eq!(channel_deadline_ms(1_000), 750);
        assert_eq!(channel_deadline_ms(4), 3);
        assert_eq!(channel_deadline_ms(1), 1);
        for t in 2..3_000 {
            let d = channel_deadline_ms(t);
            assert!(d >= 1 && d < t && d >= t * 3 / 4, "{t}: {d}");
        }
    }

    #[test]
    fn call_rounds_and_lease_follow_the_queue_depth() {
        assert_eq!(call_rounds(50, 25), 3);
        assert_eq!(call_rounds(25, 25), 2);
        assert_eq!(call_rounds(26, 25), 3);
        assert_eq!(call_rounds(1, 100), 2);
        // 3 × (10 s + 2 s) + 2 s.
        assert_eq!(min_lease_ms(10_000, 50, 25), 38_000);
        // Defaults (chunk 100 behind 25 slots): 5 × 12 s + 2 s.
        assert_eq!(min_lease_ms(10_000, 100, 25), 62_000);
    }

    #[test]
    fn the_line_shrinks_by_a_window_per_call_time() {
        // 50 s deadline, 12 s calls, 1 s wind-down: 4 call times fit at the start.
        let line = |elapsed| line_allowed(elapsed, 50_000, LONG_LEASE, 1_000, 10_000, 25);
        assert_eq!(line(0), 100);
        assert_eq!(line(1_000), 100);
        assert_eq!(line(1_001), 75);
        assert_eq!(line(25_001), 25);
        assert_eq!(line(37_000), 25);
        assert_eq!(line(37_001), 0);
        assert_eq!(line(90_000), 0);
    }

    #[test]
    fn min_deadline_allows_exactly_one_window() {
        assert_eq!(min_deadline_ms(10_000), 14_000);
        let line = |elapsed| line_allowed(elapsed, 14_000, LONG_LEASE, 2_000, 10_000, 25);
        assert_eq!(line(0), 25);
        assert_eq!(line(1), 0);
    }

    #[test]
    fn quick_d1_keeps_the_static_wind_down() {
        assert_eq!(wind_down_ms(0, 25), WIND_DOWN_MS);
        // 2 × 125 (claim) + 1,000 + 2 × 3 × 125 (commits) = 2,000 ms.
        assert_eq!(commit_round_trips(25), 3);
        assert_eq!(wind_down_ms(125, 25), WIND_DOWN_MS);
        assert_eq!(wind_down_ms(150, 25), 300 + 1_000 + 900);
        // A window of 600 outcomes ending together takes two flushes.
        assert_eq!(commit_round_trips(600), 4);
        assert_eq!(commit_allowance_ms(10, 600), 1_000 + 2 * 4 * 10);
    }

    #[test]
    fn a_slow_d1_shortens_the_line_by_the_deadline() {
        // D1 at 2 s: 4 s for the claim, 1 s + 12 s for the commits.
        let wind_down = wind_down_ms(2_000, 25);
        assert_eq!(wind_down, 17_000);
        // 50 s deadline, 12 s calls: 2 call times fit at the start, not 4.
        assert_eq!(
            line_allowed(0, 50_000, LONG_LEASE, wind_down, 10_000, 25),
            50
        );
        assert_eq!(
            line_allowed(9_901, 50_000, LONG_LEASE, wind_down, 10_000, 25),
            25
        );
    }

    #[test]
    fn the_line_also_fits_the_lease_of_the_claim() {
        // Defaults at the smallest lease: 5 call times and the 1 s wind-down, so
        // with quick D1 a full line of chunk 100 + 25 running fits...
        let lease = min_lease_ms(10_000, 100, 25);
        assert_eq!(line_allowed(0, 900_000, lease, 1_000, 10_000, 25), 125);
        // ...and with D1 at 2 s only 3 call times do (61 s − 16.1 s).
        let slow = wind_down_ms(2_000, 25);
        assert_eq!(line_allowed(0, 900_000, lease, slow, 10_000, 25), 75);
        // Late in a long invocation the lease, not the deadline, still binds.
        assert_eq!(
            line_allowed(600_000, 900_000, lease, 1_000, 10_000, 25),
            125
        );
    }
}
