//! What holds a pending item (`waiting_on`): the reasons as the API names them,
//! which one holds each item (from its run_after and the state of its keys that
//! `sql/waiting_keys.sql` reads with the claim's rules), and the views built from
//! them. Computed when read; nothing is stored.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::core::batch::rows::ItemRow;
use crate::core::time::rfc3339;

/// Entries of each part of a batch's head its counts read (its due index, its
/// cursor's ids): the claim reads at most as many candidates per batch while
/// limits are kept (`core::limits::HELD_WINDOW`), so past them an item waits for
/// its batch's own earlier items; the pending items past them are `not_read`.
pub const HEAD_READ: i64 = crate::core::flow::limits::HELD_WINDOW;

/// The reasons, in their order of precedence (the first that holds an item is
/// its reason; [`item_reasons`]).
pub const REASONS: [&str; 7] = [
    "batch_paused",
    "backoff",
    "paused",
    "concurrency",
    "rate",
    "turn",
    "due",
];

/// What holds one pending item ([`item_reasons`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WaitingRow {
    pub id: i64,
    pub reason: String,
    pub last_error: Option<String>,
    /// A backoff's run_after, a pause's end, a rate's next token (ms).
    pub until: Option<i64>,
    pub key: Option<String>,
    pub in_flight: Option<i64>,
    pub concurrency: Option<i64>,
    pub learned: Option<i64>,
    pub batches: Option<i64>,
    pub priority: Option<i64>,
    /// `paused`: the receiver's word that set the pause, when it said one.
    #[serde(default)]
    pub word: Option<String>,
}

/// What holds one pending item, as `GET /batches/{id}/items` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum WaitingOn {
    BatchPaused,
    Backoff {
        until: String,
        last_error: Option<String>,
    },
    Paused {
        key: String,
        until: String,
    },
    Concurrency {
        key: String,
        in_flight: i64,
        concurrency: i64,
    },
    Rate {
        key: String,
        next_token_at: String,
        learned: bool,
    },
    Turn {
        batches: i64,
        priority: i64,
    },
    Due,
}

impl WaitingRow {
    /// The view of the row; `None` for a reason this version does not know
    /// (a row must never turn into a wrong reason).
    pub fn view(&self) -> Option<WaitingOn> {
        let at = |ms: Option<i64>| ms.map(rfc3339);
        let key = || self.key.clone();
        Some(match self.reason.as_str() {
            "batch_paused" => WaitingOn::BatchPaused,
            "backoff" => WaitingOn::Backoff {
                until: at(self.until)?,
                last_error: self.last_error.clone(),
            },
            "paused" => WaitingOn::Paused {
                key: key()?,
                until: at(self.until)?,
            },
            "concurrency" => WaitingOn::Concurrency {
                key: key()?,
                in_flight: self.in_flight?,
                concurrency: self.concurrency?,
            },
            "rate" => WaitingOn::Rate {
                key: key()?,
                next_token_at: at(self.until)?,
                learned: self.learned? != 0,
            },
            "turn" => WaitingOn::Turn {
                batches: self.batches?,
                priority: self.priority?,
            },
            "due" => WaitingOn::Due,
            _ => return None,
        })
    }
}

/// How many keys `GET /batches/{id}`'s `waiting_keys` shows: the keys holding
/// most of its items (`GET /limits` has them all).
pub const TOP_KEYS: usize = 5;

/// What holds one pending item with, for a pause, the receiver's word that set
/// it: an item's `waiting_on` in `GET /batches/{id}/items`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemWaiting {
    #[serde(flatten)]
    pub on: WaitingOn,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub word: Option<String>,
}

impl WaitingRow {
    /// [`WaitingRow::view`] with a pause's word.
    pub fn shown(&self) -> Option<ItemWaiting> {
        let on = self.view()?;
        let word = matches!(on, WaitingOn::Paused { .. })
            .then(|| self.word.clone())
            .flatten();
        Some(ItemWaiting { on, word })
    }
}

