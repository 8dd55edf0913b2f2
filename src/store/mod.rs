//! Persistence. [`Store`] holds every query the Worker makes, written once over a
//! tiny [`Db`] adapter: D1 in the Worker (`d1.rs`), SQLite on the host (`sqlite.rs`)
//! where the conformance tests run the same SQL files against the same migrations.
//! [`metered::Metered`] wraps either to charge every call to a subrequest budget.

#[cfg(target_arch = "wasm32")]
pub mod d1;
pub mod metered;
#[cfg(not(target_arch = "wasm32"))]
pub mod sqlite;

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::core::budget::OverBudget;
use crate::core::control::BatchStatus;
use crate::core::metrics::{self, HourSums, Snapshot};
use crate::core::model::{
    BatchRow, BatchTally, ClaimedItem, FinishedBatch, Invocation, InvocationSummary, ItemRef,
    ItemRow, ItemStatus, ReapedItem, SubjectRow, TimelineBucket, Transition,
};
use crate::core::requests::{ItemInput, SubjectInput};
use crate::core::schedule::fill::{self, Fill};
use crate::core::schedule::jitter::subject_seed;
use crate::core::schedule::plan::{FirePlan, ZoneUse};
use crate::core::schedule::tick::{self, FireRead, Fired, TickPlan};
use crate::core::schedule::{ScheduleRow, ScheduleSpec};
use crate::core::throughput;
use crate::core::upkeep::Upkeep;
use crate::sql;

/// A bound parameter. Integers stay integers end to end (D1 gets them as JS
/// numbers, exact up to 2^53, far beyond millisecond timestamps).
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Int(i64),
    Text(String),
    Null,
}

impl From<i64> for Param {
    fn from(v: i64) -> Param {
        Param::Int(v)
    }
}

impl From<&str> for Param {
    fn from(v: &str) -> Param {
        Param::Text(v.to_string())
    }
}

impl From<String> for Param {
    fn from(v: String) -> Param {
        Param::Text(v)
    }
}

impl<T: Into<Param>> From<Option<T>> for Param {
    fn from(v: Option<T>) -> Param {
        v.map(Into::into).unwrap_or(Param::Null)
    }
}

