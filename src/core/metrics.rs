//! `GET /metrics` in the Prometheus text exposition format (version 0.0.4): what a
//! scrape reads (`Snapshot`, one call: `sql/metrics_snapshot.sql` and the limits'
//! `list_limits.sql`, `limit_usage.sql`) and how it is written. [`families`] is the one list of metrics: the renderer, the host
//! test that docs/reference/metrics.md names each of them and the e2e check all read it.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::core::batch::model::{ItemStatus, StopReason};
use crate::core::flow::limit_view::LimitView;

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The due count stops here: beyond it a scrape would read the whole backlog.
pub const DUE_CAP: i64 = 1_000;
/// The dead-letter count stops here, for the same reason; its HELP text and
/// docs/reference/metrics.md say the number (a test checks the HELP).
pub const DEAD_LETTER_CAP: i64 = 1_000;
/// The window of the `last_hour` metrics.
pub const WINDOW_MS: i64 = 3_600_000;
/// The limits a scrape reports, the first in key order: each is three series.
pub const LIMITS_CAP: i64 = 100;
/// Batch sources (schedules, and `adhoc`) one scrape reports the cost of.
pub const SOURCES_CAP: i64 = 100;
/// The cost per source is of the batches created this long ago or later: a
/// day holds each daily schedule's latest batch, and reads one row per batch.
pub const SOURCE_WINDOW_MS: i64 = 86_400_000;
/// The families with one sample per defined limit (label `key`): none while no
/// limit is defined.
pub const LIMIT_FAMILIES: [&str; 3] = [
    "cron_fanout_limit_in_flight",
    "cron_fanout_limit_tokens",
    "cron_fanout_limit_waiting",
];

/// What one scrape reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub running_batches: i64,
    /// Sums of the running batches' counters.
    pub total: i64,
    pub completed: i64,
    pub failed: i64,
    /// Items in flight of running batches (a paused or cancelled batch's in-flight
    /// items still finish, but are not counted: its batch is not running).
    pub processing: i64,
    /// Pending items due now, counted up to `DUE_CAP`.
    pub due: i64,
    /// `run_after` of the oldest due item (ms), if any.
    pub oldest_due: Option<i64>,
    /// Failed items of every retained batch, running or finished, counted up to
    /// `DEAD_LETTER_CAP`.
    pub dead_letters: i64,
    /// Sums over the invocations that started in the last hour.
    pub hour: HourSums,
    /// Those invocations by stop reason (as stored).
    pub stop_reasons: BTreeMap<String, i64>,
    /// `SUBREQUEST_BUDGET` now.
    pub subrequest_budget: i64,
    /// The first `LIMITS_CAP` limits in key order, each with its live state.
    pub limits: Vec<LimitGauge>,
    /// D1 rows of the batches created in the last `SOURCE_WINDOW_MS`, per
    /// source, the first `SOURCES_CAP` in name order.
    pub by_source: Vec<SourceCost>,
}

/// What the batches of one source cost D1 (their shares of their invocations,
/// `core::cost`): `source` is a schedule's id, or `adhoc` for `POST /batches`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct SourceCost {
    pub source: String,
    pub d1_rows_read: i64,
    pub d1_rows_written: i64,
}

/// One defined limit's gauges (`core::limit_view`), not one per partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitGauge {
    pub key: String,
    pub in_flight: i64,
    /// `None` without a rate, and for a partitioned limit.
    pub tokens: Option<i64>,
    pub waiting: i64,
}

