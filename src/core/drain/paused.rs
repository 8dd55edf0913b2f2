//! The keys a drain holds back itself, before D1 does: a receiver's "not now"
//! (a refusal, a spent budget) pauses the answered item's keys, and the drain
//! gives back the items it holds for them instead of sending them. Part of the
//! machine (`Drain`), in a file of its own.

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
}