/// A store failure. Messages may contain SQL detail: log them, never send them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The database failed the call (D1's or SQLite's message).
    Db(String),
    /// The subrequest budget could not pay for the call; nothing was sent.
    OverBudget(OverBudget),
    /// A row the store had just written was not there.
    Missing(String),
    /// A row or a parameter did not convert from or to JSON.
    Json(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Db(message) => f.write_str(message),
            StoreError::OverBudget(e) => write!(f, "not sent: {e}"),
            StoreError::Missing(what) => write!(f, "{what} is missing"),
            StoreError::Json(message) => write!(f, "JSON: {message}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<OverBudget> for StoreError {
    fn from(e: OverBudget) -> StoreError {
        StoreError::OverBudget(e)
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// What the database work of one invocation cost. Calls (subrequests) are counted
/// by the budget they are charged to (`metered::Metered`), not here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub statements: i64,
    pub rows_written: i64,
    /// D1's `meta.rows_read` (0 on SQLite, which does not report it).
    pub rows_read: i64,
}

impl Usage {
    /// Count one database call (a `batch()` is one call of several statements).
    pub fn add_call(&mut self, statements: i64, rows_written: i64) {
        self.statements += statements;
        self.rows_written += rows_written;
    }
}

/// The minimum a database must do for [`Store`].
#[allow(async_fn_in_trait)]
pub trait Db {
    /// Run one statement and decode its rows (including `RETURNING` rows).
    async fn query<T: DeserializeOwned>(
        &self,
        sql: &str,
        params: Vec<Param>,
    ) -> StoreResult<Vec<T>>;
    /// Run statements as one transaction (all or nothing, one call) and decode the
    /// rows of the last one.
    async fn batch_rows<T: DeserializeOwned>(
        &self,
        statements: Vec<(&'static str, Vec<Param>)>,
    ) -> StoreResult<Vec<T>>;
    /// Run statements as one transaction: all or nothing.
    async fn batch(&self, statements: Vec<(&'static str, Vec<Param>)>) -> StoreResult<()> {
        self.batch_rows::<Value>(statements).await.map(|_| ())
    }
    fn usage(&self) -> Usage;
}

/// A borrowed database is one too: a second `Store` over the same connection (the
/// host simulation's "another request" arriving during a drain).
impl<D: Db> Db for &D {
    async fn query<T: DeserializeOwned>(
        &self,
        sql: &str,
        params: Vec<Param>,
    ) -> StoreResult<Vec<T>> {
        (**self).query(sql, params).await
    }

    async fn batch_rows<T: DeserializeOwned>(
        &self,
        statements: Vec<(&'static str, Vec<Param>)>,
    ) -> StoreResult<Vec<T>> {
        (**self).batch_rows(statements).await
    }

    fn usage(&self) -> Usage {
        (**self).usage()
    }
}

/// Whether `create_batch` made a new batch or found the key taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    New(BatchRow),
    Existing(BatchRow),
}

/// Where a new batch's items come from.
#[derive(Debug, Clone, Copy)]
pub enum BatchSource<'a> {
    ActiveSubjects,
    Items(&'a [ItemInput]),
}

/// Rows the summary insert writes: the row and its `invocations_started` entry.
pub const SUMMARY_ROWS_WRITTEN: i64 = 2;

/// How many explicit items go into one INSERT: bounds each statement's size
/// (D1 caps a statement at 100 KB of SQL and a value at about 2 MB).
pub const ITEMS_PER_STATEMENT: usize = 500;

pub struct Store<D: Db> {
    db: D,
    fill: FillPages,
}

/// How batches over subjects are filled (`core::schedule::fill`): subjects per
/// statement, pages per call, and the attempts of kinds that declare their own.
#[derive(Debug, Clone)]
pub struct FillPages {
    pub page: i64,
    pub pages_per_call: i64,
    pub create_calls: i64,
    /// Kind → max attempts (`jobs::Policy::max_attempts`); other kinds get the
    /// global `MAX_ATTEMPTS`.
    pub attempts: BTreeMap<String, i64>,
}

impl Default for FillPages {
    fn default() -> FillPages {
        FillPages {
            page: fill::FILL_PAGE,
            pages_per_call: fill::FILL_PAGES_PER_CALL,
            create_calls: fill::CREATE_FILL_CALLS,
            attempts: BTreeMap::new(),
        }
    }
}

#[derive(Deserialize)]
struct Id<T> {
    id: T,
}

impl<D: Db> Store<D> {
    pub fn new(db: D) -> Store<D> {
        Store {
            db,
            fill: FillPages::default(),
        }
    }

    /// The same store filling batches in pages of another size (tests), or with
    /// the kinds' own attempts.
    pub fn with_fill(mut self, fill: FillPages) -> Store<D> {
        self.fill = fill;
        self
    }

    /// The same store giving items of these kinds their own max attempts
    /// (`Jobs::max_attempts_by_kind`) when enqueued and replayed.
    pub fn with_kind_attempts(mut self, attempts: BTreeMap<String, i64>) -> Store<D> {
        self.fill.attempts = attempts;
        self
    }

    pub fn fill_pages(&self) -> &FillPages {
        &self.fill
    }

    /// One page of a batch's fill and its cursor: batch `id`, or the oldest batch
    /// still filling (`None`). Two statements of a `batch()`.
    fn fill_page(&self, id: Option<&str>) -> [(&'static str, Vec<Param>); 2] {
        [
            (sql::FILL_BATCH_PAGE, vec![id.into(), self.fill.page.into()]),
            (sql::ADVANCE_FILL, vec![id.into()]),
        ]
    }

    /// Continue the fills of batches still filling, oldest first: one call of
    /// `pages_per_call` pages (each bounded by `page` subjects). Returns the batch
    /// the last page advanced, if any page ran.
    pub async fn continue_fills(&self, id: Option<&str>) -> StoreResult<Option<FillState>> {
        let mut statements = Vec::new();
        for _ in 0..self.fill.pages_per_call.max(1) {
            statements.extend(self.fill_page(id));
        }
        Ok(self.db.batch_rows(statements).await?.pop())
    }

    pub fn usage(&self) -> Usage {
        self.db.usage()
    }

    pub fn db(&self) -> &D {
        &self.db
    }

    pub fn into_db(self) -> D {
        self.db
    }

    /// Create batch `key` (or return the existing one): the batch row, its items and
    /// its total in one transaction, in O(1) statements for subjects and
    /// O(N / 500) for explicit items. No completion callback
    /// ([`Store::create_batch_calling_back`]).
    pub async fn create_batch(
        &self,
        id: &str,
        key: &str,
        now: i64,
        max_attempts: i64,
        source: BatchSource<'_>,
    ) -> StoreResult<Created> {
        self.create_batch_calling_back(id, key, now, max_attempts, source, None)
            .await
    }

    /// [`Store::create_batch`] with `on_finish` (as stored, `core::callback`): the
    /// batch calls it back each time it ends, with `max_attempts` tries.
    pub async fn create_batch_calling_back(
        &self,
        id: &str,
        key: &str,
        now: i64,
        max_attempts: i64,
        source: BatchSource<'_>,
        on_finish: Option<&str>,
    ) -> StoreResult<Created> {
        let callback_attempts = on_finish.map(|_| max_attempts);
        let fill = match source {
            BatchSource::ActiveSubjects => {
                Some(Fill::all_subjects(now, max_attempts, &self.fill.attempts).to_json())
            }
            BatchSource::Items(_) => None,
        };
        let mut statements = vec![(
            sql::CREATE_BATCH,
            vec![
                id.into(),
                key.into(),
                now.into(),
                on_finish.into(),
                callback_attempts.into(),
                fill.into(),
            ],
        )];
        match source {
            // Its first pages in this call, then more calls of pages until it is
            // filled or `create_calls` are made (ticks continue a bigger one).
            BatchSource::ActiveSubjects => {
                for _ in 0..self.fill.pages_per_call.max(1) {
                    statements.extend(self.fill_page(Some(id)));
                }
            }
            BatchSource::Items(items) => {
                for chunk in items.chunks(ITEMS_PER_STATEMENT) {
                    statements.push((
                        sql::ENQUEUE_ITEMS,
                        vec![
                            id.into(),
                            max_attempts.into(),
                            now.into(),
                            items_json(chunk).into(),
                            self.attempts_json().into(),
                        ],
                    ));
                }
                statements.push((sql::SET_BATCH_TOTAL, vec![id.into()]));
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
    fn attempts_json(&self) -> String {
        serde_json::to_string(&self.fill.attempts).unwrap_or_else(|_| "{}".into())
    }

    pub async fn batch_by_key(&self, key: &str) -> StoreResult<Option<BatchRow>> {
        Ok(self
            .db
            .query(sql::GET_BATCH_BY_KEY, vec![key.into()])
            .await?
            .pop())
    }

    pub async fn get_batch(&self, id: &str) -> StoreResult<Option<BatchRow>> {
        Ok(self.db.query(sql::GET_BATCH, vec![id.into()]).await?.pop())
    }

    pub async fn list_batches(&self, limit: i64) -> StoreResult<Vec<BatchRow>> {
        self.db.query(sql::LIST_BATCHES, vec![limit.into()]).await
    }

    /// Claim up to `limit` due items under fresh leases (one statement).
    pub async fn claim_due_items(
        &self,
        now: i64,
        limit: i64,
        token_prefix: &str,
        lease_expires_at: i64,
    ) -> StoreResult<Vec<ClaimedItem>> {
        self.db
            .query(
                sql::CLAIM_DUE_ITEMS,
                vec![
                    now.into(),
                    limit.into(),
                    token_prefix.into(),
                    lease_expires_at.into(),
                ],
            )
            .await
    }

    /// Apply outcomes in one statement; returns the ids that still held their
    /// lease. The others lost it and were left untouched. No outcomes, no call.
    pub async fn commit_outcomes<'t>(
        &self,
        transitions: impl IntoIterator<Item = &'t Transition>,
    ) -> StoreResult<Vec<i64>> {
        let Some(json) = transitions_json(transitions) else {
            return Ok(Vec::new());
        };
        let rows: Vec<Id<i64>> = self
            .db
            .query(sql::COMMIT_OUTCOMES, vec![json.into()])
            .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }

    /// Commit outcomes again after an attempt that failed, which may have been
    /// applied all the same (D1 does not say when an answer is lost): apply what is
    /// still fenced, then read back every row now carrying the outcome (one call,
    /// two statements). Returns the ids applied by either attempt; the others lost
    /// their lease. No outcomes, no call.
    pub async fn recommit_outcomes<'t>(
        &self,
        transitions: impl IntoIterator<Item = &'t Transition>,
    ) -> StoreResult<Vec<i64>> {
        let Some(json) = transitions_json(transitions) else {
            return Ok(Vec::new());
        };
        let rows: Vec<Id<i64>> = self
            .db
            .batch_rows(vec![
                (sql::COMMIT_OUTCOMES, vec![json.clone().into()]),
                (sql::COMMITTED_OUTCOMES, vec![json.into()]),
            ])
            .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }

    pub async fn reap_expired_leases(&self, now: i64, limit: i64) -> StoreResult<Vec<ReapedItem>> {
        self.db
            .query(sql::REAP_EXPIRED_LEASES, vec![now.into(), limit.into()])
            .await
    }

    /// Mark batches with nothing left as finished; each is returned exactly once.
    pub async fn finish_batches(&self, now: i64) -> StoreResult<Vec<FinishedBatch>> {
        self.db.query(sql::FINISH_BATCHES, vec![now.into()]).await
    }

    /// A page of a batch's items in subject_id order, optionally of one status.
    /// Failed items come from their own partial index: listing the few failures of
    /// a big batch must not read the batch.
    pub async fn list_batch_items(
        &self,
        batch_id: &str,
        after: &str,
        status: Option<ItemStatus>,
        limit: i64,
    ) -> StoreResult<Vec<ItemRow>> {
        if status == Some(ItemStatus::Failed) {
            return self
                .db
                .query(
                    sql::LIST_FAILED_ITEMS,
                    vec![batch_id.into(), after.into(), limit.into()],
                )
                .await;
        }
        self.db
            .query(
                sql::LIST_BATCH_ITEMS,
                vec![
                    batch_id.into(),
                    after.into(),
                    status.map(|s| s.as_str()).into(),
                    limit.into(),
                ],
            )
            .await
    }

    /// Upsert validated subjects in one statement; returns how many were written.
    pub async fn upsert_subjects(&self, subjects: &[SubjectInput], now: i64) -> StoreResult<i64> {
        let rows: Vec<Value> = subjects
            .iter()
            .map(|s| {
                json!({"id": s.id, "kind": s.kind, "payload": s.payload.to_string(),
                       "active": i64::from(s.active), "group": s.group,
                       "timezone": s.timezone, "seed": subject_seed(&s.id)})
            })
            .collect();
        self.db
            .batch(vec![(
                sql::UPSERT_SUBJECTS,
                vec![Value::Array(rows).to_string().into(), now.into()],
            )])
            .await?;
        Ok(subjects.len() as i64)
    }

    pub async fn list_subjects(&self, after: &str, limit: i64) -> StoreResult<Vec<SubjectRow>> {
        self.db
            .query(sql::LIST_SUBJECTS, vec![after.into(), limit.into()])
            .await
    }

    pub async fn get_subject(&self, id: &str) -> StoreResult<Option<SubjectRow>> {
        Ok(self
            .db
            .query(sql::GET_SUBJECT, vec![id.into()])
            .await?
            .pop())
    }

    /// Returns whether the subject existed.
    pub async fn delete_subject(&self, id: &str) -> StoreResult<bool> {
        let rows: Vec<Id<String>> = self.db.query(sql::DELETE_SUBJECT, vec![id.into()]).await?;
        Ok(!rows.is_empty())
    }

    /// Store one invocation's summary (one statement, one row).
    pub async fn record_invocation(&self, summary: &InvocationSummary) -> StoreResult<()> {
        let json = serde_json::to_string(summary).map_err(|e| StoreError::Json(e.to_string()))?;
        self.db
            .query::<Value>(sql::RECORD_INVOCATION, vec![json.into()])
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
        let params = vec![since.into(), ids.into(), throughput::LOOKBACK_MS.into()];
        let rows: Vec<Row> = self.db.query(sql::RECENT_THROUGHPUT, params).await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let counts = BatchTally {
                    completed: r.completed,
                    failed: r.failed,
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
        let params = vec![
            batch_id.into(),
            window.ended_from.into(),
            window.to.into(),
            bucket_ms.into(),
            limit.into(),
            throughput::LOOKBACK_MS.into(),
        ];
        self.db.query(sql::BATCH_TIMELINE, params).await
    }

    /// What `GET /metrics` reports except the settings (one statement).
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
            /// JSON object: stop reason → invocations.
            stop_reasons: String,
        }
        let params = vec![
            now.into(),
            metrics::DUE_CAP.into(),
            (now - metrics::WINDOW_MS).into(),
            metrics::DEAD_LETTER_CAP.into(),
        ];
        let row: Row = self
            .db
            .query(sql::METRICS_SNAPSHOT, params)
            .await?
            .pop()
            .ok_or_else(|| StoreError::Missing("the metrics row".into()))?;
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
            },
            stop_reasons,
            subrequest_budget: 0,
        })
    }

    /// The newest `limit` summaries, newest first.
    pub async fn list_invocations(&self, limit: i64) -> StoreResult<Vec<Invocation>> {
        // The statement builds each row's JSON (see list_invocations.sql).
        #[derive(Deserialize)]
        struct Row {
            invocation: String,
        }
        let rows: Vec<Row> = self
            .db
            .query(sql::LIST_INVOCATIONS, vec![limit.into()])
            .await?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(&r.invocation).map_err(|e| StoreError::Json(e.to_string()))
            })
            .collect()
    }
}

