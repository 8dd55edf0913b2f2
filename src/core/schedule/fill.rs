//! Filling a batch from subjects in bounded pages: what a batch is filled from
//! (`batches.fill`, [`Fill`]) and how much one statement, one call and one tick
//! enqueue. The store runs the pages (`sql/mark_fill_page.sql`,
//! `sql/fill_group_page.sql` or `sql/fill_every_group_page.sql`,
//! `sql/advance_fill.sql`); the batch's cursor `fill_after` says where it stands.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// Most subjects one statement enqueues. One `INSERT … SELECT` over 1,000,000
/// subjects took 2.4 s on local D1 (docs/benchmarks/history-2026-11-21.md), so a page of 10,000 is
/// about 25 ms there: even a hundred times slower on D1 it stays far below the
/// 30 s D1 gives a query, and a tick's page of 100 fires, each with its first
/// page, inserts at most 1,000,000 rows in its one transaction, as long as the
/// single `POST /batches` over a million subjects that was measured.
pub const FILL_PAGE: i64 = 10_000;

/// Pages one call carries when it continues fills (a tick's call while a batch
/// fills, and each call of `POST /batches` over subjects): 50,000 rows, about 0.12 s locally.
pub const FILL_PAGES_PER_CALL: i64 = 5;

/// Calls `POST /batches` over subjects makes to fill its batch before it answers
/// (the first also creates the batch): up to 1,000,000 subjects are enqueued by
/// the answer; a bigger batch answers with `"filling": true` and ticks go on.
pub const CREATE_FILL_CALLS: i64 = 20;

/// What a batch over subjects is filled from: the JSON in `batches.fill`, read by
/// `sql/fill_group_page.sql` and `sql/fill_every_group_page.sql` on every page, so
/// a fill continues the same way on later ticks whatever happens to the schedule
/// meanwhile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fill {
    /// The subjects' group; `None`: every group.
    pub group: Option<String>,
    /// Zone → local fire instant; items of other zones are due at `fire_at`.
    pub zone_times: Value,
    pub fire_at: i64,
    pub fire_seed: i64,
    pub jitter_seconds: i64,
    /// Attempts an item gets unless `attempts` names its kind.
    pub max_attempts: i64,
    /// Kind → attempts, for kinds that declare their own.
    pub attempts: BTreeMap<String, i64>,
}

impl Fill {
    /// Every active subject, due at `now`, no jitter: `POST /batches` over subjects.
    pub fn all_subjects(now: i64, max_attempts: i64, attempts: &BTreeMap<String, i64>) -> Fill {
        Fill {
            group: None,
            zone_times: Value::Object(Default::default()),
            fire_at: now,
            fire_seed: 0,
            jitter_seconds: 0,
            max_attempts,
            attempts: attempts.clone(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fill_json_names_every_field_the_page_statement_reads() {
        let attempts = BTreeMap::from([("service".to_string(), 9)]);
        let fill = Fill::all_subjects(1_000, 5, &attempts);
        let v: Value = serde_json::from_str(&fill.to_json()).unwrap();
        assert_eq!(
            v,
            json!({"group": null, "zone_times": {}, "fire_at": 1000, "fire_seed": 0,
                   "jitter_seconds": 0, "max_attempts": 5, "attempts": {"service": 9}})
        );
    }
}
