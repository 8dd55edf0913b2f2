//! `PUT /schedules/{id}`: the body parsed strictly and validated completely, and the
//! id and group rules. Every failure is a 400 with a stable code (docs/api.md):
//! `invalid_json` (shape), `invalid_id` / `reserved_id` (the schedule id),
//! `invalid_schedule` (what and when), `invalid_cron`, `invalid_timezone`,
//! `invalid_priority`.

use chrono::DateTime;
use serde::Deserialize;
use serde_json::Value;

use super::cron::CronExpr;
use super::zone::{parse_zone, DEFAULT_ZONE, SUBJECT_ZONE};
use super::{ScheduleSpec, Timing, Zone};
use crate::core::batch::callback::OnFinish;
use crate::core::batch::fields::{parse_priority, validate_id};
use crate::core::error::ApiError;

pub const MIN_EVERY_SECONDS: i64 = 60;
pub const MAX_EVERY_SECONDS: i64 = 31_536_000;
pub const MAX_JITTER_SECONDS: i64 = 3_600;
/// Ad-hoc batches without a key get `adhoc:<batch id>`: no schedule may own that prefix.
pub const RESERVED_SCHEDULE_IDS: [&str; 1] = ["adhoc"];

/// The body as sent. `timezone` defaults to UTC, `jitter_seconds` to 0, `enabled`
/// to true; no `group` means every active subject.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleBody {
    pub cron: Option<String>,
    pub every_seconds: Option<i64>,
    pub at: Option<String>,
    pub timezone: Option<String>,
    pub group: Option<String>,
    pub jitter_seconds: Option<i64>,
    pub enabled: Option<bool>,
    /// The completion callback of every batch it fires (`core::callback`),
    /// validated with the target policy by the handler.
    pub on_finish: Option<OnFinish>,
    /// The priority of the batches it fires: any JSON, so that a wrong type is
    /// `invalid_priority` too (`core::requests::parse_priority`).
    pub priority: Option<Value>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_schedule", message)
}

/// A schedule id: the id rules, and nothing that could make its batch keys
/// (`<id>:<date or instant>`) collide with another's or be unaddressable.
pub fn validate_schedule_id(id: &str) -> Result<(), ApiError> {
    validate_id("schedule id", id)?;
    if id.contains(':') {
        // The key prefix up to the first ':' must name exactly one schedule.
        return Err(ApiError::bad_request(
            "invalid_id",
            "schedule id must not contain ':' (it separates the id from the date in batch keys)",
        ));
    }
    if id == "." || id == ".." {
        return Err(ApiError::bad_request(
            "invalid_id",
            "schedule id must not be \".\" or \"..\" (not addressable in a URL)",
        ));
    }
    if RESERVED_SCHEDULE_IDS.contains(&id) {
        return Err(ApiError::bad_request(
            "reserved_id",
            format!("schedule id {id:?} is reserved (ad-hoc batches use the key prefix \"{id}:\")"),
        ));
    }
    Ok(())
}

/// A subject's or schedule's `group`: the id rules.
pub fn validate_group(field: &str, group: &str) -> Result<(), ApiError> {
    validate_id(field, group)
}