/// Schedules (issue 10). Firing is [`Store::fire_schedules`]: every due schedule's
/// statements in one `batch()`, one subrequest however many are due.
impl<D: Db> Store<D> {
    /// Create or replace a validated schedule and return the stored row (`None`
    /// only if the database lost the row it just wrote). `on_finish`: the
    /// completion callback of every batch it fires, as stored (`core::callback`).
    pub async fn upsert_schedule(
        &self,
        id: &str,
        spec: &ScheduleSpec,
        next_fire_at: Option<i64>,
        now: i64,
        on_finish: Option<&str>,
    ) -> StoreResult<Option<ScheduleRow>> {
        let params = vec![
            id.into(),
            spec.cron_text().into(),
            spec.every_seconds().into(),
            spec.at().into(),
            spec.zone.name().into(),
            spec.group.clone().into(),
            spec.jitter_seconds.into(),
            i64::from(spec.enabled).into(),
            next_fire_at.into(),
            now.into(),
            on_finish.into(),
        ];
        Ok(self.db.query(sql::UPSERT_SCHEDULE, params).await?.pop())
    }

    pub async fn get_schedule(&self, id: &str) -> StoreResult<Option<ScheduleRow>> {
        Ok(self
            .db
            .query(sql::GET_SCHEDULE, vec![id.into()])
            .await?
            .pop())
    }

