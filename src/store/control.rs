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
            .run(sql::SetBatchStatus {
                batch_id: id,
                expected: from.as_str(),
                status: to.as_str(),
            })
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
                sql::CountCancelledPage {
                    batch_id: Some(id),
                    page,
                }
                .bind(),
                sql::CancelPendingPage {
                    batch_id: Some(id),
                    page,
                    now,
                }
                .bind(),
                sql::AdvanceCancelledCursors { batch_id: Some(id) }.bind(),
                sql::GetBatch { batch_id: id }.bind(),
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
        let reopen = sql::ReopenForReplay {
            batch_id: id,
            after,
            error_contains,
            page,
        };
        let requeue = sql::RequeueFailedPage {
            batch_id: id,
            after,
            error_contains,
            page,
            now,
            grow,
            kind_attempts: self.attempts_json(),
        };
        self.db
            .batch_rows(vec![reopen.bind(), requeue.bind()])
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
                sql::ReopenForItemReplay { item_id }.bind(),
                sql::RequeueFailedItem {
                    item_id,
                    now,
                    grow,
                    kind_attempts: self.attempts_json(),
                }
                .bind(),
            ])
            .await?;
        Ok(!rows.is_empty())
    }

    /// A scheduled invocation's tail before its summary, in one call: sweep one
    /// page of pending items over all the cancelled batches, delete what
    /// retention no longer keeps (items, then their batches, then old summaries;
    /// each capped), then end the batches with nothing left (`finish_batches.sql`).
    /// A part whose page or cap is 0 has nothing to do and is left out of the call
    /// (`Upkeep::narrowed`). Returns the batches that ended, each once.
    pub async fn finish_tick(&self, now: i64, upkeep: &Upkeep) -> StoreResult<Vec<FinishedBatch>> {
        let mut statements = Vec::new();
        if upkeep.cancel_page > 0 {
            // No batch id: every cancelled batch that has not ended.
            let (any, page) = (None, upkeep.cancel_page);
            statements.extend([
                sql::CountCancelledPage {
                    batch_id: any,
                    page,
                }
                .bind(),
                sql::CancelPendingPage {
                    batch_id: any,
                    page,
                    now,
                }
                .bind(),
                sql::AdvanceCancelledCursors { batch_id: any }.bind(),
            ]);
        }
        if let Some(r) = &upkeep.retention {
            let cutoff = r.cutoff;
            if r.items > 0 && r.batches > 0 {
                statements.push(
                    sql::DeleteExpiredItems {
                        cutoff,
                        items: r.items,
                        batches: r.batches,
                    }
                    .bind(),
                );
            }
            if r.batches > 0 {
                statements.push(
                    sql::DeleteExpiredBatches {
                        cutoff,
                        batches: r.batches,
                    }
                    .bind(),
                );
            }
            if r.invocations > 0 {
                statements.push(
                    sql::DeleteOldInvocations {
                        cutoff,
                        rows: r.invocations,
                    }
                    .bind(),
                );
            }
        }
        statements.push(sql::FinishBatches { now }.bind());
        self.db.batch_rows(statements).await
    }
}

/// An item a replay moved back to pending.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Requeued {
    pub id: i64,
    pub subject_id: String,
}
