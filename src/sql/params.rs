//! A typed parameter struct per statement that takes parameters: its fields are
//! named after the `?N` comments of its SQL file, so a call site names each value
//! instead of placing it, and a wrong order cannot compile into a wrong binding.

use super::*;

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

/// A statement with its parameters, ready to run.
pub trait Statement: Sized {
    const SQL: &'static str;
    /// The parameters in `?1, ?2, …` order.
    fn params(self) -> Vec<Param>;
    /// The statement text and its parameters, as `Db::query`/`Db::batch` take them.
    fn bind(self) -> (&'static str, Vec<Param>) {
        (Self::SQL, self.params())
    }
}

/// `Name<'a> = SQL_CONST { field: Type, … }` declares `pub struct Name` and its
/// [`Statement`]. Field order is the binding order: the first field is `?1`.
/// Each type converts `Into<Param>` as it is bound.
macro_rules! statement {
    ($(
        $(#[$doc:meta])*
        $name:ident $(<$lt:lifetime>)? = $sql:ident { $($field:ident: $ty:ty),* $(,)? }
    )*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone)]
            pub struct $name $(<$lt>)? {
                $(pub $field: $ty,)*
            }

            impl $(<$lt>)? Statement for $name $(<$lt>)? {
                const SQL: &'static str = $sql;
                fn params(self) -> Vec<Param> {
                    vec![$(self.$field.into()),*]
                }
            }
        )*

        /// Each struct's name, statement and number of fields, for the test below.
        #[cfg(test)]
        const DECLARED: &[(&str, &str, usize)] =
            &[$((stringify!($name), $sql, [$(stringify!($field)),*].len())),*];
    };
}

