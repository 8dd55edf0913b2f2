//! Schedules: saved, read, fired (every due schedule's statements in one `batch()`).

use super::*;
use crate::core::batch::upkeep::TickWork;

/// Firing is [`Store::fire_schedules`]: every due schedule's statements in one
/// `batch()`, one subrequest however many are due.
impl<D: Db> Store<D> {
    /// Create or replace a validated schedule and return the stored row (`None`
    /// only if the database lost the row it just wrote). `on_finish`: the
    /// completion callback of every batch it fires, as stored (`core::callback`).
    pub async fn upsert_schedule(
        &self,
        id: &str,
        spec: &ScheduleSpec,
        next_fire_at: Option<i64>,
        now: i64,
        on_finish: Option<&str>,
    ) -> StoreResult<Option<ScheduleRow>> {
        let statement = sql::UpsertSchedule {
            id,
            cron: spec.cron_text(),
            every_seconds: spec.every_seconds(),
            at: spec.at(),
            timezone: spec.zone.name(),
            group_name: spec.group.as_deref(),
            jitter_seconds: spec.jitter_seconds,
            enabled: i64::from(spec.enabled),
            next_fire_at,
            now,
            on_finish,
            priority: spec.priority,
        };
        Ok(self.db.run(statement).await?.pop())
    }

    pub async fn get_schedule(&self, id: &str) -> StoreResult<Option<ScheduleRow>> {
        Ok(self.db.run(sql::GetSchedule { id }).await?.pop())
    }

    /// A page of schedules in id order after `after`.
    pub async fn list_schedules(&self, after: &str, limit: i64) -> StoreResult<Vec<ScheduleRow>> {
        self.db.run(sql::ListSchedules { after, limit }).await
    }

    /// Returns whether the schedule existed. Its batches keep running.
    pub async fn delete_schedule(&self, id: &str) -> StoreResult<bool> {
        let rows: Vec<Id<String>> = self.db.run(sql::DeleteSchedule { id }).await?;
        Ok(!rows.is_empty())
    }

    /// Enabled schedules with `next_fire_at <= now`, oldest first, at most `limit`.
    pub async fn due_schedules(&self, now: i64, limit: i64) -> StoreResult<Vec<ScheduleRow>> {
        self.db.run(sql::DueSchedules { now, limit }).await
    }

    /// The zones of active subjects of one group, or of every group (`None`).
    pub async fn zones_in_use(&self, group: Option<&str>) -> StoreResult<Vec<ZoneUse>> {
        match group {
            Some(g) => self.zones_of(&[g], false).await,
            None => self.zones_of(&[], true).await,
        }
    }

    /// The distinct (group, zone) pairs of active subjects of `groups`, and, if
    /// `every_group`, the distinct zones of all of them (`group_name` `None`). One
    /// statement reading one index entry per row returned (`sql/zones_in_use.sql`).
    pub async fn zones_of(&self, groups: &[&str], every_group: bool) -> StoreResult<Vec<ZoneUse>> {
        let groups = serde_json::to_string(groups).map_err(|e| StoreError::Json(e.to_string()))?;
        self.db
            .run(sql::ZonesInUse {
                groups,
                every_group: i64::from(every_group),
            })
            .await
    }

    /// Whether batches not made by schedule `schedule_id` use its key prefix
    /// (`<id>:`): a *new* schedule must not take such an id, or its keys could
    /// collide with theirs.
    pub async fn key_prefix_used_by_others(&self, schedule_id: &str) -> StoreResult<bool> {
        let rows: Vec<Value> = self
            .db
            .run(sql::KeyPrefixUsedByOthers { schedule_id })
            .await?;
        Ok(!rows.is_empty())
    }