    /// A page of schedules in id order after `after`.
    pub async fn list_schedules(&self, after: &str, limit: i64) -> StoreResult<Vec<ScheduleRow>> {
        self.db
            .query(sql::LIST_SCHEDULES, vec![after.into(), limit.into()])
            .await
    }

    /// Returns whether the schedule existed. Its batches keep running.
    pub async fn delete_schedule(&self, id: &str) -> StoreResult<bool> {
        let rows: Vec<Id<String>> = self.db.query(sql::DELETE_SCHEDULE, vec![id.into()]).await?;
        Ok(!rows.is_empty())
    }

    /// Enabled schedules with `next_fire_at <= now`, oldest first, at most `limit`.
    pub async fn due_schedules(&self, now: i64, limit: i64) -> StoreResult<Vec<ScheduleRow>> {
        self.db
            .query(sql::DUE_SCHEDULES, vec![now.into(), limit.into()])
            .await
    }

    /// The zones of active subjects of one group, or of every group (`None`).
    pub async fn zones_in_use(&self, group: Option<&str>) -> StoreResult<Vec<ZoneUse>> {
        match group {
            Some(g) => self.zones_of(&[g], false).await,
            None => self.zones_of(&[], true).await,
        }
    }

    /// The distinct (group, zone) pairs of active subjects of `groups`, and, if
    /// `every_group`, the distinct zones of all of them (`group_name` `None`). One
    /// statement reading one index entry per row returned (`sql/zones_in_use.sql`).
    pub async fn zones_of(&self, groups: &[&str], every_group: bool) -> StoreResult<Vec<ZoneUse>> {
        let groups = serde_json::to_string(groups).map_err(|e| StoreError::Json(e.to_string()))?;
        self.db
            .query(
                sql::ZONES_IN_USE,
                vec![groups.into(), i64::from(every_group).into()],
            )
            .await
    }

