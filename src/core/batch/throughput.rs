//! A batch's rate, ETA and timeline, derived from what the Worker already writes:
//! each invocation summary carries the items every batch ended in it
//! (`Tally::per_batch`). Reading those summaries costs one row per invocation
//! (about one a minute in production) where reading `cron_queue.completed_at`
//! would cost one row per item on every dashboard refresh.

use crate::core::batch::model::BatchRow;
use crate::core::error::ApiError;
use crate::core::time::parse_rfc3339;

/// The rate is measured over the invocations that ended in this window.
pub const RATE_WINDOW_MS: i64 = 5 * 60_000;
/// A span shorter than this says nothing about a rate (a batch created a moment
/// ago): the rate is unknown rather than a huge or zero number.
pub const MIN_RATE_SPAN_MS: i64 = 1_000;
/// Default timeline bucket: completions per minute.
pub const DEFAULT_BUCKET_SECONDS: i64 = 60;
pub const MIN_BUCKET_SECONDS: i64 = 10;
pub const MAX_BUCKET_SECONDS: i64 = 3_600;
/// Most buckets one timeline answer carries (a day of minutes).
pub const MAX_POINTS: i64 = 1_440;

/// A running batch's rate and expected end; `None` when unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Estimate {
    /// Items ended (completed or failed) per minute, one decimal.
    pub rate_per_min: Option<f64>,
    /// When the remaining items should be done at that rate (ms).
    pub eta: Option<i64>,
}

/// Rate and ETA of `batch` at `now`, given how many of its items ended in the
/// invocations that ended since `now - RATE_WINDOW_MS`. Unknown for a batch
/// that is not running, and for a rate measured over less than a second; the ETA
/// is unknown while the rate is zero, and `now` once nothing is left.
pub fn estimate(batch: &BatchRow, ended_in_window: i64, now: i64) -> Estimate {
    if batch.status != "running" {
        return Estimate::default();
    }
    // Nothing of this batch can have ended before it was created.
    let span = now - (now - RATE_WINDOW_MS).max(batch.created_at);
    if span < MIN_RATE_SPAN_MS {
        return Estimate::default();
    }
    let per_min = ended_in_window.max(0) as f64 * 60_000.0 / span as f64;
    let remaining = (batch.total - batch.completed - batch.failed).max(0);
    let eta = if remaining == 0 {
        Some(now)
    } else if per_min > 0.0 {
        Some(now + (remaining as f64 * 60_000.0 / per_min).ceil() as i64)
    } else {
        None
    };
    Estimate {
        rate_per_min: Some((per_min * 10.0).round() / 10.0),
        eta,
    }
}

/// `GET /batches/{id}/timeline` query: `bucket_seconds` and `since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineQuery {
    pub bucket_ms: i64,
    /// Only buckets that end after this time (ms): a refresh asks for what is new.
    pub since: Option<i64>,
}

pub fn parse_timeline_query(pairs: &[(String, String)]) -> Result<TimelineQuery, ApiError> {
    let mut q = TimelineQuery {
        bucket_ms: DEFAULT_BUCKET_SECONDS * 1_000,
        since: None,
    };
    let bad = |message: String| ApiError::bad_request("invalid_query", message);
    for (name, value) in pairs {
        match name.as_str() {
            "bucket_seconds" => {
                let seconds = value
                    .parse::<i64>()
                    .ok()
                    .filter(|s| (MIN_BUCKET_SECONDS..=MAX_BUCKET_SECONDS).contains(s))
                    .ok_or_else(|| {
                        bad(format!(
                            "bucket_seconds must be {MIN_BUCKET_SECONDS} to {MAX_BUCKET_SECONDS}"
                        ))
                    })?;
                q.bucket_ms = seconds * 1_000;
            }
            "since" => {
                q.since =
                    Some(parse_rfc3339(value).ok_or_else(|| {
                        bad(format!("since must be an RFC 3339 time, got {value:?}"))
                    })?)
            }
            other => return Err(bad(format!("unknown query parameter {other:?}"))),
        }
    }
    Ok(q)
}

/// The longest a scheduled invocation runs (the platform's wall-time limit for
/// cron invocations). Summaries are counted by when their invocation *ended*, and
/// the index is on when it started, so a read goes back this much further.
pub const LOOKBACK_MS: i64 = 15 * 60_000;

/// Which invocations a timeline counts: those that ended from `ended_from`
/// (the batch's creation, or the start of the bucket holding `since`, whichever
/// is later) and started by `to` (the batch's end, or `now`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub ended_from: i64,
    pub to: i64,
    /// The start of the first bucket (the chart's left edge).
    pub first_bucket: i64,
}

