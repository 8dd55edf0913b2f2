//! Batches: creation (explicit items, or subjects filled in pages), reads and the finish check.

use super::*;

impl<D: Db> Store<D> {
    /// One page of a batch's fill and its cursor: batch `id`, or the oldest batch
    /// still filling (`None`). A `batch()`'s statements: the mark before the page
    /// tells the statement after it which ids the page took; the page is one of
    /// two inserts (a group's, every group's), each read in subject order without
    /// a sort. `group`: whether the fill is of one group, when the caller knows;
    /// unknown (`None`), both inserts go, and the one for the other kind of fill
    /// inserts nothing.
    pub(super) fn fill_page(
        &self,
        id: Option<&str>,
        group: Option<bool>,
    ) -> Vec<(&'static str, Vec<Param>)> {
        let page = self.fill.page;
        let mut statements = vec![sql::MarkFillPage { batch_id: id }.bind()];
        if group != Some(false) {
            statements.push(sql::FillGroupPage { batch_id: id, page }.bind());
        }
        if group != Some(true) {
            statements.push(sql::FillEveryGroupPage { batch_id: id, page }.bind());
        }
        statements.push(sql::AdvanceFill { batch_id: id }.bind());
        statements
    }

    /// Continue the fills of batches still filling, oldest first: one call of
    /// `pages_per_call` pages (each bounded by `page` subjects). Returns the batch
    /// the last page advanced, if any page ran.
    pub async fn continue_fills(&self, id: Option<&str>) -> StoreResult<Option<FillState>> {
        let mut statements = Vec::new();
        for _ in 0..self.fill.pages_per_call.max(1) {
            statements.extend(self.fill_page(id, None));
        }
        Ok(self.db.batch_rows(statements).await?.pop())
    }

    /// Create batch `key` (or return the existing one): the batch row, its items and
    /// its total in one transaction, in O(1) statements for subjects and
    /// O(N / 500) for explicit items. No completion callback, priority 0
    /// ([`Store::create_batch_with`]).
    pub async fn create_batch(
        &self,
        id: &str,
        key: &str,
        now: i64,
        max_attempts: i64,
        source: BatchSource<'_>,
    ) -> StoreResult<Created> {
        self.create_batch_with(id, key, now, max_attempts, source, BatchOptions::default())
            .await
    }

    /// [`Store::create_batch`] with its [`BatchOptions`]: a completion callback
    /// (tried `max_attempts` times each time the batch ends) and a priority.
    /// Explicit items hold the limit keys validation set (`ItemInput::keys`).
    pub async fn create_batch_with(
        &self,
        id: &str,
        key: &str,
        now: i64,
        max_attempts: i64,
        source: BatchSource<'_>,
        options: BatchOptions<'_>,
    ) -> StoreResult<Created> {
        let BatchOptions {
            on_finish,
            priority,
        } = options;
        let callback_attempts = on_finish.map(|_| max_attempts);
        let fill = match source {
            BatchSource::ActiveSubjects => {
                Some(Fill::all_subjects(now, max_attempts, &self.fill.attempts).to_json())
            }
            BatchSource::Items(_) => None,
        };
        let mut statements = vec![sql::CreateBatch {
            id,
            key,
            now,
            on_finish,
            callback_attempts,
            fill,
            priority,
        }
        .bind()];
        match source {
            // Its first pages in this call, then more calls of pages until it is
            // filled or `create_calls` are made (ticks continue a bigger one).
            BatchSource::ActiveSubjects => {
                // A fill of every active subject: no group.
                for _ in 0..self.fill.pages_per_call.max(1) {
                    statements.extend(self.fill_page(Some(id), Some(false)));
                }
            }
            BatchSource::Items(items) => {
                // In subject order across the statements: within a batch, id order
                // is subject order (listings find a subject by binary search).
                let mut items = items.to_vec();
                items.sort_by(|a, b| a.subject_id.cmp(&b.subject_id));
                // No unique index refuses a second copy any more (migration 0017).
                if let Some(w) = items
                    .windows(2)
                    .find(|w| w[0].subject_id == w[1].subject_id)
                {
                    return Err(StoreError::Invalid(format!(
                        "subject {:?} appears twice in batch {key:?}",
                        w[0].subject_id
                    )));
                }
                for chunk in items.chunks(ITEMS_PER_STATEMENT) {
                    let items = items_json(chunk);
                    let kind_attempts = self.attempts_json();
                    statements.push(
                        sql::EnqueueItems {
                            batch_id: id,
                            max_attempts,
                            items,
                            kind_attempts,
                        }
                        .bind(),
                    );
                }
                statements.push(sql::SetBatchTotal { batch_id: id }.bind());
            }
        }
        self.db.batch(statements).await?;
        let row = self.batch_by_key(key).await?.ok_or_else(|| {
            StoreError::Missing(format!("batch {key:?}, right after creating it,"))
        })?;
        if row.id != id {
            return Ok(Created::Existing(row));
        }
        let (mut filling, mut calls) = (row.filling != 0, 1);
        while filling && calls < self.fill.create_calls {
            // A call the budget refuses or that fails leaves the rest to the ticks.
            match self.continue_fills(Some(id)).await {
                Ok(state) => filling = state.is_some_and(|s| s.filling != 0),
                Err(_) => break,
            }
            calls += 1;
        }
        if calls == 1 {
            return Ok(Created::New(row));
        }
        let row = self.get_batch(id).await?.ok_or_else(|| {
            StoreError::Missing(format!("batch {key:?}, right after filling it,"))
        })?;
        Ok(Created::New(row))
    }