    /// Whether batches not made by schedule `schedule_id` use its key prefix
    /// (`<id>:`): a *new* schedule must not take such an id, or its keys could
    /// collide with theirs.
    pub async fn key_prefix_used_by_others(&self, schedule_id: &str) -> StoreResult<bool> {
        let rows: Vec<Value> = self
            .db
            .query(sql::KEY_PREFIX_USED_BY_OTHERS, vec![schedule_id.into()])
            .await?;
        Ok(!rows.is_empty())
    }

    /// One tick's firing, plan then apply: the oldest `page` due schedules, the
    /// zones in use of their groups (read once, only if a due schedule runs on
    /// each subject's time), a plan per schedule (`core::schedule::tick`), then the plans applied
    /// apart from each other ([`tick::Isolation`]): the whole page in one
    /// `batch()` that also reads back the batches it made; if that fails, each
    /// half on its own, and so on, at most [`tick::FIRE_APPLY_CALLS`] calls; then
    /// one statement backing off the schedules whose fire failed on its own. The
    /// due page is read in the call that first continues the fills still running
    /// ([`Store::continue_fills`]'s pages); if that call fails, the due page is read
    /// alone. So 1 D1 call when nothing is due, 2 when the page applies (3 with the
    /// zones), at most `3 + FIRE_APPLY_CALLS + 1` (`budget::FIRE_SUBREQUESTS`)
    /// however many fail.
    /// `Err` only if the due page or the zones could not be read: then nothing was
    /// applied and every schedule is still due. Every planned fire ends in exactly
    /// one of [`FireReport`]'s `fired` (or applied without a batch), `failed`, `left`.
    pub async fn fire_due(
        &self,
        now: i64,
        page: i64,
        max_attempts: i64,
        new_id: &dyn Fn() -> String,
    ) -> StoreResult<FireReport> {
        // The first call continues the fills still running (bounded pages, oldest
        // batch first) and reads the due page; a fill that fails costs a second
        // call reading the due page alone, so it holds up no fire.
        let mut statements = Vec::new();
        for _ in 0..self.fill.pages_per_call.max(1) {
            statements.extend(self.fill_page(None));
        }
        statements.push((sql::DUE_SCHEDULES, vec![now.into(), page.into()]));
        let (due, fill): (Vec<ScheduleRow>, _) = match self.db.batch_rows(statements).await {
            Ok(due) => (due, Ok(())),
            Err(e @ StoreError::OverBudget(_)) => return Err(e),
            Err(e) => (self.due_schedules(now, page).await?, Err(e)),
        };
        let in_use = if tick::needs_zones(&due) {
            let (groups, every_group) = tick::zone_groups(&due);
            self.zones_of(&groups, every_group).await?
        } else {
            Vec::new()
        };
        let plan = tick::plan_tick(&due, now, &in_use, new_id, max_attempts);
        let mut report = FireReport {
            fill,
            fired: Vec::new(),
            failed: Vec::new(),
            left: Vec::new(),
            left_error: None,
            backoff: Ok(()),
            plan,
        };
        let plans = &report.plan.plans;
        let mut isolation = tick::Isolation::new(plans.len(), tick::FIRE_APPLY_CALLS);
        let failure = |i: usize, error: StoreError| {
            let row = &due[i];
            let failures = row.fire_failures + 1;
            FireFailure {
                schedule_id: row.id.clone(),
                revision: row.revision,
                created_at: row.created_at,
                failures,
                retry_at: tick::retry_at(now, failures),
                error,
            }
        };
        // The error of the last call that failed: what a fire found failing
        // without a call of its own is charged with.
        let mut last_error = None;
        loop {
            let next = isolation.next();
            for i in isolation.take_inferred() {
                let error = last_error
                    .clone()
                    .unwrap_or(StoreError::Db("failed".into()));
                report.failed.push(failure(i, error));
            }
            let Some(range) = next else { break };
            let group = &plans[range.clone()];
            match self.fire_schedules(group).await {
                Ok(batches) => {
                    isolation.applied();
                    report.fired.extend(tick::outcomes(group, &batches));
                }
                // Not sent: no fire failed; they wait for the next tick.
                Err(e @ StoreError::OverBudget(_)) => {
                    isolation.unsent(range);
                    report.left_error = Some(e);
                }
                Err(e) => {
                    last_error = Some(e.clone());
                    match isolation.failed(range) {
                        Some(i) => report.failed.push(failure(i, e)),
                        None => report.left_error = Some(e),
                    }
                }
            }
        }
        report.left = isolation
            .left()
            .map(|i| plans[i].schedule_id.clone())
            .collect();
        if !report.failed.is_empty() {
            report.backoff = self.record_fire_failures(&report.failed).await;
        }
        Ok(report)
    }

