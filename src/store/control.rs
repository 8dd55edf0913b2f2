//! Batch control: pause, resume, cancel, dead-letter replay, and the tick's upkeep
//! (cancel sweep, retention) with its finish check.

use super::*;

/// Every bulk move is a page: one statement of bounded size, counted in the same
/// transaction.
impl<D: Db> Store<D> {
    /// Move batch `id` from `from` to `to` if it is still `from` (compare-and-set);
    /// returns whether it moved.
    pub async fn set_batch_status(
        &self,
        id: &str,
        from: BatchStatus,
        to: BatchStatus,
    ) -> StoreResult<bool> {
        let rows: Vec<Id<String>> = self
            .db
            .query(
                sql::SET_BATCH_STATUS,
                vec![id.into(), from.as_str().into(), to.as_str().into()],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    /// Move up to `page` pending items of cancelled batch `id` to `cancelled`,
    /// counting them and moving its cursor past them, and read the batch back: one
    /// call (a `batch()` of four statements). A batch that is not cancelled is only read.
    pub async fn cancel_pending(
        &self,
        id: &str,
        page: i64,
        now: i64,
    ) -> StoreResult<Option<BatchRow>> {
        let rows = self
            .db
            .batch_rows(vec![
                (sql::COUNT_CANCELLED_PAGE, vec![id.into(), page.into()]),
                (
                    sql::CANCEL_PENDING_PAGE,
                    vec![id.into(), page.into(), now.into()],
                ),
                (sql::ADVANCE_CANCELLED_CURSORS, vec![id.into()]),
                (sql::GET_BATCH, vec![id.into()]),
            ])
            .await?;
        Ok(rows.into_iter().next())
    }

    /// Requeue up to `page` failed items of batch `id` whose subject_id sorts after
    /// `after` (and whose last error contains `error_contains`), due at `now`, with
    /// `grow` more attempts (a kind's own max attempts for its items,
    /// [`Store::with_kind_attempts`]); reopens the batch if it had finished. One call (two
    /// statements). Returns what moved, in subject_id order: nothing for a
    /// cancelled batch.
    pub async fn requeue_failed_page(
        &self,
        id: &str,
        after: &str,
        error_contains: Option<&str>,
        page: i64,
        now: i64,
        grow: i64,
    ) -> StoreResult<Vec<Requeued>> {
        let selection =
            || -> Vec<Param> { vec![id.into(), after.into(), error_contains.into(), page.into()] };
        let mut requeue = selection();
        requeue.extend([now.into(), grow.into(), self.attempts_json().into()]);
        self.db
            .batch_rows(vec![
                (sql::REOPEN_FOR_REPLAY, selection()),
                (sql::REQUEUE_FAILED_PAGE, requeue),
            ])
            .await
    }

    /// Requeue one failed item (see `requeue_failed_page`); whether it moved.
    pub async fn requeue_failed_item(
        &self,
        item_id: i64,
        now: i64,
        grow: i64,
    ) -> StoreResult<bool> {
        let rows: Vec<Id<i64>> = self
            .db
            .batch_rows(vec![
                (sql::REOPEN_FOR_ITEM_REPLAY, vec![item_id.into()]),
                (
                    sql::REQUEUE_FAILED_ITEM,
                    vec![
                        item_id.into(),
                        now.into(),
                        grow.into(),
                        self.attempts_json().into(),
                    ],
                ),
            ])
            .await?;
        Ok(!rows.is_empty())
    }

    /// A scheduled invocation's tail before its summary, in one call: sweep one
    /// page of pending items over all the cancelled batches, delete what
    /// retention no longer keeps (items, then their batches, then old summaries;
    /// each capped), then end the batches with nothing left (`finish_batches.sql`). Returns the batches
    /// that ended, each once.
    pub async fn finish_tick(&self, now: i64, upkeep: &Upkeep) -> StoreResult<Vec<FinishedBatch>> {
        let any: Param = Param::Null;
        let mut statements = vec![
            (
                sql::COUNT_CANCELLED_PAGE,
                vec![any.clone(), upkeep.cancel_page.into()],
            ),
            (
                sql::CANCEL_PENDING_PAGE,
                vec![any.clone(), upkeep.cancel_page.into(), now.into()],
            ),
            (sql::ADVANCE_CANCELLED_CURSORS, vec![any]),
        ];
        if let Some(r) = &upkeep.retention {
            statements.extend([
                (
                    sql::DELETE_EXPIRED_ITEMS,
                    vec![r.cutoff.into(), r.items.into(), r.batches.into()],
                ),
                (
                    sql::DELETE_EXPIRED_BATCHES,
                    vec![r.cutoff.into(), r.batches.into()],
                ),
                (
                    sql::DELETE_OLD_INVOCATIONS,
                    vec![r.cutoff.into(), r.invocations.into()],
                ),
            ]);
        }
        statements.push((sql::FINISH_BATCHES, vec![now.into()]));
        self.db.batch_rows(statements).await
    }
}

/// An item a replay moved back to pending.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Requeued {
    pub id: i64,
    pub subject_id: String,
}
