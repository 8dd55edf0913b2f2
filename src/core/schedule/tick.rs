//! One tick's firing, planned and then read back: which due schedules fire and
//! how (`plan_tick`, a [`FirePlan`] per row), and what became of each fire once the
//! store applied them all in one transaction ([`outcomes`]). The store runs the
//! calls (`Store::fire_due`); the edge logs the outcomes.

use super::plan::{disable, plan_fire, FirePlan, ZoneUse};
use super::zone::SUBJECT_ZONE;
use super::{ScheduleError, ScheduleRow};
use crate::core::model::BatchRow;

/// Due schedules one tick fires, oldest `next_fire_at` first; the rest wait for the
/// next tick. One page is one `batch()` of 4 statements per fire (one transaction,
/// a single subrequest), so the page bounds that transaction: 100 fires over a few
/// thousand subjects each is a few hundred thousand inserted rows, about as long
/// as `POST /batches` over as many subjects (docs/operations.md). 100 due at once
/// fire in one tick, 1,000 in ten.
pub const FIRE_PAGE: i64 = 100;

/// Whether planning needs the zones in use: only schedules on each subject's own
/// time do, so ticks without one skip that read.
pub fn needs_zones(due: &[ScheduleRow]) -> bool {
    due.iter().any(|row| row.timezone == SUBJECT_ZONE)
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

/// Each fire's outcome from the batches its key names after the apply (read with
/// one statement): ours if it has the id we planned, someone else's otherwise,
/// none if the fire was superseded.
pub fn outcomes(plans: &[FirePlan], batches: &[BatchRow]) -> Vec<Fired> {
    plans
        .iter()
        .filter_map(|plan| {
            let new = plan.batch.as_ref()?;
            let schedule_id = plan.schedule_id.clone();
            let key = new.key.clone();
            Some(match batches.iter().find(|b| b.key == new.key) {
                Some(b) if b.id == new.batch_id => Fired::Created {
                    schedule_id,
                    batch_id: b.id.clone(),
                    key,
                    total: b.total,
                },
                Some(b) => Fired::Existing {
                    schedule_id,
                    batch_id: b.id.clone(),
                    key,
                },
                None => Fired::Superseded { schedule_id, key },
            })
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
        }
    }

    fn batch(id: &str, key: &str, total: i64) -> BatchRow {
        BatchRow {
            id: id.into(),
            key: key.into(),
            status: "running".into(),
            total,
            completed: 0,
            failed: 0,
            cancelled: 0,
            processing: 0,
            created_at: 0,
            finished_at: None,
            schedule_id: None,
            on_finish: None,
            callback_status: None,
            callback_attempts: None,
            callback_error: None,
        }
    }

    fn ids() -> impl Fn() -> String {
        let n = Cell::new(0);
        move || {
            n.set(n.get() + 1);
            format!("b{}", n.get())
        }
    }

    #[test]
    fn zones_are_read_only_for_schedules_on_subject_time() {
        assert!(!needs_zones(&[]));
        assert!(!needs_zones(&[row("a", "UTC"), row("b", "Europe/Berlin")]));
        assert!(needs_zones(&[row("a", "UTC"), row("b", "subject")]));
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
    fn outcomes_tell_created_from_existing_from_superseded() {
        let tick = plan_tick(
            &[row("a", "UTC"), row("b", "UTC"), row("c", "UTC")],
            61_000,
            &[],
            &ids(),
            5,
        );
        let [ka, kb, _] = tick.keys()[..] else {
            panic!("three keys")
        };
        let read = [batch("b1", ka, 7), batch("older", kb, 3)];
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
                Fired::Superseded {
                    schedule_id: "c".into(),
                    key: "c:1970-01-01T00:01:00.000Z".into()
                },
            ]
        );
        let created: Vec<&str> = fired.iter().filter_map(Fired::created_batch_id).collect();
        assert_eq!(created, ["b1"]);
    }
}
