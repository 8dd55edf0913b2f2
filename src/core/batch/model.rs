//! The queue's states and the values that move between the store, the dispatcher
//! and the child executor.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Where an item is in its life. `Completed`, `Failed` and `Cancelled` are
/// terminal: nothing moves an item out of them, except a dead-letter replay, which
/// moves a `Failed` item back to `Pending` (`core::control`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemStatus {
    Pending,
    Processing,
    Completed,
    Failed,
    /// Its batch was cancelled before it ran (or while a retry of it waited).
    Cancelled,
}

impl ItemStatus {
    pub const ALL: [ItemStatus; 5] = [
        ItemStatus::Pending,
        ItemStatus::Processing,
        ItemStatus::Completed,
        ItemStatus::Failed,
        ItemStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ItemStatus::Pending => "pending",
            ItemStatus::Processing => "processing",
            ItemStatus::Completed => "completed",
            ItemStatus::Failed => "failed",
            ItemStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<ItemStatus> {
        ItemStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// The kind of a batch's completion callback (`callback::KIND`), an item of no
/// batch count.
pub const CALLBACK_KIND: &str = "callback";

/// What one run did per channel it sent: `Done` delivered, `Retry` a transient
/// failure, `Fail` a permanent one. Channels delivered before are not sent again,
/// so they are not in it.
pub type ChannelResults = BTreeMap<String, Outcome>;

/// A row handed out by a claim: everything the child needs to run it, plus the
/// lease that fences every later write about it.
/// Built outside this crate with [`ClaimedItem::new`] (or `testing::item`): new
/// fields come with the drain's needs, and a struct literal would break on each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ClaimedItem {
    pub item_id: i64,
    pub lease_token: String,
    pub batch_id: String,
    pub subject_id: String,
    pub attempt: i64,
    pub max_attempts: i64,
    pub kind: String,
    /// The subject's payload as JSON text, exactly as stored.
    pub payload: String,
    /// The item's stored receipts (kinds with channels, `core::receipts`): a run
    /// sends only the channels not yet delivered. Left out of the dispatched JSON
    /// when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipts: Option<String>,
    /// How many times running its dispatch threw (given back unrun each time):
    /// a child that throws for this item again and again crashed, and is no
    /// longer taken for the platform refusing (`core::drain::THROWS_BEFORE_CRASH`).
    /// Left out of the dispatched JSON while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub given_back: i64,
    /// The limit keys the item holds (a JSON array, as stored): a drain that
    /// meets a refusal gives back its queued items holding one of them
    /// (`core::drain`). Never sent to a dispatch.
    #[serde(default, skip_serializing)]
    pub limits: Option<String>,
    /// When the item may start (ms): its rate's slot when a claim took it ahead
    /// (`core::limits::LOOK_AHEAD_MS`), else the claim's instant (0 in items not
    /// from a claim: at once). The drain dispatches it then. Never sent.
    #[serde(default, skip_serializing)]
    pub start_at: i64,
    /// When its receiver's current streak of refusals began (ms), `None` when
    /// its last run was not refused: a streak longer than
    /// `REFUSAL_GIVE_UP_SECONDS` fails it (`core::retry::refused`). Never sent.
    #[serde(default, skip_serializing)]
    pub refused_since: Option<i64>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl ClaimedItem {
    /// Item `item_id` of batch `batch_id` for subject `subject_id`, of `kind`
    /// with `payload` (JSON text, as stored), on attempt 1 of `max_attempts`,
    /// lease `lease_token`; no receipts, no limit keys, to start at once. Set the
    /// public fields for anything else.
    pub fn new(
        item_id: i64,
        batch_id: &str,
        subject_id: &str,
        kind: &str,
        payload: &str,
        max_attempts: i64,
        lease_token: &str,
    ) -> ClaimedItem {
        ClaimedItem {
            item_id,
            lease_token: lease_token.into(),
            batch_id: batch_id.into(),
            subject_id: subject_id.into(),
            attempt: 1,
            max_attempts,
            kind: kind.into(),
            payload: payload.into(),
            receipts: None,
            given_back: 0,
            limits: None,
            start_at: 0,
            refused_since: None,
        }
    }

    /// A batch's completion callback (`core::callback`), not one of its items: it
    /// counts in no batch counter and no timeline.
    pub fn is_callback(&self) -> bool {
        self.kind == CALLBACK_KIND
    }

    /// A no-op item `id` of batch `batch` on its first of three attempts, for the
    /// unit tests of what handles claimed items.
    #[cfg(test)]
    pub fn sample(id: i64, batch: &str) -> ClaimedItem {
        ClaimedItem::new(
            id,
            batch,
            &format!("s{id}"),
            "noop",
            "{}",
            3,
            &format!("t.{id}"),
        )
    }

    /// The limit keys the item holds (none when unreadable).
    pub fn keys(&self) -> Vec<String> {
        self.limits
            .as_deref()
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default()
    }
}

/// What a job reports. `Retry` is transient (try again later), `Fail` permanent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", content = "reason", rename_all = "lowercase")]
pub enum Outcome {
    Done,
    Retry(String),
    Fail(String),
}

/// Bytes a reason keeps, cut where it enters an outcome (`Outcome::bounded`) and
/// where it is stored (`last_error`, `retry::decide`; the group commit cuts again
/// in SQL): a kind's reason may be a whole error page, and every outcome waits in
/// the drain's memory and in one JSON parameter of the group commit.
pub const MAX_REASON_BYTES: usize = 1_000;

/// The longest start of `text` of at most `max` bytes that ends on a character
/// boundary.
pub fn cut_on_char_boundary(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `reason` cut to [`MAX_REASON_BYTES`] on a character boundary (its memory
/// given back when it was longer).
pub fn cut_reason(mut reason: String) -> String {
    let end = cut_on_char_boundary(&reason, MAX_REASON_BYTES).len();
    if end < reason.len() {
        reason.truncate(end);
        reason.shrink_to_fit();
    }
    reason
}

impl Outcome {
    /// The same outcome with its reason cut to [`MAX_REASON_BYTES`].
    pub fn bounded(self) -> Outcome {
        match self {
            Outcome::Done => Outcome::Done,
            Outcome::Retry(r) => Outcome::Retry(cut_reason(r)),
            Outcome::Fail(r) => Outcome::Fail(cut_reason(r)),
        }
    }
}

/// What one answer's budget asks of its keys (`Ran::paced`; decided by `core::flow::pace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Paced {
    /// The budget is spent: the keys pause until it resets (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
    /// The rate the receiver announced (its quota per window), per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<i64>,
    /// Budget left (not yet spent): what remains, and when the budget resets
    /// (ms). The drain pauses the keys then too when its calls already on their
    /// way there are as many as what remains (`core::flow::pace::spent_by_flight`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_at: Option<i64>,
    /// What the budget's reset gives back (a window's quota; one call of a
    /// full leaky bucket): the learned rate's tokens when its pause ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill: Option<i64>,
}

/// What one run of an item produced: its outcome and, for a run that reported
/// channels, what each channel it sent did (`core::receipts`), committed with the
/// outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    pub outcome: Outcome,
    /// `None` for a run that reported no channel (a kind without channels, a
    /// `service` handler that answered without them), and for a run that never
    /// answered (timed out, abandoned, a failed dispatch).
    pub channels: Option<ChannelResults>,
    /// A retry's own delay, asked for by the answer (an HTTP `Retry-After`):
    /// used instead of the backoff, capped by the retry cap (`core::retry::defer`).
    pub retry_after_ms: Option<i64>,
    /// `retry_after_ms` is the item's own delay (a `service` handler's
    /// `after_seconds`): it delays this item only, pausing and teaching no key,
    /// and the retry spends its attempt like any other.
    pub own_delay: bool,
    /// A retry its receiver asked for (`core::receiver`: a `429`, a `403` with a
    /// rate-limit signal, a `503` with a wait): the keys it concerns are paused
    /// and learn, and, unless the run failed otherwise too, the attempt is
    /// given back.
    pub refused: Option<RefusedBy>,
    /// What the answer's announced budget asks of the item's keys (a spent
    /// budget's pause, the announced rate: `core::flow::pace`).
    pub paced: Option<Paced>,
    /// The keys `paced` concerns, when not every key the item holds (a `multi`
    /// channel's `host:` key: the other channels' receivers said no such thing).
    pub paced_keys: Option<Vec<String>>,
}

/// A receiver's refusal in one run (`Ran::refused`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedBy {
    /// The keys it concerns: `None` for every key the item holds (its one
    /// receiver refused); `Some`, only these (a `multi` item's refused
    /// channels' `host:` keys: the other channels' receivers said no such thing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
    /// The run also failed otherwise (another channel's transient failure): that
    /// failure spends the attempt; the refused keys still pause and learn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_failure: bool,
}

impl From<Outcome> for Ran {
    fn from(outcome: Outcome) -> Ran {
        Ran {
            outcome,
            channels: None,
            retry_after_ms: None,
            own_delay: false,
            refused: None,
            paced: None,
            paced_keys: None,
        }
    }
}

impl From<&Outcome> for Ran {
    fn from(outcome: &Outcome) -> Ran {
        Ran::from(outcome.clone())
    }
}

/// The write that commits one outcome: applied only while the row is still
/// `processing` under `lease_token` (otherwise the lease was lost).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub id: i64,
    /// The item's batch: the commit counts outcomes per batch. Not in the commit's
    /// JSON rows (the store groups them by it).
    #[serde(skip)]
    pub batch_id: String,
    pub token: String,
    pub status: ItemStatus,
    /// Next eligible time for a retried item; unchanged otherwise.
    pub run_after: Option<i64>,
    /// Set for terminal states.
    pub completed_at: Option<i64>,
    pub error: Option<String>,
    /// The attempt count to store instead of the claim's: set only for an item
    /// released unrun, which gives its unused attempt back.
    pub attempt: Option<i64>,
    /// Receipts to merge into the stored ones (JSON, `core::receipts::settle`);
    /// `None` leaves them as they are.
    #[serde(default)]
    pub receipts: Option<String>,
    /// A retry the receiver delayed (`Ran::retry_after_ms`), or an answer that
    /// spent its announced budget (`core::flow::pace`): every key the item holds is
    /// paused until then (`sql/pause_limit_keys.sql`). Not a column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_until: Option<i64>,
    /// When the receiver refused the run (`core::learn::is_refusal`): the keys
    /// the item holds learn a rate (`sql/learn_limit_keys.sql`). Not a column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_at: Option<i64>,
    /// The keys the refusal concerns, when not every key the item holds (a
    /// `multi` channel's `host:` key): what `paused_until` and `refused_at`
    /// apply to. Not a column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_keys: Option<Vec<String>>,
    /// When the item's streak of refusals began, stored on the row
    /// (`cron_queue.refused_since`, migration 0025): set by a refusal (and kept
    /// by a release), `None` (NULL) after any other outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_since: Option<i64>,
    /// The item's count of throws running (`ClaimedItem::given_back`) to store:
    /// set by a release after a throw (one more) and for the claimed items given
    /// back behind it (unchanged); `None` (any outcome of a run) stores 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given_back: Option<i64>,
    /// When the answer spent its receiver's announced budget (`core::flow::pace`):
    /// the keys learn its announced rate, if any. Not a column.
    #[serde(default, skip)]
    pub paced_at: Option<i64>,
    /// The rate (per minute) the receiver announced on an answer that refused
    /// or spent the budget: what the keys learn (`core::learn`). Not a column.
    #[serde(default, skip)]
    pub announced_per_minute: Option<i64>,
    /// With `announced_per_minute`: the starts its reset gives back, the
    /// learned rate's tokens when the pause ends (`Paced::refill`). Not a column.
    #[serde(default, skip)]
    pub announced_refill: Option<i64>,
}

impl Transition {
    /// An item given back unrun (`retry::release`), not an outcome of a run (a
    /// refusal gives its attempt back too, but is a run its receiver refused).
    pub fn is_release(&self) -> bool {
        self.attempt.is_some() && self.refused_at.is_none()
    }
}

/// A batch as stored, with the live `processing` count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRow {
    pub id: String,
    pub key: String,
    pub status: String,
    pub total: i64,
    pub completed: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub processing: i64,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    /// The schedule that fired it; `None` for ad-hoc batches (`POST /batches`).
    pub schedule_id: Option<String>,
    /// Its completion callback as stored (`{"url": …}`, `core::callback`), if any.
    #[serde(default)]
    pub on_finish: Option<String>,
    /// The callback row of its latest end, if it ended with an `on_finish`: its
    /// item status, attempts made and last error.
    #[serde(default)]
    pub callback_status: Option<String>,
    #[serde(default)]
    pub callback_attempts: Option<i64>,
    #[serde(default)]
    pub callback_error: Option<String>,
    /// 1 while it is still being filled from subjects (`batches.fill_after` set):
    /// `total` counts the items enqueued so far and grows each tick until then.
    #[serde(default)]
    pub filling: i64,
    /// Its items are claimed before those of lower priorities (-10 to 10).
    #[serde(default)]
    pub priority: i64,
    /// Its share of the invocations that worked on it (`core::cost::Cost` as
    /// JSON text, migration 0026); read by `GET /batches/{id}` only.
    #[serde(default)]
    pub cost: Option<String>,
}

