//! One tick's firing, planned and then read back: which due schedules fire and
//! how (`plan_tick`, a [`FirePlan`] per row), in which groups the store applies
//! them so that a failing fire cannot hold up the others ([`Isolation`]), when a
//! fire that failed on its own is tried again ([`retry_at`]), and what became of
//! each fire ([`outcomes`]). The store runs the calls (`Store::fire_due`); the
//! edge logs the outcomes.

use std::collections::VecDeque;
use std::ops::Range;

use super::plan::{disable, plan_fire, FirePlan, ZoneUse};
use super::zone::SUBJECT_ZONE;
use super::{ScheduleError, ScheduleRow};
use serde::Deserialize;

/// Due schedules one tick fires, oldest first; the rest wait for the next tick.
/// When nothing fails the page is one `batch()` of 5 statements per fire (one
/// transaction, a single subrequest), so the page bounds that transaction: 100
/// fires over a few thousand subjects each is a few hundred thousand inserted rows,
/// about as long as `POST /batches` over as many subjects (docs/guides/schedules.md).
/// 100 due at once fire in one tick, 1,000 in ten.
pub const FIRE_PAGE: i64 = 100;

/// Most `batch()` calls one tick spends applying its page of fires: the whole page
/// first; when a call fails, each half of what it carried on its own, and so on
/// ([`Isolation`]). What is not applied when they are spent stays due, untouched.
pub const FIRE_APPLY_CALLS: i64 = 4;

/// A schedule's first retry after a fire that failed on its own comes this long
/// after the failure; each further failure in a row doubles it, up to
/// [`FIRE_RETRY_MAX_MS`].
pub const FIRE_RETRY_FIRST_MS: i64 = 60_000;
/// The longest backoff: a schedule that always fails costs one failed call an hour.
pub const FIRE_RETRY_MAX_MS: i64 = 3_600_000;

/// When a schedule whose fire just failed for the `failures`-th time in a row (1
/// for the first) is tried again: 1, 2, 4, … minutes after `now`, at most an hour.
pub fn retry_at(now: i64, failures: i64) -> i64 {
    let doublings = failures.clamp(1, 63) - 1;
    let wait = FIRE_RETRY_FIRST_MS
        .checked_shl(doublings as u32)
        .filter(|w| *w > 0 && *w <= FIRE_RETRY_MAX_MS)
        .unwrap_or(FIRE_RETRY_MAX_MS);
    now.saturating_add(wait)
}

/// Which plans (index ranges into [`TickPlan::plans`]) each apply call carries, so
/// that a failing fire cannot keep the others from applying. The first call
/// carries the whole page; a call that fails is split in halves, tried on their
/// own after what is already waiting (breadth first), down to a single fire, which
/// has then failed on its own and backs off. When the first half of a failed call
/// applies, the second must hold the failure (a fire fails the same way each try):
/// it is split without a call, and a single fire so found has failed on its own
/// ([`Isolation::take_inferred`]). At most `calls` calls; whatever is not tried
/// when they are spent stays due, untouched, for the next tick. If no call has
/// applied or isolated anything by the last one, the last one carries a single
/// fire, which either applies or fails on its own: so every tick with a failure
/// applies or backs off at least one fire, and the page drains (the fires applied
/// or backed off are no longer due), however many fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolation {
    /// Ranges still to try, the next one first.
    todo: VecDeque<Part>,
    calls_left: i64,
    /// Whether a call has applied or isolated a fire yet.
    progressed: bool,
    /// Whether the range in flight is the first half of a failed call.
    first_half_in_flight: bool,
    /// Fires found failing without a call of their own, not yet taken.
    inferred: Vec<usize>,
}

/// A range to try: `first_half` of a failed call (its sibling follows it in the
/// queue), or `known_bad`: a failure is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    range: Range<usize>,
    first_half: bool,
    known_bad: bool,
}

impl Part {
    fn new(range: Range<usize>, first_half: bool) -> Part {
        Part {
            range,
            first_half,
            known_bad: false,
        }
    }
}

impl Isolation {
    pub fn new(plans: usize, calls: i64) -> Isolation {
        let todo = if plans > 0 {
            VecDeque::from([Part::new(0..plans, false)])
        } else {
            VecDeque::new()
        };
        Isolation {
            todo,
            calls_left: calls,
            progressed: false,
            first_half_in_flight: false,
            inferred: Vec::new(),
        }
    }

