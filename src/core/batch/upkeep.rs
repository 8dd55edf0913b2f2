//! What every scheduled invocation does besides draining, in the same single D1
//! call as its finish check (`Store::finish_tick`): sweep one page of the cancelled
//! batches' pending items (one page over all of them), and delete what retention
//! no longer keeps. Each part is bounded per tick, so one tick never holds D1 for
//! long, and an idle tick costs index seeks that find nothing.

use crate::core::batch::control::CANCEL_PAGE;

pub const DAY_MS: i64 = 86_400_000;
/// Items of ended batches deleted per tick at most: 7.2 million a day at one tick a
/// minute. One statement.
pub const RETENTION_ITEMS_PER_TICK: i64 = 5_000;
/// The page of expired batches one tick's retention works on: their items (up to
/// `RETENTION_ITEMS_PER_TICK`) are deleted, then those of them left empty. The
/// next tick's page starts where this one stopped (deleted batches leave the
/// index), so a tick reads this many batches however many have expired.
pub const RETENTION_BATCHES_PER_TICK: i64 = 100;
/// Invocation summaries deleted per tick at most (a tick writes one).
pub const RETENTION_INVOCATIONS_PER_TICK: i64 = 1_000;

/// What retention deletes this tick: rows of batches that ended, and summaries of
/// invocations that started, before `cutoff`; at most the caps per statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub cutoff: i64,
    pub items: i64,
    pub batches: i64,
    pub invocations: i64,
}

impl Retention {
    /// `RETENTION_DAYS` at `now`; `None` when it is 0 (keep forever).
    pub fn at(now: i64, days: i64) -> Option<Retention> {
        (days > 0).then(|| Retention {
            cutoff: now.saturating_sub(days.saturating_mul(DAY_MS)),
            items: RETENTION_ITEMS_PER_TICK,
            batches: RETENTION_BATCHES_PER_TICK,
            invocations: RETENTION_INVOCATIONS_PER_TICK,
        })
    }
}

/// One tick's upkeep. A page or cap of 0 has nothing to do, and the store leaves
/// its statements out of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upkeep {
    /// Pending items of the cancelled, unended batches moved to `cancelled` per
    /// tick, over all of them together (`sql/cancel_pending_page.sql`).
    pub cancel_page: i64,
    pub retention: Option<Retention>,
}

/// What the tick found to do, read at its start (`sql/tick_work.sql`, with the
/// due schedules): the upkeep leaves out what has nothing to do. Unknown (the
/// read failed): everything, as `Default`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickWork {
    /// A cancelled batch has not ended: its pending items are swept.
    pub cancelling: bool,
    /// A batch ended before the retention cutoff.
    pub batches_expired: bool,
    /// An invocation summary started before the retention cutoff.
    pub invocations_expired: bool,
}

impl Default for TickWork {
    fn default() -> TickWork {
        TickWork {
            cancelling: true,
            batches_expired: true,
            invocations_expired: true,
        }
    }
}

impl Upkeep {
    pub fn at(now: i64, retention_days: i64) -> Upkeep {
        Upkeep {
            cancel_page: CANCEL_PAGE,
            retention: Retention::at(now, retention_days),
        }
    }

    /// The same without the parts `work` found nothing for. What a tick's flags
    /// missed (a batch cancelled or expiring since they were read) is the next
    /// tick's.
    pub fn narrowed(self, work: TickWork) -> Upkeep {
        Upkeep {
            cancel_page: if work.cancelling { self.cancel_page } else { 0 },
            retention: self.retention.map(|r| Retention {
                items: if work.batches_expired { r.items } else { 0 },
                batches: if work.batches_expired { r.batches } else { 0 },
                invocations: if work.invocations_expired {
                    r.invocations
                } else {
                    0
                },
                ..r
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_keeps_the_last_days_and_zero_keeps_everything() {
        let now = 100 * DAY_MS + 5;
        let r = Retention::at(now, 30).unwrap();
        assert_eq!(r.cutoff, 70 * DAY_MS + 5);
        assert_eq!((r.items, r.batches, r.invocations), (5_000, 100, 1_000));
        assert_eq!(Retention::at(now, 0), None);
        assert_eq!(Upkeep::at(now, 0).retention, None);
        assert_eq!(Upkeep::at(now, 1).cancel_page, CANCEL_PAGE);
    }

    #[test]
    fn narrowed_keeps_only_what_the_tick_found_to_do() {
        let full = Upkeep::at(100 * DAY_MS, 30);
        assert_eq!(full.narrowed(TickWork::default()), full);
        let idle = TickWork {
            cancelling: false,
            batches_expired: false,
            invocations_expired: false,
        };
        let none = full.narrowed(idle);
        assert_eq!(none.cancel_page, 0);
        let r = none.retention.unwrap();
        assert_eq!(
            (r.cutoff, r.items, r.batches, r.invocations),
            (70 * DAY_MS, 0, 0, 0)
        );
        let summaries = full.narrowed(TickWork {
            invocations_expired: true,
            ..idle
        });
        let r = summaries.retention.unwrap();
        assert_eq!((r.items, r.batches, r.invocations), (0, 0, 1_000));
        let cancel = full.narrowed(TickWork {
            cancelling: true,
            ..idle
        });
        assert_eq!(cancel.cancel_page, CANCEL_PAGE);
        // Retention off stays off.
        assert_eq!(
            Upkeep::at(0, 0).narrowed(TickWork::default()).retention,
            None
        );
    }

    #[test]
    fn huge_settings_do_not_overflow() {
        assert_eq!(Retention::at(0, i64::MAX).unwrap().cutoff, -i64::MAX);
    }
}
