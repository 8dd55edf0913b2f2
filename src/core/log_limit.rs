//! How many log lines a stream of events may write. Anyone on the network can
//! send `POST /internal/run` with a bad signature; a line per rejection would let
//! them fill the Worker's log (and its log bill) at will. A [`LogLimit`] lets the
//! first few of each window through and counts the rest, and the next line written
//! says how many were left out. Pure: the caller passes the time and keeps one per
//! isolate.

/// Lines per window and the window's length: enough to see an attack and its
/// reasons, few enough that it cannot flood the log.
pub const REJECTED_DISPATCH_LINES: u32 = 10;
pub const REJECTED_DISPATCH_WINDOW_MS: i64 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLimit {
    per_window: u32,
    window_ms: i64,
    window_start: Option<i64>,
    written: u32,
    suppressed: u64,
}

/// What to do with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogDecision {
    /// Write its line, saying that `suppressed` lines were left out since the last
    /// one written.
    Write { suppressed: u64 },
    /// Leave it out (counted).
    Suppress,
}

impl LogLimit {
    pub const fn new(per_window: u32, window_ms: i64) -> LogLimit {
        LogLimit {
            per_window,
            window_ms,
            window_start: None,
            written: 0,
            suppressed: 0,
        }
    }

    /// The limit for rejected dispatches.
    pub const fn rejected_dispatches() -> LogLimit {
        LogLimit::new(REJECTED_DISPATCH_LINES, REJECTED_DISPATCH_WINDOW_MS)
    }

    /// Decide for an event at `now_ms`. Windows are fixed and start with the first
    /// event after the previous one ended; a clock that goes back stays in the
    /// current window.
    pub fn decide(&mut self, now_ms: i64) -> LogDecision {
        let expired = self
            .window_start
            .is_none_or(|start| now_ms.saturating_sub(start) >= self.window_ms);
        if expired {
            self.window_start = Some(now_ms);
            self.written = 0;
        }
        if self.written < self.per_window {
            self.written += 1;
            LogDecision::Write {
                suppressed: std::mem::take(&mut self.suppressed),
            }
        } else {
            self.suppressed += 1;
            LogDecision::Suppress
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(limit: &mut LogLimit, times: impl IntoIterator<Item = i64>) -> Vec<LogDecision> {
        times.into_iter().map(|t| limit.decide(t)).collect()
    }

    #[test]
    fn a_burst_writes_the_first_lines_of_a_window_and_counts_the_rest() {
        let mut limit = LogLimit::new(3, 1_000);
        let decisions = written(&mut limit, [0, 1, 2, 3, 4, 999]);
        let write = |n| LogDecision::Write { suppressed: n };
        assert_eq!(
            decisions,
            [
                write(0),
                write(0),
                write(0),
                LogDecision::Suppress,
                LogDecision::Suppress,
                LogDecision::Suppress
            ]
        );
        // The next window's first line reports what the last one left out.
        assert_eq!(limit.decide(1_000), write(3));
        assert_eq!(limit.decide(1_001), write(0));
    }

    #[test]
    fn ten_thousand_rejections_a_minute_write_ten_lines() {
        let mut limit = LogLimit::rejected_dispatches();
        let decisions = written(&mut limit, (0..10_000).map(|i| i * 6));
        let lines = decisions
            .iter()
            .filter(|d| matches!(d, LogDecision::Write { .. }))
            .count();
        assert_eq!(lines, REJECTED_DISPATCH_LINES as usize);
        assert_eq!(
            limit.decide(REJECTED_DISPATCH_WINDOW_MS),
            LogDecision::Write { suppressed: 9_990 }
        );
    }

    #[test]
    fn a_clock_going_back_stays_in_the_window() {
        let mut limit = LogLimit::new(1, 1_000);
        assert_eq!(limit.decide(5_000), LogDecision::Write { suppressed: 0 });
        assert_eq!(limit.decide(4_000), LogDecision::Suppress);
        assert_eq!(limit.decide(i64::MIN), LogDecision::Suppress);
        assert_eq!(limit.decide(6_000), LogDecision::Write { suppressed: 2 });
    }
}
