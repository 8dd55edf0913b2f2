//! What `GET /limits`, `GET /limits/{key}` and `/metrics` show of a limit: the
//! limit as set (`PUT /limits/{key}`) and its live state, computed from the rows
//! the store read (`sql/limit_usage.sql`) at `now`: items in flight, the rate's
//! tokens (`core::limits::Gcra::room`), due items waiting on it, and for a
//! partitioned limit its busiest partitions.

use serde::{Deserialize, Deserializer, Serialize};

use crate::core::flow::learn;
use crate::core::flow::limits::{Gcra, Limit, PARTITION_SUFFIX};
use crate::core::time::rfc3339;

/// A partitioned limit shows at most this many of its partitions (the busiest).
pub const BUSIEST: usize = 10;

/// A limit names at most this many of the batches its keys hold (`batches`).
pub const BATCHES_SHOWN: usize = 10;

/// A `limits` row, with the key's own rate state when it has one
/// (`sql/get_limit.sql`, `list_limits.sql`, `upsert_limit.sql` without state).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LimitRow {
    pub key: String,
    pub rate: Option<i64>,
    pub per_seconds: i64,
    pub burst: Option<i64>,
    pub concurrency: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    #[serde(default, deserialize_with = "int_text")]
    pub tat: Option<i64>,
    #[serde(default)]
    pub basis: Option<String>,
    /// The key's pause (a receiver's "slow down"), if one was set.
    #[serde(default)]
    pub paused_until: Option<i64>,
    /// The key's learned state, if its receiver refused (`core::learn`).
    #[serde(flatten)]
    pub learned: LearnedState,
}

/// A key's learned state as stored (`limit_state`, migration 0023): all `None`
/// when its receiver never refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct LearnedState {
    #[serde(default)]
    pub learned: Option<i64>,
    #[serde(default)]
    pub learned_at: Option<i64>,
    #[serde(default)]
    pub refused_at: Option<i64>,
    #[serde(default)]
    pub refusals: Option<i64>,
    /// The rate the last refusal cut (migration 0027).
    #[serde(default)]
    pub learned_before: Option<i64>,
    /// Where the rate came from (`core::learn::Source`'s name).
    #[serde(default)]
    pub learned_from: Option<String>,
}

impl LearnedState {
    /// The learned rate in force at `now_ms` (grown by the windows since it
    /// was learned, as the claim reads it), `None` when none is (never learned,
    /// or idle an hour).
    pub fn at(&self, now_ms: i64) -> Option<learn::Learned> {
        let l = learn::Learned {
            per_minute: self.learned?,
            before: self.learned_before,
            source: learn::Source::parse(self.learned_from.as_deref()),
            changed_at: self.learned_at?,
            refused_at: self.refused_at?,
        };
        learn::at(l, None, now_ms)
    }
}

/// A key with a learned rate in force (`GET /limits` `learned`, and `GET
/// /limits/{key}` for a key without a limit of its own): its receiver refused
/// within the hour (`sql/list_learned_keys.sql`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LearnedKey {
    pub key: String,
    #[serde(flatten)]
    pub state: LearnedState,
    #[serde(default)]
    pub paused_until: Option<i64>,
}

impl LearnedKey {
    /// As `GET /limits` shows it at `now_ms`, `None` once its rate has lapsed.
    /// `learned_rate` starts per `learned_per_seconds` (60: a learned rate is
    /// counted per minute), as `rate` and `per_seconds` are for a set one.
    pub fn shown(&self, now_ms: i64) -> Option<serde_json::Value> {
        let l = self.state.at(now_ms)?;
        Some(serde_json::json!({
            "key": self.key,
            "learned": true,
            "learned_rate": l.per_minute,
            "learned_per_seconds": 60,
            "learned_source": l.source.as_str(),
            "refusals": self.state.refusals.unwrap_or(0),
            "last_refused_at": rfc3339(l.refused_at),
            "paused_until": paused_until(self.paused_until, now_ms),
        }))
    }
}

/// A rate state's `tat`, read as text: in units of ms × rate it passes 2^53 (the
/// integers a JavaScript number holds, which D1 answers with) once the rate
/// passes about 5,000.
fn int_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(text) => text.parse().map(Some).map_err(serde::de::Error::custom),
    }
}