    /// Back off the schedules whose fire failed on its own (one statement).
    pub async fn record_fire_failures(&self, failed: &[FireFailure]) -> StoreResult<()> {
        let rows: Vec<Value> = failed
            .iter()
            .map(|f| {
                json!({"id": f.schedule_id, "revision": f.revision,
                       "created_at": f.created_at, "retry_at": f.retry_at})
            })
            .collect();
        self.db
            .query::<Value>(
                sql::RECORD_FIRE_FAILURES,
                vec![Value::Array(rows).to_string().into()],
            )
            .await
            .map(|_| ())
    }

    /// The batches with these keys (one statement; missing keys are left out).
    pub async fn batches_by_keys(&self, keys: &[&str]) -> StoreResult<Vec<BatchRow>> {
        let keys = serde_json::to_string(keys).map_err(|e| StoreError::Json(e.to_string()))?;
        self.db
            .query(sql::GET_BATCHES_BY_KEYS, vec![keys.into()])
            .await
    }

    /// Apply fire plans in one transaction: for each, its batch (created unless the
    /// key exists, the schedule changed since planning or no subject matches), its
    /// first page of items (at most `FILL_PAGE` subjects, one `INSERT … SELECT`)
    /// with its cursor and total, and the schedule's advance; last, the batches
    /// their keys name, read back. 4
    /// statements per fire and the read-back, one call for all of them; nothing is
    /// written if any statement fails, so every plan is due again.
    pub async fn fire_schedules(&self, plans: &[FirePlan]) -> StoreResult<Vec<FireRead>> {
        if plans.is_empty() {
            return Ok(Vec::new());
        }
        let mut statements = Vec::with_capacity(plans.len() * 4);
        for plan in plans {
            if let Some(b) = &plan.batch {
                statements.push((
                    sql::CREATE_SCHEDULE_BATCH,
                    vec![
                        b.batch_id.as_str().into(),
                        b.key.as_str().into(),
                        b.created_at.into(),
                        plan.schedule_id.as_str().into(),
                        plan.revision.into(),
                        b.max_attempts.into(),
                        plan.created_at.into(),
                        b.group.clone().into(),
                        b.fill(&self.fill.attempts).to_json().into(),
                    ],
                ));
                // Its first page (at most `page` subjects) and its cursor; ticks
                // continue a bigger fill (`continue_fills`).
                statements.extend(self.fill_page(Some(&b.batch_id)));
            }
            statements.push((
                sql::ADVANCE_SCHEDULE,
                vec![
                    plan.schedule_id.as_str().into(),
                    plan.revision.into(),
                    plan.next_fire_at.into(),
                    i64::from(plan.enabled).into(),
                    plan.batch.as_ref().map(|b| b.created_at).into(),
                    plan.batch.as_ref().map(|b| b.key.clone()).into(),
                    plan.created_at.into(),
                ],
            ));
        }
        statements.push((sql::FIRED_BATCHES, vec![tick::read_back_json(plans).into()]));
        self.db.batch_rows(statements).await
    }
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

/// What [`Store::fire_due`] did with each due schedule: applied ([`Fired`] per
/// fire with a batch), failed on its own and backed off, or left due.
#[derive(Debug)]
pub struct FireReport {
    /// Whether the fills still running were continued (a page each, at most
    /// `pages_per_call`); if not, they are tried again on the next tick.
    pub fill: StoreResult<()>,
    pub plan: TickPlan,
    /// Per applied fire with a batch, read back in the same call.
    pub fired: Vec<Fired>,
    /// Fires that failed on their own: their schedules back off.
    pub failed: Vec<FireFailure>,
    /// Schedules whose fires were not applied this tick (a call carrying them
    /// failed and the tick's apply calls ran out, or the budget refused one):
    /// still due, untouched.
    pub left: Vec<String>,
    /// The last error of a call that carried several fires (or the budget's
    /// refusal): why `left` were not applied.
    pub left_error: Option<StoreError>,
    /// Whether the backoff of `failed` was written; if not they are due again on
    /// the next tick, as before.
    pub backoff: StoreResult<()>,
}

/// A fire that failed on its own, and the backoff written for its schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireFailure {
    pub schedule_id: String,
    pub revision: i64,
    pub created_at: i64,
    /// Failures in a row, this one included.
    pub failures: i64,
    pub retry_at: i64,
    pub error: StoreError,
}

