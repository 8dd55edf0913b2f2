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
//! migration's `daily` row and a past `at` rely on that. With `"timezone":
//! "subject"`, the local date `next_fire_at` stood for always fires, even when a
//! subject in an earlier zone, added since, moves that date's first instant before
//! the save.

use std::collections::{BTreeMap, BTreeSet};

use chrono_tz::Tz;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::fill::Fill;
use super::jitter::fire_seed;
use super::key::batch_key;
use super::zone::parse_zone;
use super::{ScheduleError, ScheduleRow, ScheduleSpec, Timing, Zone};

/// A zone in use by active subjects (`Store::zones_in_use`): of one group, or,
/// with `group_name` `None`, of any group.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ZoneUse {
    pub group_name: Option<String>,
    pub timezone: String,
}

/// The zones a schedule of `group` (`None`: every group) covers, each once: for a
/// group its own rows, for every group all rows. Names that are not zones
/// (impossible through the API) are left out of the zone map; their subjects
/// still get an item, due at the fire instant (`coalesce` in
/// `sql/fill_group_page.sql` and `sql/fill_every_group_page.sql`).
pub fn zones_for(group: Option<&str>, in_use: &[ZoneUse]) -> Vec<Tz> {
    let names: BTreeSet<&str> = in_use
        .iter()
        .filter(|z| group.is_none_or(|g| z.group_name.as_deref() == Some(g)))
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

impl NewBatch {
    /// What the batch is filled from (`batches.fill`), with the kinds' own attempts.
    pub fn fill(&self, attempts: &BTreeMap<String, i64>) -> Fill {
        Fill {
            group: self.group.clone(),
            zone_times: serde_json::from_str(&self.zone_times)
                .unwrap_or_else(|_| Value::Object(Map::new())),
            fire_at: self.fire_at,
            fire_seed: self.fire_seed,
            jitter_seconds: self.jitter_seconds,
            max_attempts: self.max_attempts,
            attempts: attempts.clone(),
        }
    }
}

/// What one tick does to one due schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirePlan {
    pub schedule_id: String,
    /// The row's revision the plan was made from; a `PUT` since makes it a no-op.
    pub revision: i64,
    /// The row's `created_at`: revisions restart at 1 when a schedule is deleted
    /// and created again, so the pair names the row the plan was made from.
    pub created_at: i64,
    /// `None` when no occurrence is due after all (e.g. the zones in use moved it).
    pub batch: Option<NewBatch>,
    pub next_fire_at: Option<i64>,
    pub enabled: bool,
}