impl LimitRow {
    pub fn limit(&self) -> Limit {
        Limit {
            rate: self.rate,
            per_seconds: self.per_seconds,
            burst: self.burst,
            concurrency: self.concurrency,
        }
    }

    pub fn partitioned(&self) -> bool {
        self.key.ends_with(PARTITION_SUFFIX)
    }
}

/// One row of `sql/limit_usage.sql`: a key items hold, the limit governing it,
/// and its use; the row with no key counts the due items read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KeyUseRow {
    pub key: Option<String>,
    pub limit_key: Option<String>,
    pub in_flight: i64,
    pub waiting: i64,
    #[serde(deserialize_with = "int_text")]
    pub tat: Option<i64>,
    pub basis: Option<String>,
    /// The batches of its items in flight and due read (a JSON array of ids).
    #[serde(default)]
    pub batches: Option<String>,
}

/// What the defined limits are using, per key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub keys: Vec<KeyUse>,
    /// Due items read for `waiting`: equal to the cap, the count stopped there.
    pub due_read: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUse {
    pub key: String,
    /// The limit that governs the key (its own, or a partitioned one).
    pub limit_key: String,
    pub in_flight: i64,
    pub waiting: i64,
    pub tat: Option<i64>,
    pub basis: Option<String>,
    /// The batches of its items in flight and due read, by id.
    pub batches: Vec<String>,
}

impl Usage {
    pub fn from_rows(rows: Vec<KeyUseRow>) -> Usage {
        let mut usage = Usage::default();
        for row in rows {
            match (row.key, row.limit_key) {
                (Some(key), Some(limit_key)) => usage.keys.push(KeyUse {
                    key,
                    limit_key,
                    in_flight: row.in_flight,
                    waiting: row.waiting,
                    tat: row.tat,
                    basis: row.basis,
                    // Unreadable: no batch named, never a wrong one.
                    batches: row
                        .batches
                        .as_deref()
                        .and_then(|b| serde_json::from_str(b).ok())
                        .unwrap_or_default(),
                }),
                _ => usage.due_read = row.waiting,
            }
        }
        usage
    }
}

/// The tokens a rate limit has at `now_ms` from a key's state, read as the
/// claim reads it ([`Gcra::state_of`]): a state counted under another set rate
/// or window is a full burst, one counted under a learned rate is carried over.
/// `None` without a rate.
pub fn tokens(limit: &Limit, tat: Option<i64>, basis: Option<&str>, now_ms: i64) -> Option<i64> {
    let gcra: Gcra = limit.gcra()?;
    Some(gcra.room(gcra.state_of(false, tat, basis, now_ms), now_ms))
}

/// A limit as set: what `PUT /limits/{key}` answers. `rate`, `per_seconds` and
/// `burst` are null for a concurrency-only limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitSpec {
    pub key: String,
    pub rate: Option<i64>,
    pub per_seconds: Option<i64>,
    pub burst: Option<i64>,
    pub concurrency: Option<i64>,
    /// A `prefix:*` limit: each key with the prefix has its own.
    pub partitioned: bool,
    pub created_at: String,
    pub updated_at: String,
}

impl LimitSpec {
    pub fn from_row(row: &LimitRow) -> LimitSpec {
        LimitSpec {
            key: row.key.clone(),
            rate: row.rate,
            per_seconds: row.rate.map(|_| row.per_seconds),
            burst: row.burst,
            concurrency: row.concurrency,
            partitioned: row.partitioned(),
            created_at: rfc3339(row.created_at),
            updated_at: rfc3339(row.updated_at),
        }
    }
}