impl BatchRow {
    /// Items not yet ended nor in flight. Exact: the terminal counters are kept by
    /// the group commit, the reaper and the bulk moves, `processing` is counted live.
    pub fn pending(&self) -> i64 {
        (self.total - self.completed - self.failed - self.cancelled - self.processing).max(0)
    }
}

/// A batch that the finish compare-and-set ended (observed once per end):
/// `status` is `finished`, or `cancelled` for a cancelled batch whose last items
/// ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishedBatch {
    pub id: String,
    pub key: String,
    pub status: String,
    pub total: i64,
    pub completed: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub created_at: i64,
    pub finished_at: i64,
}

/// What the reaper did to one expired lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReapedItem {
    pub id: i64,
    pub batch_id: String,
    pub status: String,
    /// Its job kind: a callback's expired lease counts in no batch's timeline.
    pub kind: String,
}

/// What started a scheduled invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// Only in summaries stored before schedules: the old `DAILY_CRON` run that
    /// created the day's batch (now the `daily` schedule, fired by any tick).
    Daily,
    /// Every cron: fire due schedules, reap expired leases, drain (or, with
    /// `DRAINERS` > 1, send the drain messages).
    Tick,
    /// A drainer: one `DRAIN_QUEUE` message, one drain.
    Queue,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Daily => "daily",
            Trigger::Tick => "tick",
            Trigger::Queue => "queue",
        }
    }
}

