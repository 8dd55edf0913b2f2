//! Persistence. [`Store`] holds every query the Worker makes, written once over a
//! tiny [`Db`] adapter: D1 in the Worker (`d1.rs`), SQLite on the host (`sqlite.rs`,
//! feature `sqlite`) where the conformance tests run the same SQL files against
//! the same migrations.
//! [`metered::Metered`] wraps either to charge every call to a subrequest budget.
//! One file per concern: `batches`, `items` (the queue), `subjects`, `schedules`,
//! `limits`, `control` (pause, cancel, replay, upkeep) and `invocations`
//! (summaries, metrics).

#[cfg(target_arch = "wasm32")]
pub mod d1;
pub mod metered;
#[cfg(all(not(target_arch = "wasm32"), feature = "sqlite"))]
pub mod sqlite;

mod batches;
mod control;
mod drainers;
mod invocations;
mod items;
mod limits;
mod schedules;
mod subjects;
mod waiting;

pub use batches::{items_json, BatchOptions, FillState};
pub use control::Requeued;
pub use drainers::{DrainWork, SlotPassed};
pub use items::{transitions_json, Claim, Claimed, LimitsInForce};
pub use schedules::{FireFailure, FireReport};

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::core::drain::store_error::StoreError;

use crate::core::batch::control::BatchStatus;
use crate::core::batch::listing::{items_page, ItemsPage, ITEMS_WALKED_PER_PAGE};
use crate::core::batch::model::{
    BatchRow, BatchTally, ClaimedItem, FinishedBatch, Invocation, InvocationSummary, ItemStatus,
    ReapedItem, Transition,
};
use crate::core::batch::requests::{ItemInput, SubjectInput};
use crate::core::batch::rows::{ItemRef, SubjectRow, TimelineBucket};
use crate::core::batch::throughput;
use crate::core::batch::upkeep::Upkeep;
use crate::core::metrics::{self, HourSums, Snapshot};
use crate::core::schedule::fill::{self, Fill};
use crate::core::schedule::jitter::subject_seed;
use crate::core::schedule::plan::{FirePlan, ZoneUse};
use crate::core::schedule::tick::{self, FireRead, Fired, TickPlan};
use crate::core::schedule::{ScheduleRow, ScheduleSpec};
pub use crate::sql::Param;
use crate::sql::{self, Statement};

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
    /// Run statements as one transaction (all or nothing, one call): the rows of
    /// each statement, in order.
    async fn batch_results(
        &self,
        statements: Vec<(&'static str, Vec<Param>)>,
    ) -> StoreResult<Vec<Vec<Value>>>;
    /// [`Db::batch_results`], decoding the rows of the last statement only.
    async fn batch_rows<T: DeserializeOwned>(
        &self,
        statements: Vec<(&'static str, Vec<Param>)>,
    ) -> StoreResult<Vec<T>> {
        decode(
            self.batch_results(statements)
                .await?
                .pop()
                .unwrap_or_default(),
        )
    }
    /// Run statements as one transaction: all or nothing.
    async fn batch(&self, statements: Vec<(&'static str, Vec<Param>)>) -> StoreResult<()> {
        self.batch_results(statements).await.map(|_| ())
    }
    /// [`Db::query`] of a statement bound by its parameter struct (`sql::params`).
    async fn run<T: DeserializeOwned>(&self, statement: impl Statement) -> StoreResult<Vec<T>> {
        let (sql, params) = statement.bind();
        self.query(sql, params).await
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

    async fn batch_results(
        &self,
        statements: Vec<(&'static str, Vec<Param>)>,
    ) -> StoreResult<Vec<Vec<Value>>> {
        (**self).batch_results(statements).await
    }

    fn usage(&self) -> Usage {
        (**self).usage()
    }
}

/// Rows as a statement returned them, decoded.
pub fn decode<T: DeserializeOwned>(rows: Vec<Value>) -> StoreResult<Vec<T>> {
    rows.into_iter()
        .map(|row| serde_json::from_value(row).map_err(|e| StoreError::Json(e.to_string())))
        .collect()
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
    /// `LEARN_LIMITS`: a commit that carries a refusal stores learned rates.
    learning: bool,
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
            learning: true,
        }
    }

    /// The same store learning rates from refusals, or not (`LEARN_LIMITS`).
    pub fn with_learning(mut self, learning: bool) -> Store<D> {
        self.learning = learning;
        self
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

    pub fn usage(&self) -> Usage {
        self.db.usage()
    }

    pub fn db(&self) -> &D {
        &self.db
    }

    pub fn into_db(self) -> D {
        self.db
    }
}

/// The keys a statement reads from the objects of its JSON parameter
/// (`value ->> 'key'`, `json_extract(value, '$.key')`), comments left out: what
/// the serialised parameter must carry, or SQL reads NULL.
#[cfg(test)]
pub(crate) fn json_keys_read(statement: &str) -> Vec<&str> {
    let body: Vec<&str> = statement
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect();
    let mut keys: Vec<&str> = body
        .iter()
        .flat_map(|line| {
            let arrow = line.split("value ->> '").skip(1);
            let path = line.split("(value, '$.").skip(1);
            arrow.chain(path).filter_map(|rest| rest.split('\'').next())
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Each object of `json` (an array) has every key `statement` reads.
#[cfg(test)]
pub(crate) fn assert_carries_keys_read(json: &str, statement: &str) {
    let rows: Vec<serde_json::Map<String, Value>> = serde_json::from_str(json).unwrap();
    let keys = json_keys_read(statement);
    assert!(!keys.is_empty() && !rows.is_empty());
    for row in &rows {
        for key in &keys {
            assert!(
                row.contains_key(*key),
                "{key:?} is read but not sent in {json}"
            );
        }
    }
}