/// A limit with its live state (`GET /limits`, `GET /limits/{key}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitView {
    #[serde(flatten)]
    pub spec: LimitSpec,
    /// Items in flight holding the key (a partitioned limit: summed over its
    /// partitions).
    pub in_flight: i64,
    /// The rate's starts available now; null without a rate, and for a
    /// partitioned limit (each partition has its own: `partitions`).
    pub tokens: Option<i64>,
    /// Due items holding the key, among the first `DUE_CAP` due items.
    pub waiting: i64,
    /// There were `DUE_CAP` due items or more: `waiting` counts among those only,
    /// and more may wait.
    pub waiting_capped: bool,
    /// A partitioned limit's busiest partitions (most in flight, then most
    /// waiting), at most [`BUSIEST`]; absent for a limit of one key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<PartitionView>>,
    /// Until when the key's receiver asked it to pause (RFC 3339); null when
    /// not paused now.
    pub paused_until: Option<String>,
    /// Whether the key has a learned rate in force (its receiver refused within
    /// the hour): the claim takes the lower of it and `rate`.
    pub learned: bool,
    /// The learned rate: starts per `learned_per_seconds` (60); null when none.
    pub learned_rate: Option<i64>,
    pub learned_per_seconds: Option<i64>,
    /// Where the learned rate came from: `retry_after`, `headers` or
    /// `refusals` (`core::learn::Source`); null when none.
    pub learned_source: Option<&'static str>,
    /// Refusals counted since the learned rate was learned (null when none).
    pub refusals: Option<i64>,
    /// The batches whose items in flight or among the due items read hold its
    /// keys, by id, at most [`BATCHES_SHOWN`] (the first by id).
    pub batches: Vec<String>,
}

/// A key paused now (`GET /limits` `paused`), with or without a limit: its
/// receiver answered a retry with a delay (429, 503 with Retry-After).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PausedKey {
    pub key: String,
    pub paused_until: i64,
}

impl PausedKey {
    /// As `GET /limits` shows it.
    pub fn shown(&self) -> serde_json::Value {
        serde_json::json!({"key": self.key, "paused_until": rfc3339(self.paused_until)})
    }
}

/// A pause as shown: `None` once it has ended.
pub fn paused_until(until: Option<i64>, now_ms: i64) -> Option<String> {
    until.filter(|u| *u > now_ms).map(rfc3339)
}

/// One partition of a partitioned limit: a key it governs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionView {
    pub key: String,
    pub in_flight: i64,
    pub tokens: Option<i64>,
    pub waiting: i64,
}

/// The distinct batches `keys` hold, the first [`BATCHES_SHOWN`] by id.
fn batches_of(keys: &[&KeyUse]) -> Vec<String> {
    let all: std::collections::BTreeSet<&String> = keys.iter().flat_map(|k| &k.batches).collect();
    all.into_iter().take(BATCHES_SHOWN).cloned().collect()
}