    /// One tick's firing, plan then apply: the oldest `page` due schedules, the
    /// zones in use of their groups (read once, only if a due schedule runs on
    /// each subject's time), a plan per schedule (`core::schedule::tick`), then the plans applied
    /// apart from each other ([`tick::Isolation`]): the whole page in one
    /// `batch()` that also reads back the batches it made; if that fails, each
    /// half on its own, and so on, at most [`tick::FIRE_APPLY_CALLS`] calls; then
    /// one statement backing off the schedules whose fire failed on its own. The
    /// due page is read with what else the tick has to do (`sql/tick_work.sql`:
    /// the report's `work`, retention's flags by `retention_cutoff`) and whether a
    /// batch is still filling; only then a second call continues the fills
    /// ([`Store::continue_fills`]'s pages), whose failure holds up no fire. So 1 D1
    /// call of 2 statements when nothing is due or filling, 2 calls when the page
    /// applies (3 with the zones, one more while a batch fills), at most
    /// `3 + FIRE_APPLY_CALLS + 1` (`budget::FIRE_SUBREQUESTS`) however many fail.
    /// `Err` only if the due page or the zones could not be read: then nothing was
    /// applied and every schedule is still due. Every planned fire ends in exactly
    /// one of [`FireReport`]'s `fired` (or applied without a batch), `failed`, `left`.
    pub async fn fire_due(
        &self,
        now: i64,
        page: i64,
        max_attempts: i64,
        new_id: &dyn Fn() -> String,
        retention_cutoff: Option<i64>,
    ) -> StoreResult<FireReport> {
        let mut read = self
            .db
            .batch_results(vec![
                sql::ReadTickWork { retention_cutoff }.bind(),
                sql::DueSchedules { now, limit: page }.bind(),
            ])
            .await?;
        let due: Vec<ScheduleRow> = decode(read.pop().unwrap_or_default())?;
        let flags: Vec<TickFlags> = decode(read.pop().unwrap_or_default())?;
        let flags = flags.first().copied();
        // Fills first, oldest batch first, bounded pages; one that fails is retried
        // by the next tick.
        let fill = if flags.is_some_and(|f| f.filling != 0) {
            self.continue_fills(None).await.map(|_| ())
        } else {
            Ok(())
        };
        let in_use = if tick::needs_zones(&due) {
            let (groups, every_group) = tick::zone_groups(&due);
            self.zones_of(&groups, every_group).await?
        } else {
            Vec::new()
        };
        let plan = tick::plan_tick(&due, now, &in_use, new_id, max_attempts);
        let mut report = FireReport {
            fill,
            fired: Vec::new(),
            failed: Vec::new(),
            left: Vec::new(),
            left_error: None,
            backoff: Ok(()),
            plan,
            // No row (it always has one): the whole upkeep, as when unknown.
            work: flags.map_or_else(TickWork::default, TickFlags::work),
        };
        let plans = &report.plan.plans;
        let mut isolation = tick::Isolation::new(plans.len(), tick::FIRE_APPLY_CALLS);
        let failure = |i: usize, error: StoreError| {
            let row = &due[i];
            let failures = row.fire_failures + 1;
            FireFailure {
                schedule_id: row.id.clone(),
                revision: row.revision,
                created_at: row.created_at,
                failures,
                retry_at: tick::retry_at(now, failures),
                error,
            }
        };
        // The error of the last call that failed: what a fire found failing
        // without a call of its own is charged with.
        let mut last_error = None;
        loop {
            let next = isolation.next_range();
            for i in isolation.take_inferred() {
                let error = last_error
                    .clone()
                    .unwrap_or(StoreError::Db("failed".into()));
                report.failed.push(failure(i, error));
            }
            let Some(range) = next else { break };
            let group = &plans[range.clone()];
            match self.fire_schedules(group).await {
                Ok(batches) => {
                    isolation.applied();
                    report.fired.extend(tick::outcomes(group, &batches));
                }
                // Not sent: no fire failed; they wait for the next tick.
                Err(e @ StoreError::OverBudget(_)) => {
                    isolation.unsent(range);
                    report.left_error = Some(e);
                }
                Err(e) => {
                    last_error = Some(e.clone());
                    match isolation.failed(range) {
                        Some(i) => report.failed.push(failure(i, e)),
                        None => report.left_error = Some(e),
                    }
                }
            }
        }
        report.left = isolation
            .left()
            .map(|i| plans[i].schedule_id.clone())
            .collect();
        if !report.failed.is_empty() {
            report.backoff = self.record_fire_failures(&report.failed).await;
        }
        Ok(report)
    }

    /// Back off the schedules whose fire failed on its own (one statement).
    pub async fn record_fire_failures(&self, failed: &[FireFailure]) -> StoreResult<()> {
        let failures = serde_json::to_string(failed).expect("a fire failure serialises");
        self.db
            .run::<Value>(sql::RecordFireFailures { failures })
            .await
            .map(|_| ())
    }

    /// The batches with these keys (one statement; missing keys are left out).
    pub async fn batches_by_keys(&self, keys: &[&str]) -> StoreResult<Vec<BatchRow>> {
        let keys = serde_json::to_string(keys).map_err(|e| StoreError::Json(e.to_string()))?;
        self.db.run(sql::GetBatchesByKeys { keys }).await
    }

