//! Invocation summaries and what is read from them: throughput, timelines, `/metrics`.

use super::*;
use crate::core::flow::limit_view::{self, LimitRow};
use crate::core::metrics::{LimitGauge, SourceCost};

impl<D: Db> Store<D> {
    /// Store one invocation's summary (one statement, one row).
    pub async fn record_invocation(&self, summary: &InvocationSummary) -> StoreResult<()> {
        let json = serde_json::to_string(summary).map_err(|e| StoreError::Json(e.to_string()))?;
        self.db
            .run::<Value>(sql::RecordInvocation { summary: json })
            .await
            .map(|_| ())
    }

    /// Items each of `batch_ids` ended in the invocations that ended at or after
    /// `since` (one statement over the last few summaries).
    pub async fn recent_throughput(
        &self,
        since: i64,
        batch_ids: &[&str],
    ) -> StoreResult<BTreeMap<String, BatchTally>> {
        #[derive(Deserialize)]
        struct Row {
            batch_id: String,
            completed: i64,
            failed: i64,
        }
        let ids = serde_json::to_string(batch_ids).map_err(|e| StoreError::Json(e.to_string()))?;
        let statement = sql::RecentThroughput {
            since,
            batch_ids: ids,
            lookback_ms: throughput::LOOKBACK_MS,
        };
        let rows: Vec<Row> = self.db.run(statement).await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let counts = BatchTally {
                    completed: r.completed,
                    failed: r.failed,
                    cost: None,
                };
                (r.batch_id, counts)
            })
            .collect())
    }

    /// Batch `batch_id`'s items ended per bucket of `bucket_ms`, from the
    /// invocations of `window`, oldest first, at most `limit` buckets.
    pub async fn batch_timeline(
        &self,
        batch_id: &str,
        window: throughput::Window,
        bucket_ms: i64,
        limit: i64,
    ) -> StoreResult<Vec<TimelineBucket>> {
        self.db
            .run(sql::BatchTimeline {
                batch_id,
                ended_from: window.ended_from,
                to: window.to,
                bucket_ms,
                limit,
                lookback_ms: throughput::LOOKBACK_MS,
            })
            .await
    }

    /// What `GET /metrics` reports except the settings: one call of four
    /// statements (the cost per batch source, the limits, what they use, the rest).
    pub async fn metrics_snapshot(&self, now: i64) -> StoreResult<Snapshot> {
        #[derive(Deserialize)]
        struct Row {
            running_batches: i64,
            total: i64,
            completed: i64,
            failed: i64,
            processing: i64,
            due: i64,
            oldest_due: Option<i64>,
            dead_letters: i64,
            invocations: i64,
            claimed: i64,
            hour_completed: i64,
            retried: i64,
            hour_failed: i64,
            lost_leases: i64,
            released: i64,
            reaped: i64,
            subrequests_max: i64,
            d1_statements: i64,
            d1_rows_written: i64,
            d1_rows_read: i64,
            /// JSON object: stop reason → invocations.
            stop_reasons: String,
        }
        let statement = sql::MetricsSnapshot {
            now,
            due_cap: metrics::DUE_CAP,
            window_start: now - metrics::WINDOW_MS,
            dead_letter_cap: metrics::DEAD_LETTER_CAP,
        };
        // The limits' gauges in the same call: the first LIMITS_CAP limits and
        // what they are using (nothing of the queue is read while none is defined).
        // And the cost per batch source: one row per batch of the last day.
        let by_source = sql::CostBySource {
            since: now - metrics::SOURCE_WINDOW_MS,
            limit: metrics::SOURCES_CAP,
        };
        let mut read = self
            .db
            .batch_results(vec![
                by_source.bind(),
                sql::ListLimits {
                    after: "",
                    limit: metrics::LIMITS_CAP,
                }
                .bind(),
                super::limits::limit_usage(now),
                statement.bind(),
            ])
            .await?;
        let row: Row = decode(read.pop().unwrap_or_default())?
            .pop()
            .ok_or_else(|| StoreError::Missing("the metrics row".into()))?;
        let usage = super::limits::usage_of(read.pop().unwrap_or_default())?;
        let limits: Vec<LimitRow> = decode(read.pop().unwrap_or_default())?;
        let by_source: Vec<SourceCost> = decode(read.pop().unwrap_or_default())?;
        let limits = limits
            .iter()
            .map(|l| LimitGauge::from_view(&limit_view::view(l, &usage, now, metrics::DUE_CAP)))
            .collect();
        let stop_reasons =
            serde_json::from_str(&row.stop_reasons).map_err(|e| StoreError::Json(e.to_string()))?;
        Ok(Snapshot {
            running_batches: row.running_batches,
            total: row.total,
            completed: row.completed,
            failed: row.failed,
            processing: row.processing,
            due: row.due,
            oldest_due: row.oldest_due,
            dead_letters: row.dead_letters,
            hour: HourSums {
                invocations: row.invocations,
                claimed: row.claimed,
                completed: row.hour_completed,
                retried: row.retried,
                failed: row.hour_failed,
                lost_leases: row.lost_leases,
                released: row.released,
                reaped: row.reaped,
                subrequests_max: row.subrequests_max,
                d1_statements: row.d1_statements,
                d1_rows_written: row.d1_rows_written,
                d1_rows_read: row.d1_rows_read,
            },
            stop_reasons,
            subrequest_budget: 0,
            limits,
            by_source,
        })
    }

    /// The newest `limit` summaries, newest first.
    pub async fn list_invocations(&self, limit: i64) -> StoreResult<Vec<Invocation>> {
        // The statement builds each row's JSON (see list_invocations.sql).
        #[derive(Deserialize)]
        struct Row {
            invocation: String,
        }
        let rows: Vec<Row> = self.db.run(sql::ListInvocations { limit }).await?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(&r.invocation).map_err(|e| StoreError::Json(e.to_string()))
            })
            .collect()
    }
}
