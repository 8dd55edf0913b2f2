//! A rate as GCRA in integers: how much room a key's state leaves, the slots a
//! claim ahead gives its starts, and how a state counted under another rate is
//! read. Pure; the claim's SQL computes the same (`sql/key_state.sql`,
//! `sql/claim_room.sql`).

/// How far ahead a claim takes a rate's starts: the items whose slot comes
/// within this long are claimed at once, each to start at its slot
/// ([`Gcra::room_ahead`], [`Gcra::start_of`]; `sql/claim_selection.sql`), so a
/// claimer held by a rate claims about once a second per key, not once per token.
pub const LOOK_AHEAD_MS: i64 = 1_000;

/// A rate as GCRA (the generic cell rate algorithm) in integers: time is counted
/// in units of ms × rate, so one start costs `per_seconds × 1000` units and no
/// division ever rounds. The state is one number per key, the theoretical
/// arrival time (`tat`); `None` is a key that has never started anything (a
/// full burst). In any interval of `t` seconds at most `burst + rate × t /
/// per_seconds` starts are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    pub rate: i64,
    pub per_seconds: i64,
    pub burst: i64,
}

impl Gcra {
    /// What one start costs, in units.
    pub fn cost(&self) -> i64 {
        self.per_seconds * 1000
    }

    /// The limit's units at `now_ms`.
    pub fn units(&self, now_ms: i64) -> i64 {
        now_ms * self.rate
    }

    /// How many may start at `now_ms` with state `tat`.
    pub fn room(&self, tat: Option<i64>, now_ms: i64) -> i64 {
        let debt = (tat.unwrap_or(0) - self.units(now_ms)).max(0);
        ((self.burst * self.cost() - debt) / self.cost()).max(0)
    }

    /// The state after `n` start at `now_ms` (n at most [`Gcra::room`]).
    pub fn charge(&self, tat: Option<i64>, now_ms: i64, n: i64) -> i64 {
        tat.unwrap_or(0).max(self.units(now_ms)) + n * self.cost()
    }

    /// The first instant (ms) at which a key with state `tat` has room for one
    /// more start.
    pub fn next_start(&self, tat: i64) -> i64 {
        self.room_for(tat, 1)
    }

    /// The first instant (ms) at which a key with state `tat` has room for `n`
    /// starts (`n` at most `burst`).
    pub fn room_for(&self, tat: i64, n: i64) -> i64 {
        (tat - (self.burst - n) * self.cost() + self.rate - 1) / self.rate
    }

    /// Whether starts are claimed ahead at their slots: only when a slot rounded
    /// up to the ms never lands past the next token's (`(burst − 1) × cost ≥
    /// rate − 1`), so each start is an exact GCRA arrival and the state the
    /// charge leaves is its true one. A burst of 1 at a rate not dividing the ms
    /// would drift a ms a start; it is claimed at each token instead.
    pub fn claims_ahead(&self) -> bool {
        (self.burst - 1) * self.cost() >= self.rate - 1
    }

    /// How many may be claimed at `now_ms` to start by `now_ms + LOOK_AHEAD_MS`,
    /// each at its slot ([`Gcra::start_of`]): the burst left now and the tokens
    /// that come within the look-ahead ([`Gcra::room`] for a rate not
    /// [`Gcra::claims_ahead`]).
    pub fn room_ahead(&self, tat: Option<i64>, now_ms: i64) -> i64 {
        if !self.claims_ahead() {
            return self.room(tat, now_ms);
        }
        let base = tat.unwrap_or(0).max(self.units(now_ms));
        ((self.burst * self.cost() + self.units(now_ms + LOOK_AHEAD_MS) - base) / self.cost())
            .max(0)
    }

    /// When the `j`-th start (from 1) claimed at `now_ms` with state `tat` may go:
    /// the first instant at which the state before it has room for one, never
    /// before `now_ms`. SQLite's integer division (towards zero) on purpose: the
    /// claim computes the same (`sql/claim_due_items.sql`).
    pub fn start_of(&self, tat: Option<i64>, now_ms: i64, j: i64) -> i64 {
        let base = tat.unwrap_or(0).max(self.units(now_ms));
        ((base + (j - self.burst) * self.cost() + self.rate - 1) / self.rate).max(now_ms)
    }

    /// How many starts a claimer held back by this rate waits for before it
    /// claims again, with `waiting` items held: as many as there are, up to a
    /// second's worth (a longer wait would only delay them), at least one. With
    /// `ahead` (a held item may start at a slot ahead) they are claimed a second
    /// early; without, they start at the claim, so at most half the burst (the
    /// other half absorbs the claim's lateness: tokens past the burst are lost).
    /// Waiting for several instead of claiming at each token keeps a held drain
    /// from claiming (and reading its selection) once per start.
    pub fn wake_batch(&self, waiting: i64, ahead: bool) -> i64 {
        let ahead = ahead && self.claims_ahead();
        let most = if ahead { waiting } else { self.burst / 2 };
        waiting.min(self.rate / self.per_seconds).min(most).max(1)
    }