/// Why a drain stopped claiming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// A claim came back short: nothing else was due.
    Drained,
    /// The next claim would not have fit the subrequest budget.
    Budget,
    /// No further item could have run and been committed before the deadline,
    /// or before its lease expired (a D1 too slow for the lease).
    Deadline,
    /// A step failed (a claim, or the invocation's first step); what was running
    /// was still committed.
    Error,
    /// `MAX_CHILD_INVOCATIONS` dispatches were made: the platform refuses more
    /// service-binding calls from one request.
    #[serde(rename = "child_cap")]
    ChildCap,
    /// The platform refused a dispatch: the items it and the queue held were
    /// given back unrun, and nothing more was dispatched.
    Refused,
    /// A tick that drained nothing itself: it sent `DRAINERS` messages to
    /// `DRAIN_QUEUE`, and the drainers' own summaries say how they stopped.
    Drainers,
}

impl StopReason {
    pub const ALL: [StopReason; 7] = [
        StopReason::Drained,
        StopReason::Budget,
        StopReason::Deadline,
        StopReason::Error,
        StopReason::ChildCap,
        StopReason::Refused,
        StopReason::Drainers,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Drained => "drained",
            StopReason::Budget => "budget",
            StopReason::Deadline => "deadline",
            StopReason::Error => "error",
            StopReason::ChildCap => "child_cap",
            StopReason::Refused => "refused",
            StopReason::Drainers => "drainers",
        }
    }
}