    /// The plans the next call carries, if a call is left for them.
    pub fn next_range(&mut self) -> Option<Range<usize>> {
        // What is known to hold a failure narrows for free.
        while self.todo.front().is_some_and(|p| p.known_bad) {
            let part = self.todo.pop_front()?;
            if part.range.len() == 1 {
                self.inferred.push(part.range.start);
                self.progressed = true;
            } else {
                let (first, second) = halves(part.range);
                self.todo.push_front(Part::new(second, false));
                self.todo.push_front(Part::new(first, true));
            }
        }
        if self.calls_left <= 0 {
            return None;
        }
        let part = self.todo.pop_front()?;
        let mut range = part.range;
        self.first_half_in_flight = part.first_half;
        if self.calls_left == 1 && !self.progressed && range.len() > 1 {
            self.todo
                .push_front(Part::new(range.start + 1..range.end, false));
            range = range.start..range.start + 1;
            self.first_half_in_flight = false;
        }
        self.calls_left -= 1;
        Some(range)
    }

    /// The call carrying the last range applied.
    pub fn applied(&mut self) {
        self.progressed = true;
        if self.first_half_in_flight {
            if let Some(sibling) = self.todo.front_mut() {
                sibling.known_bad = true;
            }
        }
    }

    /// The call carrying `range` failed: its halves are tried later, or, for a
    /// single plan, that plan failed on its own (returned).
    pub fn failed(&mut self, range: Range<usize>) -> Option<usize> {
        if range.len() == 1 {
            self.progressed = true;
            return Some(range.start);
        }
        let (first, second) = halves(range);
        self.todo.push_back(Part::new(first, true));
        self.todo.push_back(Part::new(second, false));
        None
    }

    /// Fires found failing on their own without a call (see the type's doc):
    /// each taken once.
    pub fn take_inferred(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.inferred)
    }

    /// The call carrying `range` was not sent (the budget refused it): it and
    /// whatever is left are not tried this tick.
    pub fn unsent(&mut self, range: Range<usize>) {
        self.todo.push_front(Part::new(range, false));
        self.calls_left = 0;
    }

    /// The plans not applied and not failed on their own: left due.
    pub fn left(&self) -> impl Iterator<Item = usize> + '_ {
        self.todo.iter().flat_map(|p| p.range.clone())
    }
}

fn halves(range: Range<usize>) -> (Range<usize>, Range<usize>) {
    let mid = range.start + range.len() / 2;
    (range.start..mid, mid..range.end)
}

/// Whether planning needs the zones in use: only schedules on each subject's own
/// time do, so ticks without one skip that read.
pub fn needs_zones(due: &[ScheduleRow]) -> bool {
    due.iter().any(|row| row.timezone == SUBJECT_ZONE)
}

/// Whose zones planning needs (`Store::zones_in_use`): the groups of the due
/// schedules on each subject's own time, each once, and whether one of them has
/// no group (then every group's zones). Only these are read: at most the page's
/// 100 groups, whatever the number of groups.
pub fn zone_groups(due: &[ScheduleRow]) -> (Vec<&str>, bool) {
    let on_subject_time = due.iter().filter(|row| row.timezone == SUBJECT_ZONE);
    let mut groups: Vec<&str> = on_subject_time
        .clone()
        .filter_map(|row| row.group_name.as_deref())
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let every = on_subject_time.clone().any(|row| row.group_name.is_none());
    (groups, every)
}

/// What one tick applies: a plan per due row (rows that can no longer be read are
/// switched off, so they are not due on every tick) and why those were unreadable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickPlan {
    pub plans: Vec<FirePlan>,
    pub unreadable: Vec<ScheduleError>,
}

impl TickPlan {
    /// The keys of the batches the plans may create, for reading them back.
    pub fn keys(&self) -> Vec<&str> {
        self.plans
            .iter()
            .filter_map(|p| p.batch.as_ref().map(|b| b.key.as_str()))
            .collect()
    }
}

/// Plan every due row at `now`; `new_id` names each batch a fire may create.
pub fn plan_tick(
    due: &[ScheduleRow],
    now: i64,
    in_use: &[ZoneUse],
    new_id: &dyn Fn() -> String,
    max_attempts: i64,
) -> TickPlan {
    let mut tick = TickPlan {
        plans: Vec::with_capacity(due.len()),
        unreadable: Vec::new(),
    };
    for row in due {
        match plan_fire(row, now, in_use, &new_id(), max_attempts) {
            Ok(plan) => tick.plans.push(plan),
            Err(e) => {
                tick.plans.push(disable(row));
                tick.unreadable.push(e);
            }
        }
    }
    tick
}