/// A reason's items ([`reason_counts`]), split by key for a key's reasons (with
/// the key's state) and for items in backoff on a paused key. `last_error`: for
/// those in backoff, the greatest of their last errors; for a paused key, the
/// pause's own word (the receiver's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ReasonCount {
    pub reason: String,
    pub n: i64,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub until: Option<i64>,
    #[serde(default)]
    pub in_flight: Option<i64>,
    #[serde(default)]
    pub concurrency: Option<i64>,
    #[serde(default)]
    pub learned: Option<i64>,
    #[serde(default)]
    pub last_error: Option<String>,
}

/// A key holding pending items of a batch, as `GET /batches/{id}`'s
/// `waiting_keys` shows it: its reason and state (those of [`WaitingOn`]), the
/// batch's items it holds, and for a paused key the receiver's word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyWaiting {
    pub items: i64,
    #[serde(flatten)]
    pub on: WaitingOn,
    /// A paused key: the last error of an item of the batch in backoff on it
    /// (the refusal that paused it), when the head read one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub word: Option<String>,
}

/// The keys holding most of the batch's items read (at most [`TOP_KEYS`]), most
/// items first, then by key.
pub fn top_keys(rows: &[ReasonCount]) -> Vec<KeyWaiting> {
    let word = |key: &str| {
        rows.iter()
            .find(|r| r.reason == "backoff" && r.key.as_deref() == Some(key))
            .and_then(|r| r.last_error.clone())
    };
    let mut keys: Vec<KeyWaiting> = rows
        .iter()
        .filter(|r| r.reason != "backoff" && r.key.is_some())
        .filter_map(|r| {
            let on = WaitingRow {
                id: 0,
                reason: r.reason.clone(),
                last_error: None,
                until: r.until,
                key: r.key.clone(),
                in_flight: r.in_flight,
                concurrency: r.concurrency,
                learned: r.learned,
                batches: None,
                priority: None,
                word: None,
            }
            .view()?;
            // The pause's own word, else a refused item's of the batch in backoff
            // on it (a pause set before its word was kept).
            let word = match on {
                WaitingOn::Paused { ref key, .. } => r.last_error.clone().or_else(|| word(key)),
                _ => None,
            };
            Some(KeyWaiting {
                items: r.n,
                on,
                word,
            })
        })
        .collect();
    keys.sort_by(|a, b| {
        b.items
            .cmp(&a.items)
            .then_with(|| key_of(&a.on).cmp(key_of(&b.on)))
    });
    keys.truncate(TOP_KEYS);
    keys
}

fn key_of(on: &WaitingOn) -> &str {
    match on {
        WaitingOn::Paused { key, .. }
        | WaitingOn::Concurrency { key, .. }
        | WaitingOn::Rate { key, .. } => key,
        _ => "",
    }
}

/// A batch's pending items per reason (`GET /batches/{id}`'s `waiting_on`):
/// every reason, 0 when none, and `not_read`, the pending items past the head
/// the counts read ([`HEAD_READ`]), so the counts add up to `pending`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitingCounts {
    #[serde(flatten)]
    pub by_reason: BTreeMap<String, i64>,
    pub not_read: i64,
}

impl WaitingCounts {
    /// The counts of a batch with `pending` items from the rows read (a reason
    /// not in [`REASONS`] is left out: its items count as not read).
    pub fn of(rows: &[ReasonCount], pending: i64) -> WaitingCounts {
        let mut by_reason: BTreeMap<String, i64> =
            REASONS.iter().map(|r| (r.to_string(), 0)).collect();
        for row in rows {
            if let Some(n) = by_reason.get_mut(&row.reason) {
                *n += row.n;
            }
        }
        let read: i64 = by_reason.values().sum();
        WaitingCounts {
            by_reason,
            // Items may have moved between the counters' read and this one.
            not_read: (pending - read).max(0),
        }
    }

    /// A paused batch: every pending item waits on it, none read.
    pub fn batch_paused(pending: i64) -> WaitingCounts {
        WaitingCounts::of(
            &[ReasonCount {
                reason: "batch_paused".into(),
                n: pending,
                ..ReasonCount::default()
            }],
            pending,
        )
    }
}

/// A pending item as the reads of why it waits need it: its run_after (0
/// already read as its batch's due instant, as the listing shows it), its keys
/// as stored (a JSON array's text) and its last error.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PendingItem {
    pub id: i64,
    pub run_after: i64,
    #[serde(default)]
    pub limits: Option<String>,
    #[serde(default)]
    pub last_error: Option<String>,
}

