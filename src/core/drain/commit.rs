//! The drain's group commits: when waiting outcomes go out in one statement,
//! and how a commit's answer is counted. Part of the machine (`Drain`), in a file
//! of its own.

use super::*;

impl Drain {
    /// The next group commit, if one is due and affordable. Commits are paced by
    /// the timer, not by a row count: one statement per FLUSH_INTERVAL_MS carries
    /// every outcome of that interval; an outcome whose lease would otherwise
    /// expire before its commit lands goes at once. Once nothing runs, whatever
    /// waits is committed at once, in as many statements as the plan kept for it.
    pub(super) fn flush(&mut self, now: i64) -> Option<Vec<Settled>> {
        if self.buffer.is_empty() {
            return None;
        }
        let n = self.buffer.len().min(FLUSH_MAX_ROWS as usize);
        if self.buffer.len() > n {
            // Oldest leases first (a stable sort: each lease's rows keep their order).
            self.buffer.sort_by_key(|s| s.lease_expires_at);
        }
        let last = self.unfinished() == 0;
        if !last {
            let due = self.buffer.len() as i64 >= FLUSH_MAX_ROWS
                || self.flush_timer == FlushTimer::Fired
                || self.lease_due(now);
            if !due {
                return None;
            }
            // When the oldest lease's items have all answered, committing them
            // frees the flush kept for them, so a commit the lease needs is
            // always affordable.
            let kept = self.flushes_without(&self.buffer[..n]);
            if !may_commit(&self.budget, kept, self.retries_kept()) {
                return None;
            }
        }
        if let Err(e) = self.budget.reserve(1, 0) {
            // Only a planning bug gets here, and then no commit can be paid for.
            let rows = std::mem::take(&mut self.buffer);
            self.buffer_oldest = None;
            self.forget_outstanding(&rows);
            self.reports.push_back(Report::CommitFailed {
                error: StoreError::OverBudget(e),
                item_ids: rows.iter().map(|r| r.item.item_id).collect(),
            });
            return None;
        }
        let rest = self.buffer.split_off(n);
        let rows = std::mem::replace(&mut self.buffer, rest);
        self.buffer_oldest = self.buffer.iter().map(|s| s.lease_expires_at).min();
        self.forget_outstanding(&rows);
        self.committing = Some(Committing {
            tries: 1,
            sent: now,
        });
        self.flush_timer = if self.buffer.is_empty() {
            FlushTimer::Idle
        } else {
            FlushTimer::Armed(now + FLUSH_INTERVAL_MS)
        };
        Some(rows)
    }

    /// These outcomes are in a commit: no flush is kept for them any more.
    pub(super) fn forget_outstanding(&mut self, rows: &[Settled]) {
        for r in rows {
            if let Some(n) = self.outstanding.get_mut(&r.lease_expires_at) {
                *n -= 1;
                if *n <= 0 {
                    self.outstanding.remove(&r.lease_expires_at);
                }
            }
        }
    }

    /// Count a commit's rows: applied ones by their new state; the others lost
    /// their lease and were left untouched.
    pub(super) fn account(&mut self, rows: Vec<Settled>, mut applied: Vec<i64>) {
        applied.sort_unstable();
        for row in rows {
            if applied.binary_search(&row.item.item_id).is_err() {
                self.tally.lost_leases += 1;
                self.reports.push_back(Report::LeaseLost(row.item));
                continue;
            }
            // A callback is no item of its batch: it counts in no timeline.
            if !row.item.is_callback() {
                self.tally
                    .count_terminal(&row.item.batch_id, row.transition.status);
            }
            match row.transition.status {
                ItemStatus::Completed => {
                    self.tally.completed += 1;
                    if row.item.is_callback() {
                        self.reports.push_back(Report::Settled(row));
                    }
                }
                // Reported when it was released.
                ItemStatus::Pending if row.transition.is_release() => self.tally.released += 1,
                ItemStatus::Pending => {
                    self.tally.retried += 1;
                    self.reports.push_back(Report::Settled(row));
                }
                ItemStatus::Failed => {
                    self.tally.failed += 1;
                    self.reports.push_back(Report::Settled(row));
                }
                // A job's outcome never decides these (`retry::decide`): an item of a
                // cancelled batch that comes back for a retry goes pending and is
                // swept by the tick's upkeep.
                ItemStatus::Processing | ItemStatus::Cancelled => {}
            }
        }
    }
}
