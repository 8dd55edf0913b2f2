//! What holds pending items (`waiting_on`): read only, one statement a call.

use crate::core::flow::waiting::{ReasonCount, WaitingRow, HEAD_READ};

use super::*;

impl<D: Db> Store<D> {
    /// What holds each of `ids` (items of batch `batch_id`) at `now`; items no
    /// longer pending, or of another batch, have no row. No ids, no call.
    /// `claim`: a claim's size, how many due items of higher priorities make
    /// an item wait for its turn.
    pub async fn waiting_on_items(
        &self,
        batch_id: &str,
        ids: &[i64],
        now: i64,
        claim: i64,
    ) -> StoreResult<Vec<WaitingRow>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = serde_json::to_string(ids).map_err(|e| StoreError::Json(e.to_string()))?;
        self.db
            .run(sql::WaitingOnItems {
                now,
                batch_id,
                ids: Some(ids),
                head: HEAD_READ,
                claim,
            })
            .await
    }

    /// How many of the pending items at the head of batch `batch_id` each
    /// reason holds at `now` (`core::waiting::HEAD_READ` per part of the head).
    pub async fn waiting_on_counts(
        &self,
        batch_id: &str,
        now: i64,
        claim: i64,
    ) -> StoreResult<Vec<ReasonCount>> {
        self.db
            .run(sql::WaitingOnCounts {
                now,
                batch_id,
                ids: None,
                head: HEAD_READ,
                claim,
            })
            .await
    }
}
