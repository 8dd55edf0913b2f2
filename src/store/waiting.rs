//! What holds pending items (`waiting_on`): their keys' states in one statement
//! (`sql/waiting_keys.sql`, the claim's rules), each item's reason decided in
//! `core::flow::waiting`.

use crate::core::flow::waiting::{
    item_reasons, keys_held, reason_counts, KeyWaitRow, PendingItem, ReasonCount, WaitingRow,
    HEAD_READ,
};

use super::*;

impl<D: Db> Store<D> {
    /// What holds each of `items` (pending items of batch `batch_id`, as listed)
    /// at `now`: one statement over their keys, none over the items. No items,
    /// no call; an unknown batch, no rows. `claim`: a claim's size, how many due
    /// items of higher priorities make an item wait for its turn.
    pub async fn waiting_on_items(
        &self,
        batch_id: &str,
        items: &[PendingItem],
        now: i64,
        claim: i64,
    ) -> StoreResult<Vec<WaitingRow>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.key_waits(batch_id, items, now, claim).await?;
        Ok(item_reasons(items, &rows, now, claim))
    }

    /// How many of the pending items at the head of batch `batch_id` each
    /// reason holds at `now` (`core::waiting::HEAD_READ` per part of the head):
    /// two statements, the head's items then their keys.
    pub async fn waiting_on_counts(
        &self,
        batch_id: &str,
        now: i64,
        claim: i64,
    ) -> StoreResult<Vec<ReasonCount>> {
        let items: Vec<PendingItem> = self
            .db
            .run(sql::WaitingHead {
                batch_id,
                head: HEAD_READ,
            })
            .await?;
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.key_waits(batch_id, &items, now, claim).await?;
        Ok(reason_counts(&items, &rows, now, claim))
    }

    async fn key_waits(
        &self,
        batch_id: &str,
        items: &[PendingItem],
        now: i64,
        claim: i64,
    ) -> StoreResult<Vec<KeyWaitRow>> {
        let keys = serde_json::to_string(&keys_held(items))
            .map_err(|e| StoreError::Json(e.to_string()))?;
        self.db
            .run(sql::WaitingKeys {
                now,
                batch_id,
                keys,
                claim,
            })
            .await
    }
}
