//! Firing: a due schedule row → the one [`FirePlan`] the store applies in one
//! transaction (create the batch, fill it, set its total, advance the schedule), so
//! a fire that fails is simply due again on the next tick.
//!
//! Missed fires: a schedule whose `next_fire_at` has passed fires **once**, for the
//! most recent occurrence at or before `now` (after an hour of downtime an
//! every-60-s schedule creates one batch, not sixty), then advances to its first
//! occurrence after `now`. Occurrences from before the schedule was last written
//! are never fired (a schedule saved at 10:00 with `0 9 * * *` first fires
//! tomorrow), except that `next_fire_at` itself, when earlier, is honoured: the
//! migration's `daily` row and a past `at` rely on that.

use std::collections::BTreeSet;

use chrono_tz::Tz;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::jitter::fire_seed;
use super::key::batch_key;
use super::zone::parse_zone;
use super::{ScheduleError, ScheduleRow, ScheduleSpec, Timing, Zone};

/// One (group, zone) pair of active subjects (`Store::zones_in_use`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ZoneUse {
    pub group_name: String,
    pub timezone: String,
}

/// The zones a schedule of `group` (`None`: every group) covers, each once. Names
/// that are not zones (impossible through the API) are left out of the zone map;
/// their subjects still get an item, due at the fire instant (`coalesce` in
/// `sql/enqueue_for_schedule.sql`).
pub fn zones_for(group: Option<&str>, in_use: &[ZoneUse]) -> Vec<Tz> {
    let names: BTreeSet<&str> = in_use
        .iter()
        .filter(|z| group.is_none_or(|g| g == z.group_name))
        .map(|z| z.timezone.as_str())
        .collect();
    names.into_iter().filter_map(parse_zone).collect()
}

/// `next_fire_at` for a schedule being written (`PUT`): none when disabled; a
/// one-off's own instant, even a past one (it fires on the next tick); otherwise
/// the first occurrence after `now`.
pub fn next_fire_at(spec: &ScheduleSpec, now: i64, zones: &[Tz]) -> Option<i64> {
    if !spec.enabled {
        return None;
    }
    match spec.timing {
        Timing::At { at } => Some(at),
        _ => spec.first_after(now, zones).map(|o| o.fire_at),
    }
}

/// A batch a fire creates (nothing if its key exists: re-firing is idempotent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBatch {
    pub batch_id: String,
    pub key: String,
    pub created_at: i64,
    pub max_attempts: i64,
    /// Items' `run_after` before jitter, for subjects whose zone is not in `zone_times`.
    pub fire_at: i64,
    /// JSON object zone → local fire instant (`{}` unless `"timezone": "subject"`).
    pub zone_times: String,
    pub fire_seed: i64,
    pub jitter_seconds: i64,
    pub group: Option<String>,
}

/// What one tick does to one due schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirePlan {
    pub schedule_id: String,
    /// The row's revision the plan was made from; a `PUT` since makes it a no-op.
    pub revision: i64,
    /// `None` when no occurrence is due after all (e.g. the zones in use moved it).
    pub batch: Option<NewBatch>,
    pub next_fire_at: Option<i64>,
    pub enabled: bool,
}

/// Plan the fire of a due row at `now`. `in_use` is every (group, zone) pair of
/// active subjects; `batch_id` a fresh id for the batch it may create.
pub fn plan_fire(
    row: &ScheduleRow,
    now: i64,
    in_use: &[ZoneUse],
    batch_id: &str,
    max_attempts: i64,
) -> Result<FirePlan, ScheduleError> {
    let spec = ScheduleSpec::from_row(row)?;
    let zones = match spec.zone {
        Zone::Subject => zones_for(spec.group.as_deref(), in_use),
        Zone::Named(_) => Vec::new(),
    };
    let window_start = row.next_fire_at.unwrap_or(now).min(row.updated_at);
    let batch = spec
        .latest_at_or_before(now, &zones)
        .filter(|o| o.fire_at >= window_start && spec.enabled)
        .map(|occurrence| {
            let key = batch_key(&row.id, &occurrence);
            let zone_times: Map<String, Value> = occurrence
                .zone_times
                .iter()
                .map(|(zone, at)| (zone.clone(), Value::from(*at)))
                .collect();
            NewBatch {
                batch_id: batch_id.to_string(),
                fire_seed: fire_seed(&key),
                key,
                created_at: now,
                max_attempts,
                fire_at: occurrence.fire_at,
                zone_times: Value::Object(zone_times).to_string(),
                jitter_seconds: spec.jitter_seconds,
                group: spec.group.clone(),
            }
        });
    let next = match spec.timing {
        // A one-off has fired (or its instant was dropped by a PUT): it is done.
        Timing::At { .. } => None,
        _ => spec.first_after(now, &zones).map(|o| o.fire_at),
    };
    Ok(FirePlan {
        schedule_id: row.id.clone(),
        revision: row.revision,
        batch,
        next_fire_at: next.filter(|_| spec.enabled),
        enabled: spec.enabled && next.is_some(),
    })
}

/// Switch off a row that can no longer be read ([`ScheduleError`]), so it is not
/// due on every tick; the edge logs why.
pub fn disable(row: &ScheduleRow) -> FirePlan {
    FirePlan {
        schedule_id: row.id.clone(),
        revision: row.revision,
        batch: None,
        next_fire_at: None,
        enabled: false,
    }
}