/// What one invocation did to items, counted where it happened: claims and
/// applied commits by the drain (`core::drain`), expired leases by the reaper.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Batches of the items claimed.
    pub batch_ids: BTreeSet<String>,
    pub claimed: i64,
    pub completed: i64,
    /// Went back to `pending` for another attempt.
    pub retried: i64,
    pub failed: i64,
    /// Outcomes not applied because the lease had been lost.
    pub lost_leases: i64,
    /// Claimed items given back unrun (pending, attempt restored): the time left
    /// before their lease expired or the deadline could not cover a call and its
    /// commit at the D1 round trips seen.
    pub released: i64,
    /// Expired leases the reaper requeued or failed.
    pub reaped: i64,
    /// Items each batch moved to a terminal state in this invocation (drain
    /// commits and the reaper). Stored with the summary, it is what the timeline,
    /// rate and ETA of a batch are derived from: no write per item.
    #[serde(default)]
    pub per_batch: BTreeMap<String, BatchTally>,
    /// `DRAIN_QUEUE` operations it caused: 1 per drain message it sent, 2 for
    /// the message it was delivered (read, then acknowledged: deleted).
    #[serde(default)]
    pub queue_operations: i64,
}

/// One batch's share of an invocation: its items that ended, by how, and its
/// share of the invocation's costs (`core::cost::split`; absent in summaries
/// stored before costs were shared, and until the summary is built).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchTally {
    pub completed: i64,
    pub failed: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
}

