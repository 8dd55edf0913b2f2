//! When a dispatch gets its own abandon-timer, and when it shares one.
//!
//! The runtime caps the timers alive in one invocation: workerd's
//! `IoContext::TimeoutManagerImpl` refuses the 10,001st with "You have exceeded
//! the number of active timeouts you may set". An `AbortSignal.timeout` per
//! dispatch stays alive for its whole limit even after the call answered, so a
//! drain dispatching faster than 10,000 / limit calls per second (833/s with the
//! default 12 s limit) crashed the invocation — reproduced locally with 12,000
//! no-op items (docs/benchmarks/history-2026-11-21.md, round 4). Dispatches started within one cohort window
//! share one timer instead, which bounds the live timers by the limit alone.
//! The drain's dispatches and `POST /probe`'s calls through SELF share timers so.

/// Dispatches started within this many ms of a watchdog timer's creation share it.
pub const COHORT_MS: i64 = 250;

/// workerd's limit on timers alive at once in one invocation (`MAX_TIMEOUTS`).
pub const RUNTIME_MAX_TIMERS: i64 = 10_000;

/// Whether a dispatch starting at `now` needs a new watchdog timer, given when the
/// current one (if any) was created. A shared timer fires `limit` after its
/// creation, so every dispatch it guards is abandoned between `limit - COHORT_MS`
/// and `limit` after it started: never later than its own limit.
pub fn needs_new_timer(current_created_at: Option<i64>, now: i64) -> bool {
    match current_created_at {
        Some(created) => now - created >= COHORT_MS || now < created,
        None => true,
    }
}

/// The cohorts of one invocation's dispatches: when the current one started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cohorts {
    since: Option<i64>,
}

impl Cohorts {
    /// Whether a dispatch starting at `now` needs a new timer
    /// ([`needs_new_timer`]); if so, it starts the current cohort.
    pub fn start(&mut self, now: i64) -> bool {
        let new = needs_new_timer(self.since, now);
        if new {
            self.since = Some(now);
        }
        new
    }
}

/// Most watchdog timers alive at once: one per cohort window within a limit.
pub fn max_live_timers(limit_ms: i64) -> i64 {
    limit_ms / COHORT_MS + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::drain::timing::DISPATCH_GRACE_MS;

    #[test]
    fn a_cohort_shares_one_timer() {
        assert!(needs_new_timer(None, 1_000));
        assert!(!needs_new_timer(Some(1_000), 1_000));
        assert!(!needs_new_timer(Some(1_000), 1_000 + COHORT_MS - 1));
        assert!(needs_new_timer(Some(1_000), 1_000 + COHORT_MS));
        // A clock that went backwards starts a fresh cohort rather than stretching one.
        assert!(needs_new_timer(Some(1_000), 999));
    }

    #[test]
    fn a_burst_of_dispatches_creates_timers_by_time_not_by_count() {
        // 100,000 dispatches in 10 s: one timer per cohort window.
        let mut current = None;
        let mut created = 0;
        for i in 0..100_000i64 {
            let now = i / 10; // 10 dispatches per ms
            if needs_new_timer(current, now) {
                current = Some(now);
                created += 1;
            }
        }
        assert_eq!(created, 10_000 / COHORT_MS);
    }

    /// The most timers alive at once when the calls start at `starts` (ms, in
    /// order) and each lives `limit`: with one per call, or one per cohort.
    fn most_alive(starts: &[i64], limit: i64, per_cohort: bool) -> i64 {
        let mut cohorts = Cohorts::default();
        let created: Vec<i64> = starts
            .iter()
            .copied()
            .filter(|&now| !per_cohort || cohorts.start(now))
            .collect();
        created
            .iter()
            .enumerate()
            .map(|(i, &at)| (i - created.partition_point(|&t| t <= at - limit) + 1) as i64)
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn thousands_of_probe_calls_through_self_keep_the_live_timers_bounded() {
        // POST /probe mode service via self: 12,000 calls (the documented crash
        // was 10,001 timers in one limit), at the rates measured locally through
        // SELF (~400/s) and straight (~1,100/s), and all at once; the longest
        // allowed JOB_TIMEOUT_MS.
        let limit = 900_000 + DISPATCH_GRACE_MS;
        for per_second in [400, 1_100, 1_000_000] {
            let starts: Vec<i64> = (0..12_000).map(|i| i * 1_000 / per_second).collect();
            assert!(
                most_alive(&starts, limit, false) > RUNTIME_MAX_TIMERS,
                "a timer per call would pass the cap at {per_second}/s"
            );
            let alive = most_alive(&starts, limit, true);
            assert!(alive <= max_live_timers(limit), "{per_second}/s: {alive}");
            assert!(
                alive <= 12_000 * 1_000 / per_second / COHORT_MS + 1,
                "{alive}"
            );
        }
    }

    #[test]
    fn the_longest_allowed_job_stays_far_below_the_runtime_cap() {
        // JOB_TIMEOUT_MS is at most 900,000 (settings); a per-dispatch timer would
        // allow only 10,000 calls in such a window.
        let limit = 900_000 + DISPATCH_GRACE_MS;
        assert_eq!(max_live_timers(limit), 3_609);
        assert!(max_live_timers(limit) < RUNTIME_MAX_TIMERS / 2);
    }
}