pub fn timeline_window(batch: &BatchRow, q: TimelineQuery, now: i64) -> Window {
    let bucket = |t: i64| t.div_euclid(q.bucket_ms) * q.bucket_ms;
    let ended_from = q
        .since
        .map_or(batch.created_at, |s| bucket(s).max(batch.created_at));
    Window {
        ended_from,
        to: batch.finished_at.unwrap_or(now).max(ended_from),
        first_bucket: bucket(ended_from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_000_000_000;

    fn batch(status: &str, created_ago_ms: i64, total: i64, ended: i64) -> BatchRow {
        BatchRow {
            id: "b".into(),
            key: "k".into(),
            status: status.into(),
            total,
            completed: ended,
            failed: 0,
            cancelled: 0,
            processing: 0,
            created_at: NOW - created_ago_ms,
            finished_at: None,
            schedule_id: None,
            on_finish: None,
            callback_status: None,
            callback_attempts: None,
            callback_error: None,
            filling: 0,
            priority: 0,
            cost: None,
        }
    }

    fn query(pairs: &[(&str, &str)]) -> Result<TimelineQuery, ApiError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse_timeline_query(&pairs)
    }

    #[test]
    fn the_rate_is_items_ended_per_minute_over_the_window() {
        // 1,000 items ended over the whole 5-minute window: 200 a minute; 600 left
        // take 3 more minutes.
        let e = estimate(&batch("running", 3_600_000, 2_000, 1_400), 1_000, NOW);
        assert_eq!(e.rate_per_min, Some(200.0));
        assert_eq!(e.eta, Some(NOW + 180_000));
    }

    #[test]
    fn a_young_batch_is_measured_since_it_was_created() {
        // Created 30 s ago, 50 ended: 100 a minute, not 10.
        let e = estimate(&batch("running", 30_000, 100, 50), 50, NOW);
        assert_eq!(e.rate_per_min, Some(100.0));
        assert_eq!(e.eta, Some(NOW + 30_000));
    }

    #[test]
    fn the_rate_rounds_to_one_decimal_and_the_eta_rounds_up() {
        // 7 items in 5 minutes: 1.4 a minute; 3 left: 128,571.4 ms → 128,572.
        let e = estimate(&batch("running", 600_000, 10, 7), 7, NOW);
        assert_eq!(e.rate_per_min, Some(1.4));
        assert_eq!(e.eta, Some(NOW + 128_572));
    }

    #[test]
    fn unknown_when_not_running_too_young_or_stalled() {
        assert_eq!(
            estimate(&batch("finished", 60_000, 10, 10), 10, NOW),
            Estimate::default()
        );
        assert_eq!(
            estimate(&batch("running", 999, 10, 0), 0, NOW),
            Estimate::default()
        );
        // Nothing ended lately: the rate is a known zero, the ETA unknown.
        let stalled = estimate(&batch("running", 600_000, 10, 2), 0, NOW);
        assert_eq!((stalled.rate_per_min, stalled.eta), (Some(0.0), None));
        // Nothing left (the next tick marks it finished): due now.
        let done = estimate(&batch("running", 600_000, 10, 10), 0, NOW);
        assert_eq!(done.eta, Some(NOW));
    }

    #[test]
    fn timeline_query_defaults_and_bounds() {
        assert_eq!(
            query(&[]),
            Ok(TimelineQuery {
                bucket_ms: 60_000,
                since: None
            })
        );
        let q = query(&[
            ("bucket_seconds", "10"),
            ("since", "2026-11-18T11:06:40.123Z"),
        ])
        .unwrap();
        assert_eq!((q.bucket_ms, q.since), (10_000, Some(1_795_000_000_123)));
        assert_eq!(
            query(&[("bucket_seconds", "3600")]).unwrap().bucket_ms,
            3_600_000
        );
        for bad in [
            ("bucket_seconds", "9"),
            ("bucket_seconds", "3601"),
            ("bucket_seconds", "ten"),
            ("since", "yesterday"),
            ("limit", "5"),
        ] {
            let e = query(&[bad]).unwrap_err();
            assert_eq!(e.code(), "invalid_query", "{bad:?}");
        }
    }

    #[test]
    fn the_window_counts_from_the_batch_or_the_bucket_of_since() {
        let mut b = batch("running", 150_000, 10, 0); // created at NOW - 2.5 min
        let q = TimelineQuery {
            bucket_ms: 60_000,
            since: None,
        };
        let w = timeline_window(&b, q, NOW);
        assert_eq!((w.ended_from, w.to), (b.created_at, NOW));
        assert_eq!(w.first_bucket % 60_000, 0);
        assert!(w.first_bucket <= b.created_at && b.created_at - w.first_bucket < 60_000);
        // A refresh: from the start of the bucket holding `since`, never before
        // the batch.
        let since = NOW - 30_000;
        let w = timeline_window(
            &b,
            TimelineQuery {
                since: Some(since),
                ..q
            },
            NOW,
        );
        assert_eq!(w.ended_from, since - since % 60_000);
        assert_eq!(w.first_bucket, w.ended_from);
        let w = timeline_window(
            &b,
            TimelineQuery {
                since: Some(0),
                ..q
            },
            NOW,
        );
        assert_eq!(w.ended_from, b.created_at);
        // A finished batch's window ends when it finished.
        b.finished_at = Some(NOW - 10_000);
        assert_eq!(timeline_window(&b, q, NOW).to, NOW - 10_000);
    }
}