/// `row`'s limit with its live state at `now_ms`, from `usage` read with a due
/// cap of `due_cap`.
pub fn view(row: &LimitRow, usage: &Usage, now_ms: i64, due_cap: i64) -> LimitView {
    let limit = row.limit();
    let learned = row.learned.at(now_ms);
    let governed: Vec<&KeyUse> = usage
        .keys
        .iter()
        .filter(|k| k.limit_key == row.key)
        .collect();
    let in_flight = governed.iter().map(|k| k.in_flight).sum();
    let waiting = governed.iter().map(|k| k.waiting).sum();
    let (tokens, partitions) = if row.partitioned() {
        let mut parts: Vec<PartitionView> = governed
            .iter()
            .map(|k| PartitionView {
                key: k.key.clone(),
                in_flight: k.in_flight,
                tokens: tokens(&limit, k.tat, k.basis.as_deref(), now_ms),
                waiting: k.waiting,
            })
            .collect();
        parts.sort_by(|a, b| {
            (b.in_flight, b.waiting)
                .cmp(&(a.in_flight, a.waiting))
                .then_with(|| a.key.cmp(&b.key))
        });
        parts.truncate(BUSIEST);
        (None, Some(parts))
    } else {
        (tokens(&limit, row.tat, row.basis.as_deref(), now_ms), None)
    };
    LimitView {
        spec: LimitSpec::from_row(row),
        in_flight,
        tokens,
        waiting,
        waiting_capped: usage.due_read >= due_cap,
        partitions,
        paused_until: paused_until(row.paused_until, now_ms),
        learned: learned.is_some(),
        learned_rate: learned.map(|l| l.per_minute),
        learned_per_seconds: learned.map(|_| 60),
        learned_source: learned.map(|l| l.source.as_str()),
        refusals: learned.and(row.learned.refusals),
        batches: batches_of(&governed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_795_000_000_000;

    fn row(key: &str, rate: Option<i64>, burst: Option<i64>, concurrency: Option<i64>) -> LimitRow {
        LimitRow {
            key: key.into(),
            rate,
            per_seconds: 1,
            burst,
            concurrency,
            created_at: NOW - 1_000,
            updated_at: NOW,
            tat: None,
            basis: None,
            paused_until: None,
            learned: LearnedState::default(),
        }
    }

    fn used(key: &str, limit_key: &str, in_flight: i64, waiting: i64) -> KeyUse {
        KeyUse {
            key: key.into(),
            limit_key: limit_key.into(),
            in_flight,
            waiting,
            tat: None,
            basis: None,
            batches: Vec::new(),
        }
    }

    #[test]
    fn a_rate_without_state_or_counted_under_another_basis_has_its_whole_burst() {
        let limit = Limit {
            rate: Some(20),
            per_seconds: 1,
            burst: Some(5),
            concurrency: None,
        };
        let gcra = limit.gcra().unwrap();
        let spent = gcra.charge(None, NOW, 5);
        assert_eq!(tokens(&limit, None, None, NOW), Some(5));
        assert_eq!(tokens(&limit, Some(spent), Some("20/1"), NOW), Some(0));
        assert_eq!(
            tokens(&limit, Some(spent), Some("20/1"), NOW + 100),
            Some(2),
            "one every 50 ms"
        );
        assert_eq!(
            tokens(&limit, Some(spent), Some("10/1"), NOW),
            Some(5),
            "another rate's state"
        );
        let concurrency_only = Limit {
            rate: None,
            per_seconds: 1,
            burst: None,
            concurrency: Some(3),
        };
        assert_eq!(
            tokens(&concurrency_only, Some(spent), Some("20/1"), NOW),
            None
        );
    }

    #[test]
    fn a_limit_of_one_key_counts_its_own_use_and_its_own_tokens() {
        let mut github = row("github", Some(20), Some(5), Some(10));
        let gcra = github.limit().gcra().unwrap();
        github.tat = Some(gcra.charge(None, NOW, 3));
        github.basis = Some(gcra.basis());
        let usage = Usage {
            keys: vec![
                used("github", "github", 4, 7),
                used("gitlab", "gitlab", 9, 9),
            ],
            due_read: 40,
        };
        let v = view(&github, &usage, NOW, 1_000);
        assert_eq!(
            (
                v.in_flight,
                v.tokens,
                v.waiting,
                v.waiting_capped,
                v.partitions.is_none()
            ),
            (4, Some(2), 7, false, true)
        );
        let idle = view(&row("telegram", None, None, Some(3)), &usage, NOW, 1_000);
        assert_eq!((idle.in_flight, idle.tokens, idle.waiting), (0, None, 0));
    }

    #[test]
    fn waiting_is_capped_when_the_due_items_read_reached_the_cap() {
        let usage = Usage {
            keys: vec![],
            due_read: 1_000,
        };
        assert!(view(&row("a", Some(1), Some(1), None), &usage, NOW, 1_000).waiting_capped);
    }

    #[test]
    fn a_partitioned_limit_sums_its_partitions_and_shows_the_ten_busiest() {
        let mut tenants = row("tenant:*", Some(10), Some(10), Some(2));
        tenants.tat = Some(123);
        tenants.basis = Some("10/1".into());
        let gcra = tenants.limit().gcra().unwrap();
        let mut keys: Vec<KeyUse> = (0..12)
            .map(|i| used(&format!("tenant:t{i:02}"), "tenant:*", i % 3, i))
            .collect();
        keys[11].tat = Some(gcra.charge(None, NOW, 4));
        keys[11].basis = Some(gcra.basis());
        keys.push(used("tenant:big", "tenant:big", 50, 50));
        let usage = Usage { keys, due_read: 0 };
        let v = view(&tenants, &usage, NOW, 1_000);
        assert_eq!(
            v.in_flight,
            (0..12).map(|i| i % 3).sum::<i64>(),
            "not tenant:big's own"
        );
        assert_eq!(v.waiting, (0..12).sum::<i64>());
        assert_eq!(v.tokens, None, "each partition has its own");
        let parts = v.partitions.unwrap();
        let order: Vec<&str> = parts.iter().map(|p| p.key.as_str()).collect();
        // Most in flight first (2: t11, t08, t05, t02), then most waiting.
        assert_eq!(
            order,
            [
                "tenant:t11",
                "tenant:t08",
                "tenant:t05",
                "tenant:t02",
                "tenant:t10",
                "tenant:t07",
                "tenant:t04",
                "tenant:t01",
                "tenant:t09",
                "tenant:t06"
            ]
        );
        assert_eq!((parts[0].tokens, parts[1].tokens), (Some(6), Some(10)));
    }

    #[test]
    fn the_answer_has_the_limit_and_its_state() {
        let usage = Usage {
            keys: vec![used("github", "github", 1, 2)],
            due_read: 3,
        };
        let v = view(&row("github", None, None, Some(4)), &usage, NOW, 1_000);
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            json!({"key": "github", "rate": null, "per_seconds": null, "burst": null,
                   "concurrency": 4, "partitioned": false,
                   "created_at": rfc3339(NOW - 1_000), "updated_at": rfc3339(NOW),
                   "in_flight": 1, "tokens": null, "waiting": 2, "waiting_capped": false,
                   "paused_until": null, "learned": false, "learned_rate": null,
                   "learned_per_seconds": null, "learned_source": null, "refusals": null,
                   "batches": []})
        );
    }

    /// Past 2^53 a JavaScript number (what D1 answers with) is no longer exact:
    /// the statements send `tat` as text, and it is read back to the unit.
    #[test]
    fn a_rate_state_past_2_to_the_53_is_read_exactly_from_text() {
        let tat = NOW * 1_000_000 + 123;
        let row: LimitRow = serde_json::from_value(json!({
            "key": "big", "rate": 1_000_000, "per_seconds": 1, "burst": 10, "concurrency": null,
            "created_at": NOW, "updated_at": NOW, "tat": tat.to_string(), "basis": "1000000/1"
        }))
        .unwrap();
        assert_eq!(row.tat, Some(tat));
        let used: KeyUseRow = serde_json::from_value(json!({
            "key": "k", "limit_key": "k", "in_flight": 0, "waiting": 0, "tat": null, "basis": null
        }))
        .unwrap();
        assert_eq!(used.tat, None);
        let bad = serde_json::from_value::<KeyUseRow>(json!({
            "key": "k", "limit_key": "k", "in_flight": 0, "waiting": 0, "tat": "1e18", "basis": null
        }));
        assert!(bad.is_err());
    }

    #[test]
    fn the_row_without_a_key_is_the_count_of_due_items_read() {
        let rows = vec![
            KeyUseRow {
                key: Some("a".into()),
                limit_key: Some("a".into()),
                in_flight: 1,
                waiting: 0,
                tat: None,
                basis: None,
                batches: None,
            },
            KeyUseRow {
                key: None,
                limit_key: None,
                in_flight: 0,
                waiting: 17,
                tat: None,
                basis: None,
                batches: None,
            },
        ];
        let usage = Usage::from_rows(rows);
        assert_eq!((usage.keys.len(), usage.due_read), (1, 17));
    }

    #[test]
    fn a_limit_names_the_distinct_batches_its_keys_hold_first_by_id_at_most_ten() {
        let rows: Vec<KeyUseRow> = (0..3)
            .map(|p| KeyUseRow {
                key: Some(format!("t:{p}")),
                limit_key: Some("t:*".into()),
                in_flight: 0,
                waiting: 1,
                tat: None,
                basis: None,
                batches: Some(
                    json!((0..7)
                        .map(|b| format!("b{}", b + 3 * p))
                        .collect::<Vec<_>>())
                    .to_string(),
                ),
            })
            .collect();
        let v = view(
            &row("t:*", None, None, Some(2)),
            &Usage::from_rows(rows),
            NOW,
            1_000,
        );
        let want: Vec<String> = [
            "b0", "b1", "b10", "b11", "b12", "b2", "b3", "b4", "b5", "b6",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(v.batches, want);
        // An unreadable list names no batch.
        let bad = KeyUseRow {
            key: Some("k".into()),
            limit_key: Some("k".into()),
            in_flight: 0,
            waiting: 0,
            tat: None,
            basis: None,
            batches: Some("not json".into()),
        };
        assert!(Usage::from_rows(vec![bad]).keys[0].batches.is_empty());
    }
}