/// Plan the fire of a due row at `now`. `in_use` holds the zones in use of its
/// group (or of every group, for a schedule with none); `batch_id` a fresh id for
/// the batch it may create.
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
    let promised = row.next_fire_at.unwrap_or(now);
    let window_start = promised.min(row.updated_at);
    // An occurrence fires if it was wholly ahead when the row was written, or if
    // one of its local times is at or after the promised `next_fire_at`: with
    // `"timezone": "subject"` a zone that joined since can move a date's fire
    // instant before the save, and the date `next_fire_at` stood for must still
    // fire. For one zone the second test implies the first.
    let batch = spec
        .latest_at_or_before(now, &zones)
        .filter(|o| spec.enabled && (o.fire_at >= window_start || o.last_local_time() >= promised))
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
        created_at: row.created_at,
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
        created_at: row.created_at,
        batch: None,
        next_fire_at: None,
        enabled: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schedule::key::DAILY_SCHEDULE_ID;
    use crate::core::time::{daily_batch_key, rfc3339};
    use chrono::DateTime;

    fn ms(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    fn row(id: &str) -> ScheduleRow {
        ScheduleRow {
            id: id.into(),
            cron: None,
            every_seconds: None,
            at: None,
            timezone: "UTC".into(),
            group_name: None,
            jitter_seconds: 0,
            enabled: 1,
            next_fire_at: None,
            last_fired_at: None,
            last_batch_id: None,
            revision: 3,
            created_at: ms("2026-01-01T00:00:00Z"),
            updated_at: ms("2026-01-01T00:00:00Z"),
            on_finish: None,
            fire_failures: 0,
            retry_at: None,
            priority: 0,
        }
    }

    fn every_60(next: &str) -> ScheduleRow {
        ScheduleRow {
            every_seconds: Some(60),
            next_fire_at: Some(ms(next)),
            ..row("feeds")
        }
    }

    fn plan(row: &ScheduleRow, now: &str) -> FirePlan {
        plan_fire(row, ms(now), &[], "b1", 5).unwrap()
    }

    #[test]
    fn a_fire_on_time_creates_that_occurrences_batch_and_advances() {
        let p = plan(
            &every_60("2026-11-21T10:00:00Z"),
            "2026-11-21T10:00:00.350Z",
        );
        let batch = p.batch.unwrap();
        assert_eq!(batch.key, "feeds:2026-11-21T10:00:00.000Z");
        assert_eq!(
            (batch.fire_at, batch.created_at),
            (ms("2026-11-21T10:00:00Z"), ms("2026-11-21T10:00:00.350Z"))
        );
        assert_eq!(
            (
                batch.batch_id.as_str(),
                batch.max_attempts,
                batch.zone_times.as_str()
            ),
            ("b1", 5, "{}")
        );
        assert_eq!(batch.fire_seed, fire_seed("feeds:2026-11-21T10:00:00.000Z"));
        assert_eq!(
            (p.next_fire_at, p.enabled, p.revision),
            (Some(ms("2026-11-21T10:01:00Z")), true, 3)
        );
    }

    #[test]
    fn after_downtime_a_schedule_fires_once_for_the_latest_missed_occurrence() {
        // Due at 10:00, the Worker was down until 11:00:05: one batch, for 11:00.
        let p = plan(&every_60("2026-11-21T10:00:00Z"), "2026-11-21T11:00:05Z");
        assert_eq!(p.batch.unwrap().key, "feeds:2026-11-21T11:00:00.000Z");
        assert_eq!(p.next_fire_at, Some(ms("2026-11-21T11:01:00Z")));

        // A daily schedule down for three days fires today's, keyed by today.
        let daily = ScheduleRow {
            cron: Some("0 9 * * *".into()),
            timezone: "Europe/Berlin".into(),
            next_fire_at: Some(ms("2026-11-18T08:00:00Z")),
            ..row("digest")
        };
        let p = plan(&daily, "2026-11-21T08:30:00Z");
        let batch = p.batch.unwrap();
        assert_eq!(
            (batch.key.as_str(), batch.fire_at),
            ("digest:2026-11-21", ms("2026-11-21T08:00:00Z"))
        );
        assert_eq!(p.next_fire_at, Some(ms("2026-11-22T08:00:00Z")));
    }

    #[test]
    fn occurrences_from_before_the_last_save_never_fire() {
        // Saved at 10:00 with "0 9 * * *": next_fire_at is tomorrow 09:00; a tick
        // planning it early (clock skew between Workers) finds nothing to fire.
        let saved = ScheduleRow {
            cron: Some("0 9 * * *".into()),
            next_fire_at: Some(ms("2026-11-22T09:00:00Z")),
            updated_at: ms("2026-11-21T10:00:00Z"),
            ..row("digest")
        };
        let p = plan(&saved, "2026-11-21T10:00:30Z");
        assert_eq!(p.batch, None);
        assert_eq!(p.next_fire_at, Some(ms("2026-11-22T09:00:00Z")));
    }

    #[test]
    fn a_subject_date_promised_at_the_save_fires_when_an_earlier_zone_joins() {
        // Saved at 21:00Z on the 20th with London subjects only: the 21st is next,
        // at London's 09:00 (09:00Z). Auckland subjects join; their 09:00 on the
        // 21st (20:00Z on the 20th) was already past at the save, which moves the
        // 21st's fire instant before it: the 21st must still fire, not the 22nd.
        let digest = ScheduleRow {
            cron: Some("0 9 * * *".into()),
            timezone: "subject".into(),
            next_fire_at: Some(ms("2026-11-21T09:00:00Z")),
            updated_at: ms("2026-11-20T21:00:00Z"),
            ..row("digest")
        };
        let zone = |z: &str| ZoneUse {
            group_name: Some("default".into()),
            timezone: z.into(),
        };
        let in_use = [zone("Europe/London"), zone("Pacific/Auckland")];
        let p = plan_fire(&digest, ms("2026-11-21T09:00:20Z"), &in_use, "b", 5).unwrap();
        let batch = p.batch.expect("the 21st fires");
        assert_eq!(
            (batch.key.as_str(), batch.fire_at),
            ("digest:2026-11-21", ms("2026-11-20T20:00:00Z"))
        );
        assert_eq!(
            serde_json::from_str::<Value>(&batch.zone_times).unwrap(),
            serde_json::json!({"Europe/London": ms("2026-11-21T09:00:00Z"),
                               "Pacific/Auckland": ms("2026-11-20T20:00:00Z")})
        );
        assert_eq!(p.next_fire_at, Some(ms("2026-11-21T20:00:00Z")));

        // A date already past at the save in every zone still in use does not fire:
        // saved at 10:00Z on the 21st with Auckland, London and Los Angeles, the
        // 22nd was promised (Auckland's 09:00, 20:00Z on the 21st). Auckland's
        // subjects leave; at 20:00Z the latest date is London's 21st (09:00Z, before
        // the save), whose Los Angeles time (17:00Z) is before the promised instant.
        let saved_late = ScheduleRow {
            next_fire_at: Some(ms("2026-11-21T20:00:00Z")),
            updated_at: ms("2026-11-21T10:00:00Z"),
            ..digest
        };
        let left = [zone("Europe/London"), zone("America/Los_Angeles")];
        let p = plan_fire(&saved_late, ms("2026-11-21T20:00:20Z"), &left, "b", 5).unwrap();
        assert_eq!(p.batch, None);
        assert_eq!(p.next_fire_at, Some(ms("2026-11-22T09:00:00Z")));
    }

    #[test]
    fn a_one_off_fires_and_disables_itself_even_when_late() {
        let once = ScheduleRow {
            at: Some(ms("2026-11-21T22:00:00Z")),
            next_fire_at: Some(ms("2026-11-21T22:00:00Z")),
            updated_at: ms("2026-11-21T23:30:00Z"), // saved after its instant
            ..row("backfill")
        };
        let p = plan(&once, "2026-11-21T23:31:00Z");
        assert_eq!(p.batch.unwrap().key, "backfill:2026-11-21T22:00:00.000Z");
        assert_eq!((p.next_fire_at, p.enabled), (None, false));
    }

    #[test]
    fn the_daily_compatibility_row_keys_batches_like_the_old_daily_cron() {
        // The migration writes `daily` with next_fire_at = 12:00 UTC of its day.
        for migrated_at in ["2026-11-21T08:00:00Z", "2026-11-21T15:00:00Z"] {
            let daily = ScheduleRow {
                cron: Some("0 12 * * *".into()),
                next_fire_at: Some(ms("2026-11-21T12:00:00Z")),
                updated_at: ms(migrated_at),
                created_at: ms(migrated_at),
                ..row(DAILY_SCHEDULE_ID)
            };
            // Before noon nothing is due; from noon on (also when migrated after
            // noon) the first tick creates today's batch, then tomorrow's is next.
            for now in ["2026-11-21T12:00:30Z", "2026-11-21T18:00:00Z"] {
                let now = ms(now).max(ms(migrated_at));
                let p = plan_fire(&daily, now, &[], "b", 5).unwrap();
                assert_eq!(p.batch.unwrap().key, daily_batch_key(now), "{migrated_at}");
                assert_eq!(p.next_fire_at, Some(ms("2026-11-22T12:00:00Z")));
            }
        }
    }

    #[test]
    fn subject_schedules_map_every_zone_in_use_of_their_group() {
        let digest = ScheduleRow {
            cron: Some("0 9 * * *".into()),
            timezone: "subject".into(),
            group_name: Some("digest".into()),
            jitter_seconds: 600,
            next_fire_at: Some(ms("2026-11-20T19:00:00Z")),
            ..row("digest")
        };
        let zone = |g: &str, z: &str| ZoneUse {
            group_name: Some(g.into()),
            timezone: z.into(),
        };
        let in_use = [
            zone("digest", "Europe/Berlin"),
            zone("digest", "Pacific/Kiritimati"),
            zone("other", "America/New_York"),
            zone("digest", "Not/AZone"),
        ];
        let p = plan_fire(&digest, ms("2026-11-20T19:00:10Z"), &in_use, "b", 5).unwrap();
        let batch = p.batch.unwrap();
        assert_eq!(
            (batch.key.as_str(), batch.fire_at),
            ("digest:2026-11-21", ms("2026-11-20T19:00:00Z"))
        );
        assert_eq!(
            serde_json::from_str::<Value>(&batch.zone_times).unwrap(),
            serde_json::json!({"Europe/Berlin": ms("2026-11-21T08:00:00Z"),
                               "Pacific/Kiritimati": ms("2026-11-20T19:00:00Z")})
        );
        assert_eq!(
            (batch.group.as_deref(), batch.jitter_seconds),
            (Some("digest"), 600)
        );
        assert_eq!(
            p.next_fire_at.map(rfc3339).as_deref(),
            Some("2026-11-21T19:00:00.000Z")
        );

        assert_eq!(
            zones_for(None, &in_use).len(),
            3,
            "every group's zones, each once"
        );
        assert_eq!(zones_for(Some("nobody"), &in_use), vec![]);
        // The every-group rows (group NULL) are not any one group's.
        let any = [ZoneUse {
            group_name: None,
            timezone: "Asia/Tokyo".into(),
        }];
        assert_eq!(zones_for(None, &any).len(), 1);
        assert_eq!(zones_for(Some("digest"), &any), vec![]);
    }

    #[test]
    fn unreadable_rows_are_errors_and_can_be_switched_off() {
        let broken = ScheduleRow {
            cron: Some("0 9 * *".into()),
            next_fire_at: Some(0),
            ..row("broken")
        };
        let e = plan_fire(&broken, 1, &[], "b", 5).unwrap_err();
        assert_eq!(e.schedule_id, "broken");
        assert!(e.to_string().contains("cron"), "{e}");
        let off = disable(&broken);
        assert_eq!(
            (off.batch, off.next_fire_at, off.enabled, off.revision),
            (None, None, false, 3)
        );
        let zoneless = ScheduleRow {
            every_seconds: Some(60),
            timezone: "Gone/Zone".into(),
            ..row("z")
        };
        assert!(plan_fire(&zoneless, 1, &[], "b", 5).is_err());
    }

    #[test]
    fn next_fire_for_a_new_schedule() {
        let spec = ScheduleSpec::from_row(&every_60("2026-01-01T00:00:00Z")).unwrap();
        assert_eq!(
            next_fire_at(&spec, ms("2026-11-21T10:00:00Z"), &[]),
            Some(ms("2026-11-21T10:01:00Z"))
        );
        let off = ScheduleSpec {
            enabled: false,
            ..spec.clone()
        };
        assert_eq!(next_fire_at(&off, 0, &[]), None);
        let past = ScheduleSpec {
            timing: Timing::At { at: 5 },
            ..spec
        };
        assert_eq!(next_fire_at(&past, 1_000, &[]), Some(5));
    }
}