/// A listed item as the reads of why it waits need it (the listing already
/// reads run_after 0 as its batch's due instant).
impl From<&ItemRow> for PendingItem {
    fn from(i: &ItemRow) -> PendingItem {
        PendingItem {
            id: i.id,
            run_after: i.run_after,
            limits: i.limits.clone(),
            last_error: i.last_error.clone(),
        }
    }
}

impl PendingItem {
    /// Its keys, each once; stored text that is not an array of strings holds
    /// none (the claim's `json_each` would fail on it, not hold the item).
    fn keys(&self) -> BTreeSet<String> {
        self.limits
            .as_deref()
            .and_then(|text| serde_json::from_str::<Vec<String>>(text).ok())
            .unwrap_or_default()
            .into_iter()
            .collect()
    }
}

/// The keys `items` hold, each once, in order: what `sql/waiting_keys.sql` asks
/// about.
pub fn keys_held(items: &[PendingItem]) -> Vec<String> {
    let keys: BTreeSet<String> = items.iter().flat_map(PendingItem::keys).collect();
    keys.into_iter().collect()
}

/// One row of `sql/waiting_keys.sql`: the batch's status and the due items of
/// higher priorities ahead of it (at most a claim's worth), and one governed
/// key's state (`key` `None` on the one row of a batch with no key governed).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct KeyWaitRow {
    pub status: String,
    pub ahead_items: i64,
    pub ahead_batches: i64,
    #[serde(default)]
    pub ahead_priority: Option<i64>,
    #[serde(default)]
    pub key: Option<String>,
    /// A pause in force: its end (ms).
    #[serde(default)]
    pub paused_until: Option<i64>,
    #[serde(default)]
    pub concurrency: Option<i64>,
    #[serde(default)]
    pub in_flight: Option<i64>,
    /// The rate in force (a learned one when lower), `None` without a rate.
    #[serde(default)]
    pub rate: Option<i64>,
    #[serde(default)]
    pub learned: Option<i64>,
    /// Tokens now, and within the claim's look-ahead (`core::flow::limits::LOOK_AHEAD_MS`).
    #[serde(default)]
    pub tokens: Option<f64>,
    #[serde(default)]
    pub tokens_ahead: Option<f64>,
    #[serde(default)]
    pub next_token_at: Option<i64>,
    /// A paused key: the receiver's word that paused it.
    #[serde(default)]
    pub word: Option<String>,
}

/// The key that holds an item first: its class (1 paused, 2 at its concurrency,
/// 3 no token), the instant it ends, and the key's row.
struct Hold<'a> {
    class: u8,
    until: Option<i64>,
    row: &'a KeyWaitRow,
}

/// Which of `keys` holds an item, as the claim's rules do: a paused key first,
/// then one at its concurrency, then a rate with no token now (an item holding
/// two rate keys or more: the claim takes it only at its own instant) or within
/// the look-ahead (one rate key: the claim takes those a second ahead); among
/// holds of one class the latest to end, then the first key.
fn hold<'a>(keys: &BTreeSet<String>, rows: &BTreeMap<&str, &'a KeyWaitRow>) -> Option<Hold<'a>> {
    let governed: Vec<&KeyWaitRow> = keys
        .iter()
        .filter_map(|k| rows.get(k.as_str()).copied())
        .collect();
    let rated = governed.iter().filter(|r| r.rate.is_some()).count();
    governed
        .into_iter()
        .filter_map(|row| {
            let full = matches!((row.in_flight, row.concurrency), (Some(n), Some(c)) if n >= c);
            let tokens = if rated > 1 {
                row.tokens
            } else {
                row.tokens_ahead
            };
            let (class, until) = if row.paused_until.is_some() {
                (1, row.paused_until)
            } else if full {
                (2, None)
            } else if row.rate.is_some() && tokens.is_some_and(|t| t <= 0.0) {
                (3, row.next_token_at)
            } else {
                return None;
            };
            Some(Hold { class, until, row })
        })
        .min_by(|a, b| {
            a.class
                .cmp(&b.class)
                // The latest end first; a hold with no end (a slot) after those.
                .then_with(|| b.until.cmp(&a.until))
                .then_with(|| a.row.key.cmp(&b.row.key))
        })
}