impl LimitGauge {
    pub fn from_view(v: &LimitView) -> LimitGauge {
        LimitGauge {
            key: v.spec.key.clone(),
            in_flight: v.in_flight,
            tokens: v.tokens,
            waiting: v.waiting,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HourSums {
    pub invocations: i64,
    pub claimed: i64,
    pub completed: i64,
    pub retried: i64,
    pub failed: i64,
    pub lost_leases: i64,
    /// Claimed items given back unrun (too late to run within the deadline).
    pub released: i64,
    pub reaped: i64,
    pub subrequests_max: i64,
    pub d1_statements: i64,
    pub d1_rows_written: i64,
    pub d1_rows_read: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
        }
    }
}

/// One sample: label pairs and a value.
pub type Sample = (Vec<(&'static str, String)>, f64);

/// One metric family: name, HELP text, TYPE and samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

fn gauge(name: &'static str, help: &'static str, samples: Vec<Sample>) -> Family {
    Family {
        name,
        help,
        kind: Kind::Gauge,
        samples,
    }
}

fn one(value: i64) -> Vec<Sample> {
    vec![(Vec::new(), value as f64)]
}

const DEAD_LETTERS_HELP: &str = "Failed items of every retained batch, running or finished: the dead letters awaiting a look and a retry. Counted up to 1000: 1000 means at least that many.";

/// Every metric, in the order it is written, at `now` (ms).
pub fn families(s: &Snapshot, now: i64) -> Vec<Family> {
    let pending = (s.total - s.completed - s.failed - s.processing).max(0);
    let by_status = ItemStatus::ALL
        .into_iter()
        .filter_map(|status| {
            let n = match status {
                ItemStatus::Pending => pending,
                ItemStatus::Processing => s.processing,
                ItemStatus::Completed => s.completed,
                ItemStatus::Failed => s.failed,
                // Only a cancelled batch has cancelled items, and it is not running.
                ItemStatus::Cancelled => return None,
            };
            Some((vec![("status", status.as_str().to_string())], n as f64))
        })
        .collect();
    let h = &s.hour;
    let events = [
        ("claimed", h.claimed),
        ("completed", h.completed),
        ("retried", h.retried),
        ("failed", h.failed),
        ("lost_lease", h.lost_leases),
        ("released", h.released),
        ("reaped", h.reaped),
    ]
    .into_iter()
    .map(|(event, n)| (vec![("event", event.to_string())], n as f64))
    .collect();
    // Every reason the Worker knows, zero included, and whatever else was stored.
    let mut reasons: BTreeMap<String, i64> = StopReason::ALL
        .into_iter()
        .map(|r| (r.as_str().to_string(), 0))
        .collect();
    reasons.extend(s.stop_reasons.iter().map(|(k, v)| (k.clone(), *v)));
    let reasons = reasons
        .into_iter()
        .map(|(reason, n)| (vec![("stop_reason", reason)], n as f64))
        .collect();
    let lag_ms = s.oldest_due.map_or(0, |at| (now - at).max(0));
    let per_limit = |value: &dyn Fn(&LimitGauge) -> Option<i64>| -> Vec<Sample> {
        s.limits
            .iter()
            .filter_map(|l| Some((vec![("key", l.key.clone())], value(l)? as f64)))
            .collect()
    };
    let per_source = |value: &dyn Fn(&SourceCost) -> i64| -> Vec<Sample> {
        s.by_source
            .iter()
            .map(|c| (vec![("source", c.source.clone())], value(c) as f64))
            .collect()
    };
    let per_claim = |n: i64| {
        if h.claimed == 0 {
            f64::NAN
        } else {
            n as f64 / h.claimed as f64
        }
    };
    vec![
        gauge(
            "cron_fanout_batches_running",
            "Batches with status running.",
            one(s.running_batches),
        ),
        gauge(
            "cron_fanout_batch_items",
            "Items of running batches by status (exact counters; processing counted live).",
            by_status,
        ),
        gauge(
            "cron_fanout_dead_letters",
            DEAD_LETTERS_HELP,
            one(s.dead_letters),
        ),
        gauge(
            "cron_fanout_items_due",
            "Pending items whose run_after has passed, counted up to cron_fanout_items_due_cap.",
            one(s.due),
        ),
        gauge(
            "cron_fanout_items_due_cap",
            "Where the due count stops: items_due equal to it means at least that many.",
            one(DUE_CAP),
        ),
        gauge(
            "cron_fanout_queue_lag_seconds",
            "Age of the oldest due item (now - run_after), 0 when nothing is due.",
            vec![(Vec::new(), lag_ms as f64 / 1000.0)],
        ),
        gauge(
            "cron_fanout_last_hour_invocations",
            "Scheduled invocations that started in the last hour, by stop reason.",
            reasons,
        ),
        gauge(
            "cron_fanout_last_hour_items",
            "What the invocations of the last hour did to items: claims, outcomes committed, lost leases, items released unrun, expired leases reaped.",
            events,
        ),
        gauge(
            "cron_fanout_last_hour_subrequests_max",
            "Most subrequests one invocation of the last hour made.",
            one(h.subrequests_max),
        ),
        gauge(
            "cron_fanout_subrequest_budget",
            "SUBREQUEST_BUDGET: subrequests one invocation may make.",
            one(s.subrequest_budget),
        ),
        gauge(
            "cron_fanout_last_hour_d1_statements_per_item",
            "D1 statements per item claimed by the invocations of the last hour (NaN when none was claimed).",
            vec![(Vec::new(), per_claim(h.d1_statements))],
        ),
        gauge(
            "cron_fanout_last_hour_d1_rows_written_per_item",
            "D1 rows written per item claimed by the invocations of the last hour (NaN when none was claimed).",
            vec![(Vec::new(), per_claim(h.d1_rows_written))],
        ),
        gauge(
            "cron_fanout_last_hour_d1_rows_read_per_item",
            "D1 rows read per item claimed by the invocations of the last hour (NaN when none was claimed).",
            vec![(Vec::new(), per_claim(h.d1_rows_read))],
        ),
        gauge(
            "cron_fanout_last_day_batch_d1_rows_written",
            "D1 rows written for the batches created in the last 24 hours, per source: a schedule's id, or adhoc for POST /batches. Each batch's share of the invocations that worked on it (GET /batches/{id} cost).",
            per_source(&|c| c.d1_rows_written),
        ),
        gauge(
            "cron_fanout_last_day_batch_d1_rows_read",
            "D1 rows read for the batches created in the last 24 hours, per source: a schedule's id, or adhoc for POST /batches. Each batch's share of the invocations that worked on it (GET /batches/{id} cost).",
            per_source(&|c| c.d1_rows_read),
        ),
        gauge(
            "cron_fanout_limit_in_flight",
            "Items in flight holding a limit's key, per defined limit (a partitioned one: summed over its partitions).",
            per_limit(&|l| Some(l.in_flight)),
        ),
        gauge(
            "cron_fanout_limit_tokens",
            "Starts a rate limit allows now (burst when idle), per defined limit with a rate; none for a partitioned one (each partition has its own).",
            per_limit(&|l| l.tokens),
        ),
        gauge(
            "cron_fanout_limit_waiting",
            "Due items holding a limit's key, per defined limit, among the first cron_fanout_items_due_cap due items.",
            per_limit(&|l| Some(l.waiting)),
        ),
    ]
}

/// The metric names (`cron_fanout_…`) a text mentions, sorted, once each: how
/// the host tests and the e2e suite read the names docs/reference/metrics.md documents.
pub fn names_in(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("cron_fanout_"))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The exposition text: `# HELP`, `# TYPE`, then one line per sample.
pub fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families {
        // Writing to a String cannot fail.
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(f.help));
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
        for (labels, value) in &f.samples {
            out.push_str(f.name);
            if !labels.is_empty() {
                let pairs: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                    .collect();
                let _ = write!(out, "{{{}}}", pairs.join(","));
            }
            let _ = writeln!(out, " {}", number(*value));
        }
    }
    out
}

/// HELP text: backslash and line feed escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A label value: backslash, double quote and line feed escaped.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Integers without a fraction; the format's spellings of NaN and infinities.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_000_000_000;