statement! {
    // Batches.
    /// `on_finish`: as stored (`core::callback`); `callback_attempts` is `None`
    /// without it. `fill`: `batches.fill` JSON for a batch over subjects.
    CreateBatch<'a> = CREATE_BATCH {
        id: &'a str, key: &'a str, now: i64, on_finish: Option<&'a str>,
        callback_attempts: Option<i64>, fill: Option<String>, priority: i64,
    }
    /// `batch_id` `None`: the oldest batch still filling.
    MarkFillPage<'a> = MARK_FILL_PAGE { batch_id: Option<&'a str> }
    FillGroupPage<'a> = FILL_GROUP_PAGE { batch_id: Option<&'a str>, page: i64 }
    FillEveryGroupPage<'a> = FILL_EVERY_GROUP_PAGE { batch_id: Option<&'a str>, page: i64 }
    AdvanceFill<'a> = ADVANCE_FILL { batch_id: Option<&'a str> }
    /// `items`: `items_json`; `kind_attempts`: JSON object kind → max attempts.
    EnqueueItems<'a> = ENQUEUE_ITEMS {
        batch_id: &'a str, max_attempts: i64, items: String, kind_attempts: String,
    }
    SetBatchTotal<'a> = SET_BATCH_TOTAL { batch_id: &'a str }
    GetBatch<'a> = GET_BATCH { batch_id: &'a str }
    BatchExists<'a> = BATCH_EXISTS { batch_id: &'a str }
    GetBatchByKey<'a> = GET_BATCH_BY_KEY { key: &'a str }
    ListBatches = LIST_BATCHES { page: i64 }
    FinishBatches = FINISH_BATCHES { now: i64 }

    // The queue's items.
    /// `claimed`: `Claimed::json`, the largest id this claimer claimed per batch;
    /// `per_batch`: candidates read per batch (>= `limit`); `charges`: 1 when
    /// [`ChargeRateLimits`] runs first in the same batch(), with the same values
    /// (and [`ClaimHeld`] before it, while limits are defined).
    ClaimHeld<'a> = CLAIM_HELD {
        now: i64, limit: i64, token_prefix: &'a str, claimed: &'a str, per_batch: i64,
        charges: i64,
    }
    ChargeRateLimits<'a> = CHARGE_RATE_LIMITS {
        now: i64, limit: i64, token_prefix: &'a str, claimed: &'a str, per_batch: i64,
        charges: i64,
    }
    ClaimDueItems<'a> = CLAIM_DUE_ITEMS {
        now: i64, limit: i64, token_prefix: &'a str, claimed: &'a str, per_batch: i64,
        charges: i64, lease_expires_at: i64,
    }
    /// [`ClaimDueItems`] after the charge (items a rate lets through ahead start
    /// at their slots): the same fields, so the store binds it with
    /// `ClaimDueItems::params`.
    ClaimDueItemsAtSlots<'a> = CLAIM_DUE_ITEMS_AT_SLOTS {
        now: i64, limit: i64, token_prefix: &'a str, claimed: &'a str, per_batch: i64,
        charges: i64, lease_expires_at: i64,
    }
    /// [`ClaimDueItems`] while no limit, pause or learned rate is in force: the
    /// same fields, `charges` not read.
    ClaimPlain<'a> = CLAIM_PLAIN {
        now: i64, limit: i64, token_prefix: &'a str, claimed: &'a str, per_batch: i64,
        charges: i64, lease_expires_at: i64,
    }
    /// `outcomes_by_batch`: `outcomes_by_batch_json`; `outcomes`:
    /// `transitions_json`, the same for the commit and its read-back.
    CountCommittedOutcomes = COUNT_COMMITTED_OUTCOMES { outcomes_by_batch: String }
    CommitOutcomes = COMMIT_OUTCOMES { outcomes: String }
    /// `pauses`: JSON array of {"id", "token", "until"} (`store::pauses_json`).
    PauseLimitKeys = PAUSE_LIMIT_KEYS { pauses: String }
    /// `refusals`: JSON array of {"id", "token"}, `now` the last refusal's
    /// instant, `completed` JSON array of the ids the commit completes
    /// (`store::refusals_json`).
    LearnLimitKeys = LEARN_LIMIT_KEYS { refusals: String, now: i64, completed: String }
    ClearEndedPauses = CLEAR_ENDED_PAUSES { now: i64, kept: i64 }
    LiftPause<'a> = LIFT_PAUSE { key: &'a str, now: i64 }
    DeleteEndedStates = DELETE_ENDED_STATES { now: i64, kept: i64 }
    CommittedOutcomes = COMMITTED_OUTCOMES { outcomes: String }
    CountReapedFailures = COUNT_REAPED_FAILURES { now: i64, page: i64 }
    ReapExpiredLeases = REAP_EXPIRED_LEASES { now: i64, page: i64 }
    /// `status` `None`: any status; `walk`: `core::listing::ITEMS_WALKED_PER_PAGE`.
    ListBatchItems<'a> = LIST_BATCH_ITEMS {
        batch_id: &'a str, after: &'a str, status: Option<&'a str>, limit: i64, walk: i64,
    }
    ListFailedItems<'a> = LIST_FAILED_ITEMS { batch_id: &'a str, after: &'a str, page: i64 }
    GetItem = GET_ITEM { item_id: i64 }

    // Subjects.
    /// `subjects`: JSON array of the subjects' rows.
    UpsertSubjects = UPSERT_SUBJECTS { subjects: String, now: i64 }
    ListSubjects<'a> = LIST_SUBJECTS { after: &'a str, limit: i64 }
    GetSubject<'a> = GET_SUBJECT { id: &'a str }
    DeleteSubject<'a> = DELETE_SUBJECT { id: &'a str }

    // Schedules.
    /// Exactly one of `cron`, `every_seconds`, `at` is `Some`; `enabled` is 0/1.
    UpsertSchedule<'a> = UPSERT_SCHEDULE {
        id: &'a str, cron: Option<&'a str>, every_seconds: Option<i64>, at: Option<i64>,
        timezone: &'a str, group_name: Option<&'a str>, jitter_seconds: i64, enabled: i64,
        next_fire_at: Option<i64>, now: i64, on_finish: Option<&'a str>, priority: i64,
    }
    GetSchedule<'a> = GET_SCHEDULE { id: &'a str }
    ListSchedules<'a> = LIST_SCHEDULES { after: &'a str, limit: i64 }
    DeleteSchedule<'a> = DELETE_SCHEDULE { id: &'a str }
    DueSchedules = DUE_SCHEDULES { now: i64, limit: i64 }
    /// `retention_cutoff` `None`: retention is off.
    ReadTickWork = TICK_WORK { retention_cutoff: Option<i64> }
    /// `groups`: JSON array of group names; `every_group` is 0/1.
    ZonesInUse = ZONES_IN_USE { groups: String, every_group: i64 }
    KeyPrefixUsedByOthers<'a> = KEY_PREFIX_USED_BY_OTHERS { schedule_id: &'a str }
    /// `revision` and `created_at`: the schedule's, when planned; `group` `None`:
    /// every group.
    CreateScheduleBatch<'a> = CREATE_SCHEDULE_BATCH {
        batch_id: &'a str, key: &'a str, now: i64, schedule_id: &'a str, revision: i64,
        max_attempts: i64, created_at: i64, group: Option<&'a str>, fill: String,
    }
    /// `now` and `key` are `None` when the plan created no batch.
    AdvanceSchedule<'a> = ADVANCE_SCHEDULE {
        schedule_id: &'a str, revision: i64, next_fire_at: Option<i64>, enabled: i64,
        now: Option<i64>, key: Option<&'a str>, created_at: i64,
    }
    /// `failures`: JSON array of {"id", "revision", "created_at", "retry_at"}.
    RecordFireFailures = RECORD_FIRE_FAILURES { failures: String }
    /// `keys`: JSON array of keys.
    GetBatchesByKeys = GET_BATCHES_BY_KEYS { keys: String }
    /// `fires`: `tick::read_back_json`.
    FiredBatches = FIRED_BATCHES { fires: String }

    // Control: pause, cancel, replay, upkeep. A `batch_id` of `None`: every
    // cancelled batch that has not ended.
    SetBatchStatus<'a> = SET_BATCH_STATUS { batch_id: &'a str, expected: &'a str, status: &'a str }
    CountCancelledPage<'a> = COUNT_CANCELLED_PAGE { batch_id: Option<&'a str>, page: i64 }
    CancelPendingPage<'a> = CANCEL_PENDING_PAGE {
        batch_id: Option<&'a str>, page: i64, now: i64,
    }
    AdvanceCancelledCursors<'a> = ADVANCE_CANCELLED_CURSORS { batch_id: Option<&'a str> }
    /// The same first four as [`RequeueFailedPage`], in the same `batch()`.
    ReopenForReplay<'a> = REOPEN_FOR_REPLAY {
        batch_id: &'a str, after: &'a str, error_contains: Option<&'a str>, page: i64,
    }
    /// `grow`: attempts to add; `kind_attempts`: JSON object kind → attempts.
    RequeueFailedPage<'a> = REQUEUE_FAILED_PAGE {
        batch_id: &'a str, after: &'a str, error_contains: Option<&'a str>, page: i64,
        now: i64, grow: i64, kind_attempts: String,
    }
    ReopenForItemReplay = REOPEN_FOR_ITEM_REPLAY { item_id: i64 }
    RequeueFailedItem = REQUEUE_FAILED_ITEM {
        item_id: i64, now: i64, grow: i64, kind_attempts: String,
    }
    /// `items`: most items per statement; `batches`: batches a page.
    DeleteExpiredItems = DELETE_EXPIRED_ITEMS { cutoff: i64, items: i64, batches: i64 }
    DeleteExpiredBatches = DELETE_EXPIRED_BATCHES { cutoff: i64, batches: i64 }
    DeleteOldInvocations = DELETE_OLD_INVOCATIONS { cutoff: i64, rows: i64 }

    // Invocation summaries.
    /// `summary`: `InvocationSummary` as JSON.
    RecordInvocation = RECORD_INVOCATION { summary: String }
    /// `batch_ids`: JSON array; `lookback_ms`: how long an invocation can run.
    RecentThroughput = RECENT_THROUGHPUT { since: i64, batch_ids: String, lookback_ms: i64 }
    BatchTimeline<'a> = BATCH_TIMELINE {
        batch_id: &'a str, ended_from: i64, to: i64, bucket_ms: i64, limit: i64,
        lookback_ms: i64,
    }
    MetricsSnapshot = METRICS_SNAPSHOT {
        now: i64, due_cap: i64, window_start: i64, dead_letter_cap: i64,
    }
    ListInvocations = LIST_INVOCATIONS { limit: i64 }
    /// `since`: batches created at or after it (ms); `limit`: most sources.
    CostBySource = COST_BY_SOURCE { since: i64, limit: i64 }

    // Limits.
    /// `rate` and `burst` are both `None` without a rate; `concurrency` `None`: none.
    UpsertLimit<'a> = UPSERT_LIMIT {
        key: &'a str, rate: Option<i64>, per_seconds: i64, burst: Option<i64>,
        concurrency: Option<i64>, now: i64,
    }
    GetLimit<'a> = GET_LIMIT { key: &'a str }
    ListLimits<'a> = LIST_LIMITS { after: &'a str, limit: i64 }
    DeleteLimitState<'a> = DELETE_LIMIT_STATE { key: &'a str }
    ListPausedKeys = LIST_PAUSED_KEYS { now: i64, limit: i64 }
    /// `key`: only that key, or `None` for all.
    ListLearnedKeys<'a> = LIST_LEARNED_KEYS { now: i64, limit: i64, key: Option<&'a str> }
    DeleteLimit<'a> = DELETE_LIMIT { key: &'a str }
    HoldCursorsAfterLimitDelete<'a> = HOLD_CURSORS_AFTER_LIMIT_DELETE { key: &'a str, now: i64 }
    /// `due_cap`: `core::metrics::DUE_CAP`, as /metrics counts due items.
    LimitUsage = LIMIT_USAGE { now: i64, due_cap: i64 }

    // What holds pending items: the state of `keys` (JSON array, each once) and
    // of batch `batch_id` (`waiting_keys.sql`); the head of a batch
    // (`waiting_head.sql`), `head` entries of each part. `claim`: a claim's size.
    WaitingKeys<'a> = WAITING_KEYS { now: i64, batch_id: &'a str, keys: String, claim: i64 }
    WaitingHead<'a> = WAITING_HEAD { batch_id: &'a str, head: i64 }

    // Elastic drain (`DRAINERS = "auto"`). `no_claim`: a token no claim has;
    // `no_marks`: "{}"; `charges`: 1 (the claim selection's parameters).
    CountDrainWork<'a> = COUNT_DRAIN_WORK {
        now: i64, cap: i64, no_claim: &'a str, no_marks: &'a str, per_batch: i64, charges: i64,
    }
    AcquireDrainerSlot<'a> = ACQUIRE_DRAINER_SLOT {
        now: i64, holder: &'a str, expires_at: i64, max_drainers: i64,
    }
    PassDrainerSlot<'a> = PASS_DRAINER_SLOT {
        now: i64, cap: i64, no_claim: &'a str, no_marks: &'a str, per_batch: i64, charges: i64,
        slot: i64, next_holder: &'a str, expires_at: i64, holder: &'a str, capacity: i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest `?N` in a statement's SQL, comments left out.
    fn last_param(sql: &str) -> usize {
        let body: String = sql
            .lines()
            .map(|l| l.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        body.split('?')
            .skip(1)
            .filter_map(|rest| {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .max()
            .unwrap_or(0)
    }

    /// Every struct has one field per `?N` of its statement, and every statement
    /// that takes parameters has a struct: a field missing or left over fails
    /// here rather than when the statement first runs.
    #[test]
    fn each_statement_with_parameters_has_a_struct_of_as_many_fields() {
        for (name, sql, fields) in DECLARED {
            assert_eq!(last_param(sql), *fields, "{name}");
        }
        for (name, sql) in ALL {
            let declared = DECLARED.iter().any(|(_, s, _)| s == sql);
            assert_eq!(declared, last_param(sql) > 0, "{name}");
        }
    }
}