/// Batch control (issue 11): pause, resume, cancel, dead-letter replay, and the
/// tick's upkeep (cancel sweep, retention) with its finish check. Every bulk move
/// is a page: one statement of bounded size, counted in the same transaction.
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
    /// counting them, and read the batch back: one call (a `batch()` of three
    /// statements). A batch that is not cancelled is only read.
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

    /// One item with its batch's status.
    pub async fn get_item(&self, id: i64) -> StoreResult<Option<ItemRef>> {
        Ok(self.db.query(sql::GET_ITEM, vec![id.into()]).await?.pop())
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
                vec![any, upkeep.cancel_page.into(), now.into()],
            ),
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

/// The JSON parameter of `commit_outcomes.sql`, or `None` for no transitions.
pub fn transitions_json<'t>(
    transitions: impl IntoIterator<Item = &'t Transition>,
) -> Option<String> {
    let rows: Vec<Value> = transitions
        .into_iter()
        .map(|t| {
            json!({
                "id": t.id,
                "token": t.token,
                "status": t.status.as_str(),
                "run_after": t.run_after,
                "completed_at": t.completed_at,
                "error": t.error,
                "attempt": t.attempt,
                "receipts": t.receipts,
            })
        })
        .collect();
    (!rows.is_empty()).then(|| Value::Array(rows).to_string())
}

/// The JSON parameter of `enqueue_items.sql` (payload carried as JSON text).
pub fn items_json(items: &[ItemInput]) -> String {
    let rows: Vec<Value> = items
        .iter()
        .map(|i| json!({"subject_id": i.subject_id, "kind": i.kind, "payload": i.payload.to_string()}))
        .collect();
    Value::Array(rows).to_string()
}