    /// Apply fire plans in one transaction: for each, its batch (created unless the
    /// key exists, the schedule changed since planning or no subject matches), its
    /// first page of items (at most `FILL_PAGE` subjects, one `INSERT … SELECT`)
    /// with its cursor and total, and the schedule's advance; last, the batches
    /// their keys name, read back. 4
    /// statements per fire and the read-back, one call for all of them; nothing is
    /// written if any statement fails, so every plan is due again.
    pub async fn fire_schedules(&self, plans: &[FirePlan]) -> StoreResult<Vec<FireRead>> {
        if plans.is_empty() {
            return Ok(Vec::new());
        }
        let mut statements = Vec::with_capacity(plans.len() * 4);
        for plan in plans {
            if let Some(b) = &plan.batch {
                statements.push(
                    sql::CreateScheduleBatch {
                        batch_id: &b.batch_id,
                        key: &b.key,
                        now: b.created_at,
                        schedule_id: &plan.schedule_id,
                        revision: plan.revision,
                        max_attempts: b.max_attempts,
                        created_at: plan.created_at,
                        group: b.group.as_deref(),
                        fill: b.fill(&self.fill.attempts).to_json(),
                    }
                    .bind(),
                );
                // Its first page (at most `page` subjects) and its cursor; ticks
                // continue a bigger fill (`continue_fills`).
                statements.extend(self.fill_page(Some(&b.batch_id), Some(b.group.is_some())));
            }
            statements.push(
                sql::AdvanceSchedule {
                    schedule_id: &plan.schedule_id,
                    revision: plan.revision,
                    next_fire_at: plan.next_fire_at,
                    enabled: i64::from(plan.enabled),
                    now: plan.batch.as_ref().map(|b| b.created_at),
                    key: plan.batch.as_ref().map(|b| b.key.as_str()),
                    created_at: plan.created_at,
                }
                .bind(),
            );
        }
        let fires = tick::read_back_json(plans);
        statements.push(sql::FiredBatches { fires }.bind());
        self.db.batch_rows(statements).await
    }
}

/// `sql/tick_work.sql`'s row (SQLite's booleans are 0 and 1).
#[derive(Debug, Clone, Copy, Deserialize)]
struct TickFlags {
    filling: i64,
    cancelling: i64,
    batches_expired: i64,
    invocations_expired: i64,
}

impl TickFlags {
    fn work(self) -> TickWork {
        TickWork {
            cancelling: self.cancelling != 0,
            batches_expired: self.batches_expired != 0,
            invocations_expired: self.invocations_expired != 0,
        }
    }
}

/// What [`Store::fire_due`] did with each due schedule: applied ([`Fired`] per
/// fire with a batch), failed on its own and backed off, or left due.
#[derive(Debug)]
pub struct FireReport {
    /// Whether the fills still running were continued (a page each, at most
    /// `pages_per_call`); if not, they are tried again on the next tick.
    pub fill: StoreResult<()>,
    pub plan: TickPlan,
    /// Per applied fire with a batch, read back in the same call.
    pub fired: Vec<Fired>,
    /// Fires that failed on their own: their schedules back off.
    pub failed: Vec<FireFailure>,
    /// Schedules whose fires were not applied this tick (a call carrying them
    /// failed and the tick's apply calls ran out, or the budget refused one):
    /// still due, untouched.
    pub left: Vec<String>,
    /// The last error of a call that carried several fires (or the budget's
    /// refusal): why `left` were not applied.
    pub left_error: Option<StoreError>,
    /// Whether the backoff of `failed` was written; if not they are due again on
    /// the next tick, as before.
    pub backoff: StoreResult<()>,
    /// What the tick's upkeep has to do, read with the due schedules.
    pub work: TickWork,
}

/// A fire that failed on its own, and the backoff written for its schedule.
/// Serialised into the JSON parameter of `sql/record_fire_failures.sql`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FireFailure {
    #[serde(rename = "id")]
    pub schedule_id: String,
    pub revision: i64,
    pub created_at: i64,
    /// Failures in a row, this one included.
    pub failures: i64,
    pub retry_at: i64,
    #[serde(skip)]
    pub error: StoreError,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The failures' JSON carries every key `record_fire_failures.sql` reads; the
    /// error stays out of it.
    #[test]
    fn the_fire_failures_json_is_what_the_backoff_reads() {
        let failure = FireFailure {
            schedule_id: "daily".into(),
            revision: 3,
            created_at: 10,
            failures: 2,
            retry_at: 70_000,
            error: StoreError::Db("D1: busy".into()),
        };
        let json = serde_json::to_string(&[&failure]).unwrap();
        assert_carries_keys_read(&json, sql::RECORD_FIRE_FAILURES);
        let rows: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(rows[0]["id"], "daily");
        assert_eq!(rows[0]["retry_at"], 70_000);
        assert!(rows[0].get("error").is_none());
    }
}
