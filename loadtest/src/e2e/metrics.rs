//! The numbers behind the dashboard, checked over HTTP by the e2e suite:
//! `/metrics` against the metrics docs/reference/metrics.md names (with
//! plausible values) and a finished batch's timeline against its counters.

use crate::runtime::api::{Api, Batch};
use anyhow::{Context, Result};
use reqwest::Method;
use std::collections::BTreeMap;
use std::path::Path;

/// The timeline of a finished batch adds up to its counters (both count the same
/// terminal writes: the drain's commits and the reaper's failures), and its rate
/// and ETA are null.
pub async fn timeline_matches(api: &Api, batch: &Batch) -> Result<(), String> {
    let path = format!(
        "/batches/{}/timeline?bucket_seconds=10",
        crate::runtime::api::encode(&batch.id.0)
    );
    let t = api
        .admin_raw(Method::GET, &path, None)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let t = t
        .json()
        .ok_or_else(|| format!("not JSON: {}", crate::runtime::api::clip(&t.body)))?;
    let points = t["points"].as_array().cloned().unwrap_or_default();
    // Every point starts on a whole bucket.
    for p in &points {
        let at = p["at"]
            .as_str()
            .and_then(|a| crate::run::metrics::timestamp_ms(a).ok());
        if at.is_none_or(|ms| ms % 10_000 != 0) {
            return Err(format!("point {p} does not start on a 10 s bucket"));
        }
    }
    let sum = |field: &str| {
        points
            .iter()
            .map(|p| p[field].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    let (completed, failed) = (sum("completed"), sum("failed"));
    if (completed, failed) != (batch.completed, batch.failed) || points.is_empty() {
        return Err(format!(
            "timeline sums to {completed} completed, {failed} failed over {} points; the batch says {} and {}",
            points.len(),
            batch.completed,
            batch.failed
        ));
    }
    let now = api.batch(&batch.id).await.map_err(|e| format!("{e:#}"))?;
    if now.rate_per_min.is_some() || now.eta.is_some() {
        return Err(format!(
            "finished batch has rate {:?}, eta {:?}",
            now.rate_per_min, now.eta
        ));
    }
    Ok(())
}

/// Parses the exposition text into `name{labels}` → value (comments skipped).
pub fn parse_metrics(text: &str) -> Result<BTreeMap<String, f64>> {
    let mut samples = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line
            .rsplit_once(' ')
            .with_context(|| format!("no value in {line:?}"))?;
        let value: f64 = value
            .parse()
            .with_context(|| format!("bad value in {line:?}"))?;
        samples.insert(series.to_string(), value);
    }
    Ok(samples)
}

/// Every metric the docs name is in a scrape, and the values are plausible
/// after `daily` ran: its completions and failures are in the last hour's, no
/// invocation exceeded the budget, the per-item costs are in range.
pub async fn metrics_plausible(api: &Api, repo: &Path, daily: &Batch) -> Result<(), String> {
    let docs = std::fs::read_to_string(repo.join("docs/reference/metrics.md"))
        .map_err(|e| format!("docs/reference/metrics.md: {e}"))?;
    let r = api
        .admin_raw(Method::GET, "/metrics", None)
        .await
        .map_err(|e| format!("{e:#}"))?;
    if !r.status.is_success() {
        return Err(format!(
            "GET /metrics: {} {}",
            r.status,
            crate::runtime::api::clip(&r.body)
        ));
    }
    let samples = parse_metrics(&r.body).map_err(|e| format!("{e:#}"))?;
    let names = cron_fanout::core::metrics::names_in(&docs);
    if names.len() < 5 {
        return Err(format!("docs/reference/metrics.md names only {names:?}"));
    }
    // A limit's gauges have one sample per defined limit, none while there is
    // none (`limits` checks them with limits defined).
    let per_limit = cron_fanout::core::metrics::LIMIT_FAMILIES;
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !per_limit.contains(&n.as_str()))
        .filter(|n| {
            !samples
                .keys()
                .any(|k| k == *n || k.starts_with(&format!("{n}{{")))
        })
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing from the scrape: {missing:?}"));
    }
    let get = |k: &str| samples.get(k).copied().unwrap_or(f64::NAN);
    let mut wrong = Vec::new();
    let mut want = |ok: bool, what: String| {
        if !ok {
            wrong.push(what);
        }
    };
    let completed = get("cron_fanout_last_hour_items{event=\"completed\"}");
    want(
        completed >= daily.completed as f64,
        format!(
            "last hour completed {completed} < daily {}",
            daily.completed
        ),
    );
    let failed = get("cron_fanout_last_hour_items{event=\"failed\"}");
    want(
        failed >= daily.failed as f64,
        format!("last hour failed {failed} < daily {}", daily.failed),
    );
    let claimed = get("cron_fanout_last_hour_items{event=\"claimed\"}");
    want(
        claimed >= completed + failed,
        format!("claimed {claimed} < completed + failed"),
    );
    let max = get("cron_fanout_last_hour_subrequests_max");
    let budget = get("cron_fanout_subrequest_budget");
    want(
        max > 0.0 && max <= budget,
        format!("subrequests max {max}, budget {budget}"),
    );
    let statements = get("cron_fanout_last_hour_d1_statements_per_item");
    want(
        statements > 0.0 && statements < 1.0,
        format!("statements per item {statements}"),
    );
    let rows = get("cron_fanout_last_hour_d1_rows_written_per_item");
    want(
        rows > 1.0 && rows < 20.0,
        format!("rows written per item {rows}"),
    );
    let invocations: f64 = samples
        .iter()
        .filter(|(k, _)| k.starts_with("cron_fanout_last_hour_invocations{"))
        .map(|(_, v)| v)
        .sum();
    want(
        invocations >= 1.0,
        format!("{invocations} invocations in the last hour"),
    );
    let due = get("cron_fanout_items_due");
    want(
        due >= 0.0 && due <= get("cron_fanout_items_due_cap"),
        format!("items due {due}"),
    );
    want(
        get("cron_fanout_queue_lag_seconds") >= 0.0,
        "queue lag < 0".into(),
    );
    for status in ["pending", "processing", "completed", "failed"] {
        let v = get(&format!("cron_fanout_batch_items{{status=\"{status}\"}}"));
        want(v >= 0.0, format!("batch_items {status} = {v}"));
    }
    if wrong.is_empty() {
        println!("#   metrics: last hour {completed} completed, {failed} failed, {claimed} claimed, {statements:.3} statements and {rows:.2} rows written per item");
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_parses_into_series() {
        let text = "# HELP a x\n# TYPE a gauge\na 1\nb{status=\"pending\"} 2.5\nc NaN\n";
        let m = parse_metrics(text).unwrap();
        assert_eq!(m["a"], 1.0);
        assert_eq!(m["b{status=\"pending\"}"], 2.5);
        assert!(m["c"].is_nan());
        assert!(parse_metrics("novalue\n").is_err());
    }
}