/// What became of one fire that had a batch to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fired {
    /// The fire created its batch.
    Created {
        schedule_id: String,
        batch_id: String,
        key: String,
        total: i64,
    },
    /// The key was taken already (a re-fire): nothing was created or added.
    Existing {
        schedule_id: String,
        batch_id: String,
        key: String,
    },
    /// No active subject matched the schedule: no batch was created, and the
    /// schedule advanced to its next occurrence as after any fire.
    Empty { schedule_id: String, key: String },
    /// The schedule was replaced or deleted between the plan and its apply: the
    /// fire applied nothing (its `revision` and `created_at` no longer matched).
    Superseded { schedule_id: String, key: String },
}

impl Fired {
    /// The batch the fire made, if it made one.
    pub fn created_batch_id(&self) -> Option<&str> {
        match self {
            Fired::Created { batch_id, .. } => Some(batch_id),
            _ => None,
        }
    }
}

/// One fire read back after its apply (`sql/fired_batches.sql`): the batch its key
/// names, if any, and whether its schedule is still the row it was planned from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FireRead {
    pub key: String,
    pub batch_id: Option<String>,
    pub total: Option<i64>,
    /// 1 when the schedule still has the plan's revision and created_at.
    pub current: i64,
}

/// The JSON parameter of `sql/fired_batches.sql` for these plans.
pub fn read_back_json(plans: &[FirePlan]) -> String {
    let rows: Vec<serde_json::Value> = plans
        .iter()
        .filter_map(|p| {
            let b = p.batch.as_ref()?;
            Some(
                serde_json::json!({"key": b.key, "schedule_id": p.schedule_id,
                                    "revision": p.revision, "created_at": p.created_at}),
            )
        })
        .collect();
    serde_json::Value::Array(rows).to_string()
}

