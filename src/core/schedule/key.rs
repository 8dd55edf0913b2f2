//! Batch keys of schedules and the keys ad-hoc batches may not use.
//!
//! A schedule's batch key is `<schedule id>:<suffix>` ([`Occurrence::key_suffix`]).
//! Schedule ids contain no `:`, so the text before a key's first `:` names the only
//! schedule that may create it. Three rules keep every key owned by one creator:
//! `daily:` is always reserved (the compatibility schedule's prefix, refused by
//! `POST /batches` since before schedules existed); `POST /batches` refuses a key
//! whose prefix is an existing schedule's id ([`adhoc_key_prefix`]); and a new
//! schedule may not take an id that ad-hoc batches already use as a key prefix
//! (`Store::key_prefix_used_by_others`).
//!
//! [`Occurrence::key_suffix`]: super::occurrence::Occurrence::key_suffix

use super::occurrence::Occurrence;
use crate::core::error::ApiError;

/// The compatibility schedule that replaces the old `DAILY_CRON` batch.
pub const DAILY_SCHEDULE_ID: &str = "daily";

/// The batch key of one fire.
pub fn batch_key(schedule_id: &str, occurrence: &Occurrence) -> String {
    format!("{schedule_id}:{}", occurrence.key_suffix)
}

/// Check a `POST /batches` key: `Err(reserved_key)` for `daily:` keys, else the
/// schedule id the key would belong to (the text before its first `:`), which the
/// handler must refuse with [`reserved_key`] if such a schedule exists.
pub fn adhoc_key_prefix(key: &str) -> Result<Option<&str>, ApiError> {
    let prefix = key.split_once(':').map(|(prefix, _)| prefix);
    if prefix == Some(DAILY_SCHEDULE_ID) {
        return Err(reserved_key(DAILY_SCHEDULE_ID));
    }
    Ok(prefix)
}

/// 400 `reserved_key`: keys starting with `<schedule_id>:` belong to that schedule.
pub fn reserved_key(schedule_id: &str) -> ApiError {
    ApiError::bad_request(
        "reserved_key",
        format!(
            "keys starting with \"{schedule_id}:\" are reserved for the schedule {schedule_id:?}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_join_the_id_and_the_suffix() {
        let occ = Occurrence {
            fire_at: 0,
            key_suffix: "2026-11-21".into(),
            zone_times: vec![],
        };
        assert_eq!(batch_key("daily", &occ), "daily:2026-11-21");
    }

    #[test]
    fn adhoc_keys_name_the_schedule_they_would_collide_with() {
        assert_eq!(adhoc_key_prefix("backfill-2026-11").unwrap(), None);
        assert_eq!(
            adhoc_key_prefix("digest:2026-11-21").unwrap(),
            Some("digest")
        );
        assert_eq!(adhoc_key_prefix("a:b:c").unwrap(), Some("a"));
        assert_eq!(adhoc_key_prefix(":x").unwrap(), Some(""));
        let e = adhoc_key_prefix("daily:2026-11-21").unwrap_err();
        assert_eq!((e.status(), e.code()), (400, "reserved_key"));
        // Only the exact prefix is reserved.
        assert_eq!(
            adhoc_key_prefix("daily-report:1").unwrap(),
            Some("daily-report")
        );
        assert_eq!(adhoc_key_prefix("daily").unwrap(), None);
    }
}