/// Validate a body into a spec, every rule before anything is written. `now` only
/// serves to refuse a cron that never fires (`0 0 30 2 *`); a past `at` is allowed
/// and fires on the next tick.
pub fn validate_schedule(body: ScheduleBody, now: i64) -> Result<ScheduleSpec, ApiError> {
    let zone_name = body.timezone.as_deref().unwrap_or(DEFAULT_ZONE);
    let zone = if zone_name == SUBJECT_ZONE {
        Zone::Subject
    } else {
        Zone::Named(parse_zone(zone_name).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_timezone",
                format!("timezone: {zone_name:?} is neither an IANA time zone name (e.g. \"Europe/Berlin\") nor \"subject\""),
            )
        })?)
    };
    let timing = match (body.cron, body.every_seconds, body.at) {
        (Some(cron), None, None) => {
            Timing::Cron(CronExpr::parse(&cron).map_err(|e| {
                ApiError::bad_request("invalid_cron", format!("cron {cron:?}: {e}"))
            })?)
        }
        (None, Some(seconds), None) => {
            if !(MIN_EVERY_SECONDS..=MAX_EVERY_SECONDS).contains(&seconds) {
                return Err(invalid(format!(
                    "every_seconds must be {MIN_EVERY_SECONDS} to {MAX_EVERY_SECONDS}, got {seconds}"
                )));
            }
            Timing::Every { seconds }
        }
        (None, None, Some(at)) => Timing::At {
            at: DateTime::parse_from_rfc3339(&at)
                .map_err(|e| invalid(format!("at {at:?} is not an RFC 3339 instant: {e}")))?
                .timestamp_millis(),
        },
        _ => {
            return Err(invalid(
                "give exactly one of \"cron\", \"every_seconds\" or \"at\"",
            ))
        }
    };
    match (&timing, &zone) {
        (Timing::Cron(cron), Zone::Subject) if !cron.fires_at_most_daily() => {
            return Err(invalid(format!(
                "with \"timezone\": \"subject\" the cron must fire at most once a day (one minute and one hour, e.g. \"0 9 * * *\"), got {:?}",
                cron.text()
            )))
        }
        (Timing::Every { .. } | Timing::At { .. }, _) if zone_name != DEFAULT_ZONE => {
            return Err(invalid(
                "timezone applies to cron schedules only: every_seconds and at are absolute (omit timezone)",
            ))
        }
        _ => {}
    }
    if let Some(group) = &body.group {
        validate_group("group", group)?;
    }
    let jitter_seconds = body.jitter_seconds.unwrap_or(0);
    if !(0..=MAX_JITTER_SECONDS).contains(&jitter_seconds) {
        return Err(invalid(format!(
            "jitter_seconds must be 0 to {MAX_JITTER_SECONDS}, got {jitter_seconds}"
        )));
    }
    let mut spec = ScheduleSpec {
        timing,
        zone,
        group: body.group,
        jitter_seconds,
        enabled: body.enabled.unwrap_or(true),
        priority: 0,
    };
    if let Timing::Cron(cron) = &spec.timing {
        if spec.first_after(now, &[]).is_none() {
            return Err(ApiError::bad_request(
                "invalid_cron",
                format!("cron {:?} never fires", cron.text()),
            ));
        }
    }
    // After what and when, as `POST /batches` checks it after the items.
    spec.priority = parse_priority(body.priority.as_ref())?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::batch::fields::parse_json;
    use serde_json::{json, Value};

    const NOW: i64 = 1_795_262_400_000; // 2026-11-21T12:00:00Z

    fn check(v: Value) -> Result<ScheduleSpec, ApiError> {
        validate_schedule(parse_json(v.to_string().as_bytes())?, NOW)
    }

    fn code(v: Value) -> &'static str {
        check(v.clone())
            .map(|_| panic!("{v} was accepted"))
            .unwrap_err()
            .code()
    }

    #[test]
    fn the_issue_example_is_valid_and_defaults_fill_in() {
        let spec = check(
            json!({"cron": "0 9 * * *", "timezone": "Europe/Berlin", "group": "digest",
                                "jitter_seconds": 600, "enabled": true}),
        )
        .unwrap();
        assert_eq!(spec.cron_text(), Some("0 9 * * *"));
        assert_eq!(spec.zone.name(), "Europe/Berlin");
        assert_eq!(
            (spec.group.as_deref(), spec.jitter_seconds, spec.enabled),
            (Some("digest"), 600, true)
        );

        let spec = check(json!({"every_seconds": 60})).unwrap();
        assert_eq!(
            (
                spec.every_seconds(),
                spec.zone.name(),
                spec.group,
                spec.jitter_seconds,
                spec.enabled
            ),
            (Some(60), "UTC", None, 0, true)
        );
        let spec = check(json!({"at": "2026-11-21T23:00:00+01:00", "enabled": false})).unwrap();
        assert_eq!((spec.at(), spec.enabled), (Some(1_795_298_400_000), false));
        let spec = check(json!({"cron": "30 7 * * MON-FRI", "timezone": "subject"})).unwrap();
        assert_eq!(spec.zone, Zone::Subject);
        // A past one-off is allowed: it fires on the next tick.
        assert!(check(json!({"at": "2000-01-01T00:00:00Z"})).is_ok());
    }

    #[test]
    fn every_bad_body_has_its_code() {
        // Shape: unknown fields and wrong types.
        assert_eq!(
            code(json!({"cron": "0 9 * * *", "notify": {"url": "https://x"}})),
            "invalid_json"
        );
        assert_eq!(
            code(json!({"cron": "0 9 * * *", "on_finish": {"url": "https://x", "secret": "s"}})),
            "invalid_json"
        );
        assert_eq!(code(json!({"every_seconds": "60"})), "invalid_json");
        assert_eq!(code(json!({"every_seconds": 60.5})), "invalid_json");
        assert_eq!(
            code(json!({"cron": "0 9 * * *", "enabled": "yes"})),
            "invalid_json"
        );
        // Exactly one of cron / every_seconds / at.
        assert_eq!(code(json!({})), "invalid_schedule");
        assert_eq!(
            code(json!({"cron": "0 9 * * *", "every_seconds": 60})),
            "invalid_schedule"
        );
        assert_eq!(
            code(json!({"every_seconds": 60, "at": "2026-11-21T23:00:00Z"})),
            "invalid_schedule"
        );
        // Ranges.
        assert_eq!(code(json!({"every_seconds": 59})), "invalid_schedule");
        assert_eq!(
            code(json!({"every_seconds": 31_536_001})),
            "invalid_schedule"
        );
        assert!(check(json!({"every_seconds": 31_536_000})).is_ok());
        assert_eq!(
            code(json!({"every_seconds": 60, "jitter_seconds": -1})),
            "invalid_schedule"
        );
        assert_eq!(
            code(json!({"every_seconds": 60, "jitter_seconds": 3_601})),
            "invalid_schedule"
        );
        assert!(check(json!({"every_seconds": 60, "jitter_seconds": 3_600})).is_ok());
        // Instants.
        assert_eq!(code(json!({"at": "tomorrow"})), "invalid_schedule");
        assert_eq!(
            code(json!({"at": "2026-11-21T23:00:00"})),
            "invalid_schedule"
        ); // no offset
           // Cron text, and a cron that never fires.
        assert_eq!(code(json!({"cron": "0 9 * *"})), "invalid_cron");
        assert_eq!(code(json!({"cron": "0 9 * * 0"})), "invalid_cron");
        assert_eq!(code(json!({"cron": "@daily"})), "invalid_cron");
        assert_eq!(code(json!({"cron": "0 0 30 2 *"})), "invalid_cron");
        // Zones.
        assert_eq!(
            code(json!({"cron": "0 9 * * *", "timezone": "Mars/Olympus"})),
            "invalid_timezone"
        );
        assert_eq!(
            code(json!({"cron": "0 9 * * *", "timezone": "utc"})),
            "invalid_timezone"
        );
        assert_eq!(
            code(json!({"cron": "0 9,17 * * *", "timezone": "subject"})),
            "invalid_schedule"
        );
        assert_eq!(
            code(json!({"cron": "*/15 * * * *", "timezone": "subject"})),
            "invalid_schedule"
        );
        assert_eq!(
            code(json!({"every_seconds": 86_400, "timezone": "subject"})),
            "invalid_schedule"
        );
        assert_eq!(
            code(json!({"every_seconds": 60, "timezone": "Europe/Berlin"})),
            "invalid_schedule"
        );
        assert_eq!(
            code(json!({"at": "2026-11-21T23:00:00Z", "timezone": "subject"})),
            "invalid_schedule"
        );
        assert!(check(json!({"every_seconds": 60, "timezone": "UTC"})).is_ok());
        // Group: the id rules.
        assert_eq!(
            code(json!({"every_seconds": 60, "group": ""})),
            "invalid_id"
        );
        assert_eq!(
            code(json!({"every_seconds": 60, "group": "x".repeat(201)})),
            "invalid_id"
        );
    }

    #[test]
    fn messages_name_the_field_and_the_rule() {
        let message = |v: Value| check(v).unwrap_err().public_message();
        assert!(message(json!({"every_seconds": 5})).contains("60 to 31536000"));
        assert!(message(json!({"cron": "0 9 * * 0"})).contains("\"0 9 * * 0\""));
        assert!(message(json!({"cron": "* 9 * * *", "timezone": "subject"}))
            .contains("at most once a day"));
        assert!(
            message(json!({"cron": "0 9 * * *", "timezone": "Nowhere"})).contains("\"Nowhere\"")
        );
    }

    #[test]
    fn schedule_ids_cannot_make_keys_collide() {
        for ok in ["daily", "digest", "feeds-15min", "é", "a.b"] {
            assert!(validate_schedule_id(ok).is_ok(), "{ok}");
        }
        for (bad, want) in [
            ("", "invalid_id"),
            ("a:b", "invalid_id"),
            ("digest:2026-11-21", "invalid_id"),
            (".", "invalid_id"),
            ("..", "invalid_id"),
            ("line\nbreak", "invalid_id"),
            ("adhoc", "reserved_id"),
        ] {
            assert_eq!(
                validate_schedule_id(bad).unwrap_err().code(),
                want,
                "{bad:?}"
            );
        }
        assert_eq!(
            validate_schedule_id(&"x".repeat(201)).unwrap_err().code(),
            "invalid_id"
        );
    }
}