/// Each fire's outcome from what was read back after the apply (one statement):
/// ours if its key names the id we planned, someone else's if another id, empty
/// if no batch and the schedule is the row planned from (it advanced), superseded
/// if no batch and the schedule changed.
pub fn outcomes(plans: &[FirePlan], read: &[FireRead]) -> Vec<Fired> {
    plans
        .iter()
        .filter_map(|plan| {
            let new = plan.batch.as_ref()?;
            let schedule_id = plan.schedule_id.clone();
            let key = new.key.clone();
            let row = read.iter().find(|r| r.key == new.key);
            Some(
                match row.and_then(|r| r.batch_id.as_ref().map(|id| (r, id))) {
                    Some((r, id)) if *id == new.batch_id => Fired::Created {
                        schedule_id,
                        batch_id: id.clone(),
                        key,
                        total: r.total.unwrap_or(0),
                    },
                    Some((_, id)) => Fired::Existing {
                        schedule_id,
                        batch_id: id.clone(),
                        key,
                    },
                    None if row.is_some_and(|r| r.current == 1) => {
                        Fired::Empty { schedule_id, key }
                    }
                    None => Fired::Superseded { schedule_id, key },
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn row(id: &str, timezone: &str) -> ScheduleRow {
        ScheduleRow {
            id: id.into(),
            cron: None,
            every_seconds: Some(60),
            at: None,
            timezone: timezone.into(),
            group_name: None,
            jitter_seconds: 0,
            enabled: 1,
            next_fire_at: Some(60_000),
            last_fired_at: None,
            last_batch_id: None,
            revision: 1,
            created_at: 0,
            updated_at: 0,
            on_finish: None,
            fire_failures: 0,
            retry_at: None,
            priority: 0,
        }
    }

    fn read(id: Option<&str>, key: &str, total: i64, current: bool) -> FireRead {
        FireRead {
            key: key.into(),
            batch_id: id.map(Into::into),
            total: id.map(|_| total),
            current: i64::from(current),
        }
    }

    fn ids() -> impl Fn() -> String {
        let n = Cell::new(0);
        move || {
            n.set(n.get() + 1);
            format!("b{}", n.get())
        }
    }

    /// Drive an isolation where the plans in `bad` always fail: (calls made,
    /// plans applied, plans failed on their own, plans left due).
    fn isolate(n: usize, calls: i64, bad: &[usize]) -> (i64, Vec<usize>, Vec<usize>, Vec<usize>) {
        let mut iso = Isolation::new(n, calls);
        let (mut made, mut applied, mut failed) = (0, Vec::new(), Vec::new());
        while let Some(range) = iso.next_range() {
            made += 1;
            if range.clone().any(|i| bad.contains(&i)) {
                failed.extend(iso.failed(range));
            } else {
                iso.applied();
                applied.extend(range);
            }
            failed.extend(iso.take_inferred());
        }
        failed.extend(iso.take_inferred());
        applied.sort();
        let mut left: Vec<usize> = iso.left().collect();
        left.sort();
        (made, applied, failed, left)
    }

    #[test]
    fn a_page_that_applies_takes_one_call() {
        let (made, applied, failed, left) = isolate(100, FIRE_APPLY_CALLS, &[]);
        assert_eq!(
            (made, applied.len(), failed, left),
            (1, 100, vec![], vec![])
        );
        assert_eq!(
            isolate(0, FIRE_APPLY_CALLS, &[]).0,
            0,
            "nothing due, no call"
        );
    }

    /// Ticks until every fire of `n` has applied or failed on its own, when the
    /// fires in `bad` always fail (each tick's page: what is still due).
    fn ticks_to_drain(n: usize, bad: &[usize]) -> usize {
        let mut page: Vec<usize> = (0..n).collect();
        let mut isolated = Vec::new();
        for tick in 1..=100 {
            let page_bad: Vec<usize> = (0..page.len())
                .filter(|&i| bad.contains(&page[i]))
                .collect();
            let (made, applied, failed, left) = isolate(page.len(), FIRE_APPLY_CALLS, &page_bad);
            assert!(made <= FIRE_APPLY_CALLS);
            assert!(
                !applied.is_empty() || !failed.is_empty(),
                "tick {tick} made progress"
            );
            isolated.extend(failed.iter().map(|&i| page[i]));
            page = left.iter().map(|&i| page[i]).collect();
            if page.is_empty() {
                isolated.sort();
                assert_eq!(isolated, bad, "exactly the failing fires back off");
                return tick;
            }
        }
        panic!("the page never drained");
    }

    #[test]
    fn a_failing_fire_costs_at_most_the_apply_calls_and_the_others_still_apply() {
        // Fire 70 of 100 fails: the whole page fails, 0..50 applies (so 50..100
        // holds the failure: split without a call), 50..75 fails, 75..100
        // applies: 75 applied in 4 calls, 50..75 left for the next tick.
        let (made, applied, failed, left) = isolate(100, 4, &[70]);
        assert_eq!(made, 4);
        assert_eq!(applied, (0..50).chain(75..100).collect::<Vec<_>>());
        assert!(failed.is_empty());
        assert_eq!(left, (50..75).collect::<Vec<_>>());
        assert!(ticks_to_drain(100, &[70]) <= 6);
    }

    #[test]
    fn every_tick_with_failures_applies_or_backs_off_a_fire_so_the_page_drains() {
        // Failing fires in both halves, and in the first of every split: without
        // the last call's single fire no tick would apply anything.
        for bad in [
            vec![0, 50],
            vec![0, 1, 2, 3, 50, 99],
            vec![0, 12, 25, 37, 50, 62, 75, 87],
        ] {
            let ticks = ticks_to_drain(100, &bad);
            assert!(ticks <= 100, "{bad:?}: {ticks}");
        }
        let all: Vec<usize> = (0..10).collect();
        assert!(
            ticks_to_drain(10, &all) <= 10,
            "all failing: one a tick, at worst"
        );
    }

    #[test]
    fn a_lone_failing_fire_is_isolated_in_its_first_tick() {
        let (made, applied, failed, left) = isolate(1, 4, &[0]);
        assert_eq!((made, applied, failed, left), (1, vec![], vec![0], vec![]));
        // 0..3 fails, 0..1 applies (so 1..3 holds the failure), 1..2 fails on
        // its own, 2..3 applies.
        let (made, applied, failed, left) = isolate(3, 4, &[1]);
        assert_eq!(
            (made, applied, failed, left),
            (4, vec![0, 2], vec![1], vec![])
        );
        // Two fires, the second failing: found without a call of its own.
        let (made, applied, failed, left) = isolate(2, 4, &[1]);
        assert_eq!((made, applied, failed, left), (2, vec![0], vec![1], vec![]));
    }

    #[test]
    fn retries_back_off_from_a_minute_doubling_up_to_an_hour() {
        let at = |failures| (retry_at(1_000, failures) - 1_000) / 60_000;
        assert_eq!(
            [1, 2, 3, 4, 5, 6, 7, 8, 100, i64::MAX].map(at),
            [1, 2, 4, 8, 16, 32, 60, 60, 60, 60]
        );
        assert_eq!(at(0), 1, "a count below 1 is the first failure");
        assert_eq!(retry_at(i64::MAX, 1), i64::MAX);
    }

    #[test]
    fn zones_are_read_only_for_schedules_on_subject_time() {
        assert!(!needs_zones(&[]));
        assert!(!needs_zones(&[row("a", "UTC"), row("b", "Europe/Berlin")]));
        assert!(needs_zones(&[row("a", "UTC"), row("b", "subject")]));
    }

    #[test]
    fn zones_are_read_for_the_groups_of_the_due_page_only() {
        let of = |id: &str, zone: &str, group: Option<&str>| ScheduleRow {
            group_name: group.map(Into::into),
            ..row(id, zone)
        };
        let due = [
            of("a", "subject", Some("t2")),
            of("b", "UTC", Some("t9")),
            of("c", "subject", Some("t1")),
            of("d", "subject", Some("t2")),
        ];
        assert_eq!(zone_groups(&due), (vec!["t1", "t2"], false));
        let with_all = [of("e", "subject", None), of("f", "Europe/Berlin", None)];
        assert_eq!(zone_groups(&with_all), (vec![], true));
        assert_eq!(zone_groups(&[of("g", "UTC", None)]), (vec![], false));
    }

    #[test]
    fn every_due_row_gets_a_plan_and_unreadable_ones_are_switched_off() {
        let broken = ScheduleRow {
            every_seconds: None,
            cron: Some("not a cron".into()),
            ..row("broken", "UTC")
        };
        let tick = plan_tick(
            &[row("a", "UTC"), broken, row("c", "UTC")],
            61_000,
            &[],
            &ids(),
            5,
        );
        let planned: Vec<(&str, Option<&str>, bool)> = tick
            .plans
            .iter()
            .map(|p| {
                let id = p.batch.as_ref().map(|b| b.batch_id.as_str());
                (p.schedule_id.as_str(), id, p.enabled)
            })
            .collect();
        assert_eq!(
            planned,
            [
                ("a", Some("b1"), true),
                ("broken", None, false),
                ("c", Some("b3"), true)
            ]
        );
        assert_eq!(tick.unreadable.len(), 1);
        assert_eq!(tick.unreadable[0].schedule_id, "broken");
        assert_eq!(
            tick.keys(),
            ["a:1970-01-01T00:01:00.000Z", "c:1970-01-01T00:01:00.000Z"]
        );
    }

    #[test]
    fn outcomes_tell_created_from_existing_from_empty_from_superseded() {
        let tick = plan_tick(
            &[
                row("a", "UTC"),
                row("b", "UTC"),
                row("c", "UTC"),
                row("d", "UTC"),
            ],
            61_000,
            &[],
            &ids(),
            5,
        );
        let [ka, kb, kc, kd] = tick.keys()[..] else {
            panic!("four keys")
        };
        let read = [
            read(Some("b1"), ka, 7, true),
            read(Some("older"), kb, 3, true),
            read(None, kc, 0, true),
            read(None, kd, 0, false),
        ];
        let fired = outcomes(&tick.plans, &read);
        assert_eq!(
            fired,
            [
                Fired::Created {
                    schedule_id: "a".into(),
                    batch_id: "b1".into(),
                    key: ka.into(),
                    total: 7
                },
                Fired::Existing {
                    schedule_id: "b".into(),
                    batch_id: "older".into(),
                    key: kb.into()
                },
                Fired::Empty {
                    schedule_id: "c".into(),
                    key: kc.into()
                },
                Fired::Superseded {
                    schedule_id: "d".into(),
                    key: "d:1970-01-01T00:01:00.000Z".into()
                },
            ]
        );
        let created: Vec<&str> = fired.iter().filter_map(Fired::created_batch_id).collect();
        assert_eq!(created, ["b1"]);
    }
}