    fn snapshot() -> Snapshot {
        Snapshot {
            running_batches: 2,
            total: 1_000,
            completed: 600,
            failed: 5,
            processing: 25,
            due: 370,
            oldest_due: Some(NOW - 42_500),
            dead_letters: 17,
            hour: HourSums {
                invocations: 60,
                claimed: 640,
                completed: 600,
                retried: 30,
                failed: 5,
                lost_leases: 1,
                released: 3,
                reaped: 4,
                subrequests_max: 44,
                d1_statements: 128,
                d1_rows_written: 4_480,
                d1_rows_read: 6_400,
            },
            stop_reasons: [("drained".to_string(), 58), ("budget".to_string(), 2)].into(),
            subrequest_budget: 45,
            limits: vec![
                LimitGauge {
                    key: "github".into(),
                    in_flight: 10,
                    tokens: Some(3),
                    waiting: 240,
                },
                LimitGauge {
                    key: "tenant:*".into(),
                    in_flight: 4,
                    tokens: None,
                    waiting: 12,
                },
            ],
            by_source: vec![
                SourceCost {
                    source: "adhoc".into(),
                    d1_rows_read: 1_200,
                    d1_rows_written: 310,
                },
                SourceCost {
                    source: "daily".into(),
                    d1_rows_read: 243_046,
                    d1_rows_written: 36_047,
                },
            ],
        }
    }