/// What holds `item` at `now`, with the class and name of the key that holds
/// it (even when an earlier reason wins: a backoff on a paused key names the
/// pause's word). `batch`: a row of the item's batch; `claim`: a claim's size.
fn reason_of(
    item: &PendingItem,
    batch: &KeyWaitRow,
    rows: &BTreeMap<&str, &KeyWaitRow>,
    now: i64,
    claim: i64,
) -> (WaitingRow, Option<(u8, Option<String>)>) {
    let held = hold(&item.keys(), rows);
    let mut row = WaitingRow {
        id: item.id,
        reason: String::new(),
        last_error: item.last_error.clone(),
        until: None,
        key: None,
        in_flight: None,
        concurrency: None,
        learned: None,
        batches: None,
        priority: None,
        word: None,
    };
    let reason = if batch.status == "paused" {
        "batch_paused"
    } else if item.run_after > now {
        row.until = Some(item.run_after);
        "backoff"
    } else if let Some(h) = &held {
        row.key = h.row.key.clone();
        match h.class {
            1 => {
                row.until = h.until;
                row.word = h.row.word.clone();
                "paused"
            }
            2 => {
                row.in_flight = h.row.in_flight;
                row.concurrency = h.row.concurrency;
                "concurrency"
            }
            _ => {
                row.until = h.until;
                row.learned = h.row.learned;
                "rate"
            }
        }
    } else if batch.ahead_items >= claim {
        row.batches = Some(batch.ahead_batches);
        row.priority = batch.ahead_priority;
        "turn"
    } else {
        "due"
    };
    row.reason = reason.into();
    (row, held.map(|h| (h.class, h.row.key.clone())))
}

/// The rows by key, and the batch's (any row carries its columns); `None` when
/// the batch was not found.
fn by_key(rows: &[KeyWaitRow]) -> Option<(&KeyWaitRow, BTreeMap<&str, &KeyWaitRow>)> {
    let batch = rows.first()?;
    let keys = rows
        .iter()
        .filter_map(|r| Some((r.key.as_deref()?, r)))
        .collect();
    Some((batch, keys))
}

/// What holds each of `items` at `now`, from `sql/waiting_keys.sql`'s `rows`
/// for their keys; none when their batch was not found.
pub fn item_reasons(
    items: &[PendingItem],
    rows: &[KeyWaitRow],
    now: i64,
    claim: i64,
) -> Vec<WaitingRow> {
    let Some((batch, keys)) = by_key(rows) else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| reason_of(item, batch, &keys, now, claim).0)
        .collect()
}

/// How many of `items` each reason holds at `now`, split by key for a key's
/// reasons and for items in backoff on a paused key (with the greatest of their
/// last errors: the receiver's word, as a pause is not stored with its words).
pub fn reason_counts(
    items: &[PendingItem],
    rows: &[KeyWaitRow],
    now: i64,
    claim: i64,
) -> Vec<ReasonCount> {
    let Some((batch, keys)) = by_key(rows) else {
        return Vec::new();
    };
    let mut counts: BTreeMap<(String, Option<String>), ReasonCount> = BTreeMap::new();
    for item in items {
        let (row, held) = reason_of(item, batch, &keys, now, claim);
        let on_pause = row.reason == "backoff" && matches!(held, Some((1, _)));
        let key = match held {
            Some((_, key)) if on_pause => key,
            _ => row.key.clone(),
        };
        let count = counts
            .entry((row.reason.clone(), key.clone()))
            .or_insert_with(|| ReasonCount {
                reason: row.reason.clone(),
                key,
                ..ReasonCount::default()
            });
        count.n += 1;
        if matches!(row.reason.as_str(), "paused" | "rate") {
            count.until = count.until.max(row.until);
        }
        count.in_flight = count.in_flight.max(row.in_flight);
        count.concurrency = count.concurrency.max(row.concurrency);
        count.learned = count.learned.max(row.learned);
        if on_pause {
            count.last_error = count.last_error.clone().max(row.last_error.clone());
        }
        if row.reason == "paused" {
            count.last_error = count.last_error.clone().or(row.word.clone());
        }
    }
    counts.into_values().collect()
}

#[cfg(test)]
mod tests;