/// What an invocation, or a batch's share of invocations, cost. Field names are
/// the JSON contract of `GET /batches/{id}`'s `cost` and of the summaries'
/// `per_batch` shares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    pub d1_rows_written: i64,
    pub d1_rows_read: i64,
    pub d1_statements: i64,
    /// Not billed: what the platform's per-invocation subrequest limit counts.
    pub subrequests: i64,
    /// `DRAIN_QUEUE` operations: a drain message written by its sender, read
    /// and deleted (acknowledged) by its drainer, as Queues bills them.
    pub queue_operations: i64,
    /// Invocations (each one Worker request: a cron tick or a queue delivery);
    /// children reached over the `SELF` service binding are subrequests, which
    /// Workers does not bill as requests.
    pub worker_requests: i64,
}

impl Cost {
    /// The whole of one invocation's summary: its own request, and its D1 and
    /// queue figures as measured (rows read by summaries stored before they
    /// were counted: 0).
    pub fn of(summary: &InvocationSummary) -> Cost {
        Cost {
            d1_rows_written: summary.d1_rows_written,
            d1_rows_read: summary.d1_rows_read.unwrap_or(0),
            d1_statements: summary.d1_statements,
            subrequests: summary.subrequests,
            queue_operations: summary.tally.queue_operations,
            worker_requests: 1,
        }
    }

    pub fn add(&mut self, other: &Cost) {
        self.d1_rows_written += other.d1_rows_written;
        self.d1_rows_read += other.d1_rows_read;
        self.d1_statements += other.d1_statements;
        self.subrequests += other.subrequests;
        self.queue_operations += other.queue_operations;
        self.worker_requests += other.worker_requests;
    }

    /// A batch's counters as `get_batch.sql` reads them (JSON text); `None`
    /// when absent or unreadable.
    pub fn stored(json: Option<&str>) -> Option<Cost> {
        serde_json::from_str(json?).ok()
    }

    pub(crate) fn fields(&self) -> [i64; 6] {
        [
            self.d1_rows_written,
            self.d1_rows_read,
            self.d1_statements,
            self.subrequests,
            self.queue_operations,
            self.worker_requests,
        ]
    }

    pub(crate) fn from_fields(f: [i64; 6]) -> Cost {
        Cost {
            d1_rows_written: f[0],
            d1_rows_read: f[1],
            d1_statements: f[2],
            subrequests: f[3],
            queue_operations: f[4],
            worker_requests: f[5],
        }
    }
}