    /// When a claimer held back by this rate, with `waiting` items held, claims
    /// again (the claim's hold statement computes the same; `limits::claim_wake`
    /// combines it with the item's other keys).
    pub fn wake_at(&self, tat: i64, waiting: i64, ahead: bool) -> i64 {
        let ahead = ahead && self.claims_ahead();
        let at = self.room_for(tat, self.wake_batch(waiting, ahead));
        if ahead {
            at - LOOK_AHEAD_MS
        } else {
            at
        }
    }

    /// The rate and window a state was counted in: a state counted under
    /// another one starts over, or is carried over ([`Gcra::state_of`]).
    pub fn basis(&self) -> String {
        format!("{}/{}", self.rate, self.per_seconds)
    }

    /// The state this rate reads from a key's stored one (`tat` counted in
    /// `basis`), this rate being a learned one or not (`learned`: its basis is
    /// `<per minute>/60 learned`). The same basis: as stored. Either learned
    /// (a learned rate's step, or the switch to or from a set rate, which comes
    /// by itself as a learned rate grows or a refusal lowers it): carried over,
    /// the same instant in this rate's units (rounded up), never further ahead
    /// than the look-ahead and a full bucket of this rate. A full burst there
    /// would come on top of the slots claimed ahead under the other rate
    /// (measured: 11 calls in a second to a receiver of 10/s, set at 6/s). Two
    /// set rates (a changed limit): a full burst, as `PUT /limits` documents.
    /// The claim computes the same (`sql/key_state.sql`).
    pub fn state_of(
        &self,
        learned: bool,
        tat: Option<i64>,
        basis: Option<&str>,
        now_ms: i64,
    ) -> Option<i64> {
        let (tat, basis) = (tat?, basis?);
        let own = if learned {
            format!("{}/60{LEARNED_BASIS}", self.rate)
        } else {
            self.basis()
        };
        if basis == own {
            return Some(tat);
        }
        if !learned && !basis.ends_with(LEARNED_BASIS) {
            return None;
        }
        let was: i64 = basis
            .split('/')
            .next()?
            .parse()
            .ok()
            .filter(|r: &i64| *r > 0)?;
        let carried = (tat + was - 1) / was * self.rate;
        Some(carried.min(self.units(now_ms + LOOK_AHEAD_MS) + self.burst * self.cost()))
    }
}

/// How a learned rate's basis ends (`292/60 learned`; key_rules.sql writes it).
pub const LEARNED_BASIS: &str = " learned";

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    #[test]
    fn a_state_is_carried_across_a_learned_rate_and_a_changed_set_rate_starts_over() {
        let set = Gcra {
            rate: 6,
            per_seconds: 1,
            burst: 2,
        };
        let learned = Gcra {
            rate: 292,
            per_seconds: 60,
            burst: 2,
        };
        // Under the learned rate a claim took its burst and a second's slots:
        // the next start is at NOW + 1.44 s (292 a minute: one every 205.5 ms).
        let tat = learned.charge(None, NOW, 6);
        assert_eq!(tat, (NOW * 292) + 6 * 60_000);
        let at = (tat + 291) / 292;
        // Read as the set rate's: the same instant, rounded up to the ms.
        let carried = set.state_of(false, Some(tat), Some("292/60 learned"), NOW);
        assert_eq!(carried, Some(at * 6));
        assert_eq!(
            set.room(carried, NOW),
            0,
            "the slots claimed ahead still count"
        );
        assert_eq!(
            set.room_ahead(carried, NOW),
            0,
            "its next slot, 1.07 s ahead, is past the look-ahead"
        );
        assert_eq!(
            set.room_ahead(carried, NOW + 500),
            3,
            "(2 + 6 × 1.5 − 6 × 1.233) s"
        );
        // The learned rate's own state as stored; its next step carried over.
        assert_eq!(
            learned.state_of(true, Some(tat), Some("292/60 learned"), NOW),
            Some(tat)
        );
        let grown = Gcra {
            rate: 365,
            ..learned
        };
        assert_eq!(
            grown.state_of(true, Some(tat), Some("292/60 learned"), NOW),
            Some(at * 365)
        );
        // From a set rate to a learned one, the same.
        let set_tat = set.charge(None, NOW, 8);
        assert_eq!(
            learned.state_of(true, Some(set_tat), Some("6/1"), NOW),
            Some((set_tat + 5) / 6 * 292)
        );
        // Never further ahead than the look-ahead and a full bucket: a slow rate
        // raised is soon at its new pace.
        let slow = Gcra {
            rate: 1,
            per_seconds: 60,
            burst: 1,
        };
        let slow_tat = slow.charge(None, NOW, 30);
        assert_eq!(
            set.state_of(false, Some(slow_tat), Some("1/60 learned"), NOW),
            Some((NOW + LOOK_AHEAD_MS) * 6 + 2 * 1_000)
        );
        // Two set rates: a changed limit starts over with a full burst.
        assert_eq!(set.state_of(false, Some(set_tat), Some("10/1"), NOW), None);
        assert_eq!(
            set.state_of(false, Some(set_tat), Some("6/1"), NOW),
            Some(set_tat)
        );
        // Nothing stored, or a pause's row without a rate (basis ''): a full burst.
        assert_eq!(set.state_of(false, None, None, NOW), None);
        assert_eq!(set.state_of(true, Some(0), Some(""), NOW), None);
    }
}
