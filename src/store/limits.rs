//! Limits (`PUT /limits/{key}`): saved, read with what they are using, deleted
//! with their rate state. The claim reads them itself (`sql/claim_selection.sql`).

use super::*;
use crate::core::flow::limit_view::{KeyUseRow, LearnedKey, LimitRow, PausedKey, Usage};
use crate::core::flow::limits::Limit;

/// `GET /limits` lists at most this many paused keys (the longest pauses).
pub const PAUSED_LISTED: i64 = 100;

impl<D: Db> Store<D> {
    /// Create or replace a validated limit; the stored row (without state).
    pub async fn upsert_limit(&self, key: &str, limit: &Limit, now: i64) -> StoreResult<LimitRow> {
        let statement = sql::UpsertLimit {
            key,
            rate: limit.rate,
            per_seconds: limit.per_seconds,
            burst: limit.burst,
            concurrency: limit.concurrency,
            now,
        };
        self.db
            .run(statement)
            .await?
            .pop()
            .ok_or_else(|| StoreError::Missing(format!("limit {key:?}, right after writing it,")))
    }

    /// One limit and what every limit is using (one call of two statements), or
    /// `None` without a limit for `key`.
    pub async fn get_limit(&self, key: &str, now: i64) -> StoreResult<Option<(LimitRow, Usage)>> {
        let mut read = self
            .db
            .batch_results(vec![sql::GetLimit { key }.bind(), limit_usage(now)])
            .await?;
        let usage = usage_of(read.pop().unwrap_or_default())?;
        let row: Option<LimitRow> = decode(read.pop().unwrap_or_default())?.pop();
        Ok(row.map(|row| (row, usage)))
    }

    /// A page of limits in key order after `after`, what every limit is using,
    /// the keys paused now, at most [`PAUSED_LISTED`], and the keys with a
    /// learned rate in force, as many (one call of four statements).
    pub async fn list_limits(
        &self,
        after: &str,
        limit: i64,
        now: i64,
    ) -> StoreResult<(Vec<LimitRow>, Usage, Vec<PausedKey>, Vec<LearnedKey>)> {
        let mut read = self
            .db
            .batch_results(vec![
                sql::ListLimits { after, limit }.bind(),
                limit_usage(now),
                sql::ListPausedKeys {
                    now,
                    limit: PAUSED_LISTED,
                }
                .bind(),
                sql::ListLearnedKeys {
                    now,
                    limit: PAUSED_LISTED,
                    key: None,
                }
                .bind(),
            ])
            .await?;
        let learned = decode(read.pop().unwrap_or_default())?;
        let paused = decode(read.pop().unwrap_or_default())?;
        let usage = usage_of(read.pop().unwrap_or_default())?;
        let rows = decode(read.pop().unwrap_or_default())?;
        Ok((rows, usage, paused, learned))
    }

    /// A key's learned rate state, if it has one in force (a key without a
    /// limit of its own: `GET /limits/{key}`).
    pub async fn get_learned_key(&self, key: &str, now: i64) -> StoreResult<Option<LearnedKey>> {
        let rows = self
            .db
            .run(sql::ListLearnedKeys {
                now,
                limit: 1,
                key: Some(key),
            })
            .await?;
        Ok(rows.into_iter().next())
    }

    /// Delete a limit and its rate state (its members' too for a partitioned
    /// one) in one transaction, leaving an ended pause on its key so that the
    /// items it held, which may sit below claimed ones, are not passed by a
    /// batch's cursor. Returns whether it existed; if not, nothing is written.
    pub async fn delete_limit(&self, key: &str, now: i64) -> StoreResult<bool> {
        let rows: Vec<Value> = self
            .db
            .batch_rows(vec![
                sql::DeleteLimitState { key }.bind(),
                // Items it held may sit below claimed ones: cursors stay careful.
                sql::HoldCursorsAfterLimitDelete { key, now }.bind(),
                sql::DeleteLimit { key }.bind(),
            ])
            .await?;
        Ok(!rows.is_empty())
    }
}

impl<D: Db> Store<D> {
    /// End a key's pause now, leaving an ended pause (cursors stay careful
    /// until the reaper clears it). Returns whether the key was paused; if not,
    /// nothing is written.
    pub async fn lift_pause(&self, key: &str, now: i64) -> StoreResult<bool> {
        let rows: Vec<Value> = self.db.run(sql::LiftPause { key, now }).await?;
        Ok(!rows.is_empty())
    }
}

/// `sql/limit_usage.sql` at `now`, its due items counted as `/metrics` counts them.
pub(super) fn limit_usage(now: i64) -> (&'static str, Vec<Param>) {
    sql::LimitUsage {
        now,
        due_cap: metrics::DUE_CAP,
    }
    .bind()
}

pub(super) fn usage_of(rows: Vec<Value>) -> StoreResult<Usage> {
    Ok(Usage::from_rows(decode::<KeyUseRow>(rows)?))
}