impl Tally {
    /// Count an item of `batch_id` written to `status`; only terminal states
    /// count (a retry is not an item done).
    pub fn count_terminal(&mut self, batch_id: &str, status: ItemStatus) {
        let (completed, failed) = match status {
            ItemStatus::Completed => (1, 0),
            ItemStatus::Failed => (0, 1),
            // A commit or the reaper never ends an item cancelled: the cancel sweep
            // does, outside any drain.
            ItemStatus::Pending | ItemStatus::Processing | ItemStatus::Cancelled => return,
        };
        // Completions are the hot path: no key allocation once the batch is known.
        let counts = match self.per_batch.get_mut(batch_id) {
            Some(counts) => counts,
            None => self.per_batch.entry(batch_id.to_string()).or_default(),
        };
        counts.completed += completed;
        counts.failed += failed;
    }

    /// Add what another part of the same invocation counted (the reaper's share
    /// to the drain's).
    pub fn absorb(&mut self, other: Tally) {
        self.batch_ids.extend(other.batch_ids);
        self.claimed += other.claimed;
        self.completed += other.completed;
        self.retried += other.retried;
        self.failed += other.failed;
        self.lost_leases += other.lost_leases;
        self.released += other.released;
        self.reaped += other.reaped;
        self.queue_operations += other.queue_operations;
        for (batch, counts) in other.per_batch {
            let mine = self.per_batch.entry(batch).or_default();
            mine.completed += counts.completed;
            mine.failed += counts.failed;
        }
    }
}

/// One scheduled invocation's summary: logged once (`invocation`), stored as one
/// row (`record_invocation.sql`), listed by `GET /invocations` and read by loadtest,
/// all in this one form. Timestamps are RFC 3339 text in JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvocationSummary {
    /// The invocation's id, drawn when it starts: what its outbound calls and its
    /// children's carry as `Fanout-Invocation` and every log line of it and of its
    /// children shows as `invocation`. `None` in summaries stored before it was.
    #[serde(default)]
    pub invocation: Option<String>,
    pub trigger: Trigger,
    #[serde(with = "crate::core::time::rfc3339_ms")]
    pub started_at: i64,
    pub elapsed_ms: i64,
    #[serde(flatten)]
    pub tally: Tally,
    /// Subrequests made (D1 calls, SELF calls, inline job fetches), this summary's
    /// own insert included.
    pub subrequests: i64,
    pub subrequest_budget: i64,
    /// D1 statements and rows written, this summary's own insert included.
    pub d1_statements: i64,
    pub d1_rows_written: i64,
    /// D1 rows read (D1's `meta.rows_read`, summed as statements are), this
    /// summary's own insert excluded (its answer comes after it is built).
    /// `None` in summaries stored before it was.
    #[serde(default)]
    pub d1_rows_read: Option<i64>,
    pub stop_reason: StopReason,
    /// A drainer's number among its tick's, and its place in the chain
    /// (`DRAINERS = "auto"`: 0 sent by the tick, k its k-th continuation); left
    /// out for ticks and drainers of a fixed `DRAINERS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drainer: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<i64>,
}

/// A stored summary, as `GET /invocations` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invocation {
    pub id: i64,
    #[serde(flatten)]
    pub summary: InvocationSummary,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_outcome_keeps_at_most_max_reason_bytes_on_a_char_boundary() {
        let long = "é".repeat(MAX_REASON_BYTES) + "x";
        match Outcome::Retry(format!("x{long}")).bounded() {
            // One ASCII byte then 499 two-byte characters: 999 bytes, not a cut 1,000th.
            Outcome::Retry(r) => assert_eq!(r.len(), MAX_REASON_BYTES - 1),
            other => panic!("{other:?}"),
        }
        match Outcome::Fail("y".repeat(3 << 20)).bounded() {
            Outcome::Fail(r) => assert_eq!(r.len(), MAX_REASON_BYTES),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Outcome::Fail("short".into()).bounded(),
            Outcome::Fail("short".into())
        );
        assert_eq!(Outcome::Done.bounded(), Outcome::Done);
        assert_eq!(cut_on_char_boundary("aé", 2), "a");
    }

    #[test]
    fn status_round_trips_through_text() {
        for s in ItemStatus::ALL {
            assert_eq!(ItemStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(ItemStatus::parse("done"), None);
    }
}
