//! What holds a pending item (`waiting_on`): the reasons as the API names them,
//! the rows `sql/waiting_on_items.sql` and `sql/waiting_on_counts.sql` return,
//! and the views built from them. Computed when read; nothing is stored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::time::rfc3339;

/// Entries of each part of a batch's head its counts read (its due index, its
/// cursor's ids): the claim reads at most as many candidates per batch while
/// limits are kept (`core::limits::HELD_WINDOW`), so past them an item waits for
/// its batch's own earlier items; the pending items past them are `not_read`.
pub const HEAD_READ: i64 = crate::core::flow::limits::HELD_WINDOW;

/// The reasons, in their order of precedence (the first that holds an item is
/// its reason; `sql/waiting_selection.sql`).
pub const REASONS: [&str; 7] = [
    "batch_paused",
    "backoff",
    "paused",
    "concurrency",
    "rate",
    "turn",
    "due",
];

/// One row of `sql/waiting_on_items.sql`.
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

/// One row of `sql/waiting_on_counts.sql`: a reason's items, split by key for a
/// key's reasons (with the key's state) and for items in backoff on a paused
/// key (with one's last error, the receiver's word).
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
            }
            .view()?;
            let word = match on {
                WaitingOn::Paused { ref key, .. } => word(key),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(reason: &str) -> WaitingRow {
        WaitingRow {
            id: 1,
            reason: reason.into(),
            last_error: None,
            until: None,
            key: None,
            in_flight: None,
            concurrency: None,
            learned: None,
            batches: None,
            priority: None,
        }
    }

    #[test]
    fn each_reason_names_what_holds_the_item_in_its_own_fields() {
        let concurrency = WaitingRow {
            key: Some("host:x".into()),
            in_flight: Some(10),
            concurrency: Some(10),
            ..row("concurrency")
        };
        assert_eq!(
            serde_json::to_value(concurrency.view().unwrap()).unwrap(),
            json!({"reason": "concurrency", "key": "host:x", "in_flight": 10, "concurrency": 10})
        );
        let backoff = WaitingRow {
            until: Some(60_000),
            last_error: Some("503".into()),
            ..row("backoff")
        };
        assert_eq!(
            serde_json::to_value(backoff.view().unwrap()).unwrap(),
            json!({"reason": "backoff", "until": "1970-01-01T00:01:00.000Z", "last_error": "503"})
        );
        assert_eq!(
            serde_json::to_value(row("due").view().unwrap()).unwrap(),
            json!({"reason": "due"})
        );
    }

    #[test]
    fn a_row_missing_what_its_reason_names_or_of_an_unknown_reason_has_no_view() {
        assert_eq!(row("rate").view(), None);
        assert_eq!(row("lease").view(), None);
    }

    fn count(reason: &str, n: i64) -> ReasonCount {
        ReasonCount {
            reason: reason.into(),
            n,
            ..ReasonCount::default()
        }
    }

    #[test]
    fn the_counts_name_every_reason_and_add_up_to_the_pending_items() {
        let rows = [count("rate", 3), count("due", 2)];
        let counts = WaitingCounts::of(&rows, 9);
        let json = serde_json::to_value(&counts).unwrap();
        for reason in REASONS {
            assert!(json.get(reason).is_some(), "{reason}: {json}");
        }
        assert_eq!(
            (json["rate"].clone(), json["not_read"].clone()),
            (json!(3), json!(4))
        );
        let sum: i64 = counts.by_reason.values().sum::<i64>() + counts.not_read;
        assert_eq!(sum, 9);
        assert_eq!(WaitingCounts::batch_paused(5).by_reason["batch_paused"], 5);
    }

    #[test]
    fn the_top_keys_are_those_holding_most_items_each_with_its_state_and_a_pause_with_its_word() {
        let keyed = |reason: &str, key: &str, n: i64| ReasonCount {
            key: Some(key.into()),
            ..count(reason, n)
        };
        let rows = [
            count("due", 4),
            ReasonCount {
                in_flight: Some(2),
                concurrency: Some(2),
                ..keyed("concurrency", "conc:a", 3)
            },
            ReasonCount {
                until: Some(60_000),
                ..keyed("paused", "host:x", 5)
            },
            ReasonCount {
                last_error: Some("HTTP 429, retry after 60 s".into()),
                ..keyed("backoff", "host:x", 1)
            },
            ReasonCount {
                until: Some(1_000),
                learned: Some(0),
                ..keyed("rate", "rate:b", 3)
            },
        ];
        let top = top_keys(&rows);
        assert_eq!(
            serde_json::to_value(&top).unwrap(),
            json!([
                {"items": 5, "reason": "paused", "key": "host:x",
                 "until": "1970-01-01T00:01:00.000Z", "word": "HTTP 429, retry after 60 s"},
                {"items": 3, "reason": "concurrency", "key": "conc:a", "in_flight": 2, "concurrency": 2},
                {"items": 3, "reason": "rate", "key": "rate:b",
                 "next_token_at": "1970-01-01T00:00:01.000Z", "learned": false},
            ])
        );
        // The backoff items on the paused key still count as backoff.
        assert_eq!(WaitingCounts::of(&rows, 16).by_reason["backoff"], 1);
        let many: Vec<ReasonCount> = (0..9)
            .map(|i| ReasonCount {
                until: Some(0),
                ..keyed("paused", &format!("k{i}"), i)
            })
            .collect();
        let top = top_keys(&many);
        assert_eq!(top.len(), TOP_KEYS);
        assert_eq!(top[0].items, 8);
    }
}
