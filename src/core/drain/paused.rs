//! The keys a drain holds back itself, before D1 does: a receiver's "not now"
//! (a refusal, a spent budget) pauses the answered item's keys, and the drain
//! gives back the items it holds for them instead of sending them; a budget
//! left that the calls on their way will spend keeps the next item for its
//! keys waiting in the queue until their answers say more. Part of the machine
//! (`Drain`), in a file of its own.

use super::*;

impl Drain {
    /// After a receiver's refusal, or an answer saying its budget is spent: the
    /// queued items holding one of the item's (refused) keys go back unrun (no
    /// attempt spent), so they are not sent into the same wall; the claim holds
    /// them while the key is paused or under its learned rate.
    pub(super) fn give_back_siblings(
        &mut self,
        now: i64,
        refused: &ClaimedItem,
        only: Option<&[String]>,
    ) {
        let keys = match only {
            Some(keys) => keys.to_vec(),
            None => refused.keys(),
        };
        if keys.is_empty() {
            return;
        }
        let (siblings, rest): (VecDeque<Queued>, VecDeque<Queued>) =
            std::mem::take(&mut self.queue)
                .into_iter()
                .partition(|q| q.item.keys().iter().any(|k| keys.contains(k)));
        self.queue = rest;
        for queued in siblings {
            self.release_unrun(now, queued);
        }
    }

    /// Keep `keys` paused until `until` in this drain, and commit soon: until
    /// the pause lands in D1 a claim may return their items, which the drain
    /// then gives back unrun ([`Drain::holds_paused`]) instead of sending them.
    pub(super) fn note_paused(&mut self, now: i64, keys: Vec<String>, until: i64) {
        self.paused.retain(|(_, at)| *at > now);
        for key in keys {
            match self.paused.iter_mut().find(|(k, _)| *k == key) {
                Some((_, at)) => *at = (*at).max(until),
                None => self.paused.push((key, until)),
            }
        }
        self.flush_timer = FlushTimer::Fired;
    }

    /// Whether `item` holds a key this drain's own answers paused past `now`.
    pub(super) fn holds_paused(&self, item: &ClaimedItem, now: i64) -> bool {
        !self.paused.is_empty()
            && item
                .keys()
                .iter()
                .any(|k| self.paused.iter().any(|(p, at)| p == k && *at > now))
    }

    /// Keep what `paced` says remains of `keys`' budget until its reset; a
    /// spent budget (a pause) or none told forgets it.
    pub(super) fn note_budget(&mut self, now: i64, keys: &[String], paced: pace::Paced) {
        self.budgets
            .retain(|(k, _, at)| *at > now && !keys.contains(k));
        if let (None, Some(remaining), Some(reset_at)) =
            (paced.until, paced.remaining, paced.reset_at)
        {
            for key in keys {
                self.budgets.push((key.clone(), remaining, reset_at));
            }
        }
    }

    /// The keys whose budget left, as their last answer told, the calls on
    /// their way there will spend: an item holding one, sent now, would be
    /// refused ([`Drain::next_ready`] keeps it waiting).
    fn spoken_for(&self, now: i64) -> Vec<&str> {
        self.budgets
            .iter()
            .filter(|(key, remaining, at)| {
                let running = self.running.values().map(|r| r.limits.as_deref());
                *at > now && pace::on_their_way(std::slice::from_ref(key), running) >= *remaining
            })
            .map(|(key, _, _)| key.as_str())
            .collect()
    }

    /// The next queued item due to start by `now` that no budget holds back,
    /// taken from the queue.
    pub(super) fn next_ready(&mut self, now: i64) -> Option<Queued> {
        let spoken_for = if self.budgets.is_empty() {
            Vec::new()
        } else {
            self.spoken_for(now)
        };
        let at = if spoken_for.is_empty() {
            self.queue
                .front()
                .filter(|q| q.item.start_at <= now)
                .map(|_| 0)
        } else {
            let waits = |q: &Queued| {
                q.item
                    .keys()
                    .iter()
                    .any(|k| spoken_for.contains(&k.as_str()))
            };
            self.queue
                .iter()
                .take_while(|q| q.item.start_at <= now)
                .position(|q| !waits(q))
        }?;
        self.queue.remove(at)
    }

    /// When a budget a queued item may wait on resets.
    pub(super) fn budget_wake(&self, now: i64) -> Option<i64> {
        if self.queue.is_empty() {
            return None;
        }
        let resets = self.budgets.iter().map(|(_, _, at)| *at);
        resets.filter(|&at| at > now).min()
    }
}