    /// The kinds' own attempts as the JSON object the enqueue statements read.
    pub(super) fn attempts_json(&self) -> String {
        serde_json::to_string(&self.fill.attempts).unwrap_or_else(|_| "{}".into())
    }

    pub async fn batch_by_key(&self, key: &str) -> StoreResult<Option<BatchRow>> {
        Ok(self.db.run(sql::GetBatchByKey { key }).await?.pop())
    }

    pub async fn get_batch(&self, id: &str) -> StoreResult<Option<BatchRow>> {
        Ok(self.db.run(sql::GetBatch { batch_id: id }).await?.pop())
    }

    /// Whether batch `id` exists: one row read, where [`Store::get_batch`] also
    /// counts its items in flight.
    pub async fn batch_exists(&self, id: &str) -> StoreResult<bool> {
        let rows: Vec<serde_json::Value> = self.db.run(sql::BatchExists { batch_id: id }).await?;
        Ok(!rows.is_empty())
    }

    pub async fn list_batches(&self, limit: i64) -> StoreResult<Vec<BatchRow>> {
        self.db.run(sql::ListBatches { page: limit }).await
    }

    /// Mark batches with nothing left as finished; each is returned exactly once.
    pub async fn finish_batches(&self, now: i64) -> StoreResult<Vec<FinishedBatch>> {
        self.db.run(sql::FinishBatches { now }).await
    }
}

/// What a new batch carries besides its items.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOptions<'a> {
    /// Its completion callback as stored (`{"url": …}`, `core::callback`).
    pub on_finish: Option<&'a str>,
    /// Its items are claimed before those of lower priorities (-10 to 10,
    /// `core::requests::parse_priority`).
    pub priority: i64,
}

/// A batch as a page of its fill left it (`sql/advance_fill.sql`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FillState {
    pub id: String,
    pub key: String,
    pub total: i64,
    /// 1 while subjects are left to enqueue.
    pub filling: i64,
}

/// The JSON parameter of `enqueue_items.sql` (payload carried as JSON text).
pub fn items_json(items: &[ItemInput]) -> String {
    serde_json::to_string(items).expect("an item serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The items' JSON carries every key `enqueue_items.sql` reads, the payload as
    /// the compact JSON text the queue stores.
    #[test]
    fn the_items_json_is_what_the_insert_reads() {
        let item = ItemInput {
            subject_id: "u-1".into(),
            kind: "webhook".into(),
            payload: serde_json::json!({"url": "https://example.com/hook", "data": {"n": 1}}),
            limits: None,
            keys: Vec::new(),
        };
        let json = items_json(std::slice::from_ref(&item));
        assert_carries_keys_read(&json, sql::ENQUEUE_ITEMS);
        let rows: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(rows[0]["payload"], item.payload.to_string());
        assert!(!item.payload.to_string().contains(' '), "compact");
        assert_eq!(rows[0]["subject_id"], "u-1");
    }
}