    #[test]
    fn a_scrape_is_exactly_this_text() {
        let text = render(&families(&snapshot(), NOW));
        let want = "\
# HELP cron_fanout_batches_running Batches with status running.
# TYPE cron_fanout_batches_running gauge
cron_fanout_batches_running 2
# HELP cron_fanout_batch_items Items of running batches by status (exact counters; processing counted live).
# TYPE cron_fanout_batch_items gauge
cron_fanout_batch_items{status=\"pending\"} 370
cron_fanout_batch_items{status=\"processing\"} 25
cron_fanout_batch_items{status=\"completed\"} 600
cron_fanout_batch_items{status=\"failed\"} 5
# HELP cron_fanout_dead_letters Failed items of every retained batch, running or finished: the dead letters awaiting a look and a retry. Counted up to 1000: 1000 means at least that many.
# TYPE cron_fanout_dead_letters gauge
cron_fanout_dead_letters 17
# HELP cron_fanout_items_due Pending items whose run_after has passed, counted up to cron_fanout_items_due_cap.
# TYPE cron_fanout_items_due gauge
cron_fanout_items_due 370
# HELP cron_fanout_items_due_cap Where the due count stops: items_due equal to it means at least that many.
# TYPE cron_fanout_items_due_cap gauge
cron_fanout_items_due_cap 1000
# HELP cron_fanout_queue_lag_seconds Age of the oldest due item (now - run_after), 0 when nothing is due.
# TYPE cron_fanout_queue_lag_seconds gauge
cron_fanout_queue_lag_seconds 42.5
# HELP cron_fanout_last_hour_invocations Scheduled invocations that started in the last hour, by stop reason.
# TYPE cron_fanout_last_hour_invocations gauge
cron_fanout_last_hour_invocations{stop_reason=\"budget\"} 2
cron_fanout_last_hour_invocations{stop_reason=\"child_cap\"} 0
cron_fanout_last_hour_invocations{stop_reason=\"deadline\"} 0
cron_fanout_last_hour_invocations{stop_reason=\"drained\"} 58
cron_fanout_last_hour_invocations{stop_reason=\"drainers\"} 0
cron_fanout_last_hour_invocations{stop_reason=\"error\"} 0
cron_fanout_last_hour_invocations{stop_reason=\"refused\"} 0
# HELP cron_fanout_last_hour_items What the invocations of the last hour did to items: claims, outcomes committed, lost leases, items released unrun, expired leases reaped.
# TYPE cron_fanout_last_hour_items gauge
cron_fanout_last_hour_items{event=\"claimed\"} 640
cron_fanout_last_hour_items{event=\"completed\"} 600
cron_fanout_last_hour_items{event=\"retried\"} 30
cron_fanout_last_hour_items{event=\"failed\"} 5
cron_fanout_last_hour_items{event=\"lost_lease\"} 1
cron_fanout_last_hour_items{event=\"released\"} 3
cron_fanout_last_hour_items{event=\"reaped\"} 4
# HELP cron_fanout_last_hour_subrequests_max Most subrequests one invocation of the last hour made.
# TYPE cron_fanout_last_hour_subrequests_max gauge
cron_fanout_last_hour_subrequests_max 44
# HELP cron_fanout_subrequest_budget SUBREQUEST_BUDGET: subrequests one invocation may make.
# TYPE cron_fanout_subrequest_budget gauge
cron_fanout_subrequest_budget 45
# HELP cron_fanout_last_hour_d1_statements_per_item D1 statements per item claimed by the invocations of the last hour (NaN when none was claimed).
# TYPE cron_fanout_last_hour_d1_statements_per_item gauge
cron_fanout_last_hour_d1_statements_per_item 0.2
# HELP cron_fanout_last_hour_d1_rows_written_per_item D1 rows written per item claimed by the invocations of the last hour (NaN when none was claimed).
# TYPE cron_fanout_last_hour_d1_rows_written_per_item gauge
cron_fanout_last_hour_d1_rows_written_per_item 7
# HELP cron_fanout_last_hour_d1_rows_read_per_item D1 rows read per item claimed by the invocations of the last hour (NaN when none was claimed).
# TYPE cron_fanout_last_hour_d1_rows_read_per_item gauge
cron_fanout_last_hour_d1_rows_read_per_item 10
# HELP cron_fanout_last_day_batch_d1_rows_written D1 rows written for the batches created in the last 24 hours, per source: a schedule's id, or adhoc for POST /batches. Each batch's share of the invocations that worked on it (GET /batches/{id} cost).
# TYPE cron_fanout_last_day_batch_d1_rows_written gauge
cron_fanout_last_day_batch_d1_rows_written{source=\"adhoc\"} 310
cron_fanout_last_day_batch_d1_rows_written{source=\"daily\"} 36047
# HELP cron_fanout_last_day_batch_d1_rows_read D1 rows read for the batches created in the last 24 hours, per source: a schedule's id, or adhoc for POST /batches. Each batch's share of the invocations that worked on it (GET /batches/{id} cost).
# TYPE cron_fanout_last_day_batch_d1_rows_read gauge
cron_fanout_last_day_batch_d1_rows_read{source=\"adhoc\"} 1200
cron_fanout_last_day_batch_d1_rows_read{source=\"daily\"} 243046
# HELP cron_fanout_limit_in_flight Items in flight holding a limit's key, per defined limit (a partitioned one: summed over its partitions).
# TYPE cron_fanout_limit_in_flight gauge
cron_fanout_limit_in_flight{key=\"github\"} 10
cron_fanout_limit_in_flight{key=\"tenant:*\"} 4
# HELP cron_fanout_limit_tokens Starts a rate limit allows now (burst when idle), per defined limit with a rate; none for a partitioned one (each partition has its own).
# TYPE cron_fanout_limit_tokens gauge
cron_fanout_limit_tokens{key=\"github\"} 3
# HELP cron_fanout_limit_waiting Due items holding a limit's key, per defined limit, among the first cron_fanout_items_due_cap due items.
# TYPE cron_fanout_limit_waiting gauge
cron_fanout_limit_waiting{key=\"github\"} 240
cron_fanout_limit_waiting{key=\"tenant:*\"} 12
";
        assert_eq!(text, want);
    }

    #[test]
    fn the_dead_letter_help_names_its_cap() {
        assert!(DEAD_LETTERS_HELP.contains(&format!(" {DEAD_LETTER_CAP}:")));
    }

    /// docs/reference/metrics.md's example scrape is this module's test snapshot
    /// rendered, to the byte: the block after "Example scrape (", between its fences.
    #[test]
    fn the_docs_example_scrape_is_the_rendered_test_snapshot() {
        let docs = include_str!("../../docs/reference/metrics.md");
        let (_, after) = docs
            .split_once("Example scrape (")
            .expect("docs/reference/metrics.md has an example scrape");
        let (_, block) = after.split_once("```\n").expect("a fenced block");
        let (block, _) = block.split_once("```").expect("the fence closes");
        assert_eq!(block, render(&families(&snapshot(), NOW)));
    }

    #[test]
    fn an_idle_worker_reports_zeros_no_lag_and_nan_per_item() {
        let text = render(&families(
            &Snapshot {
                subrequest_budget: 45,
                ..Snapshot::default()
            },
            NOW,
        ));
        assert!(
            text.contains("\ncron_fanout_queue_lag_seconds 0\n"),
            "{text}"
        );
        assert!(text.contains("\ncron_fanout_batch_items{status=\"pending\"} 0\n"));
        assert!(text.contains("\ncron_fanout_last_hour_d1_statements_per_item NaN\n"));
        assert!(text.contains("{stop_reason=\"deadline\"} 0\n"));
    }

    #[test]
    fn every_family_has_help_type_and_a_sample_and_a_unique_name() {
        let fams = families(&snapshot(), NOW);
        let mut names: Vec<&str> = fams.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), fams.len());
        for f in &fams {
            assert!(f.name.starts_with("cron_fanout_"), "{}", f.name);
            assert!(!f.help.is_empty() && !f.samples.is_empty(), "{}", f.name);
            assert!(
                f.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()),
                "{}",
                f.name
            );
        }
    }

    #[test]
    fn without_limits_the_limit_families_are_written_without_samples() {
        let text = render(&families(&Snapshot::default(), NOW));
        for name in LIMIT_FAMILIES {
            assert!(text.contains(&format!("# TYPE {name} gauge\n")), "{name}");
            assert!(!text.contains(&format!("\n{name}{{")), "{name}: {text}");
        }
    }

    #[test]
    fn the_limit_families_are_those_labelled_by_key() {
        let by_key: Vec<&str> = families(&snapshot(), NOW)
            .iter()
            .filter(|f| {
                f.samples
                    .iter()
                    .any(|(labels, _)| labels.iter().any(|(k, _)| *k == "key"))
            })
            .map(|f| f.name)
            .collect();
        assert_eq!(by_key, LIMIT_FAMILIES);
    }

    #[test]
    fn help_and_label_values_are_escaped() {
        let family = Family {
            name: "x",
            help: "back\\slash\nnew \"line\"",
            kind: Kind::Gauge,
            samples: vec![(vec![("v", "a\"b\\c\nd".to_string())], 1.0)],
        };
        assert_eq!(
            render(&[family]),
            "# HELP x back\\\\slash\\nnew \"line\"\n# TYPE x gauge\nx{v=\"a\\\"b\\\\c\\nd\"} 1\n"
        );
    }

    #[test]
    fn a_stored_stop_reason_the_worker_does_not_know_is_still_shown() {
        let mut s = snapshot();
        s.stop_reasons.insert("paused".into(), 3);
        let text = render(&families(&s, NOW));
        assert!(text.contains("{stop_reason=\"paused\"} 3\n"));
    }

    #[test]
    fn names_are_found_once_each_labels_and_punctuation_aside() {
        let docs = "| `cron_fanout_a{status}` | x |\n`cron_fanout_b` and cron_fanout_a, again";
        assert_eq!(names_in(docs), ["cron_fanout_a", "cron_fanout_b"]);
    }

    #[test]
    fn numbers_use_the_formats_spellings() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(-2.0), "-2");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
    }
}
