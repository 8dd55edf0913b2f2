//! What `loadtest bench` reports: each part's measurements (fan-out rounds
//! against the raw SELF ceiling, latency-bound runs against their ideal
//! makespan, batch initialisation, rows read) and the whole report, as a table
//! or JSON.

use crate::bench::control::ControlBench;
use crate::run::report::RunReport;
use crate::run::table::{num, Table};
use crate::runtime::api::Probe;
use serde::Serialize;

/// One fan-out run between two probes, on its own fresh, warmed-up runtime.
#[derive(Debug, Serialize)]
pub struct FanoutRound {
    pub report: RunReport,
    /// Raw SELF round trips at the fan-out's concurrency just before and just after.
    pub probe_before: Probe,
    pub probe_after: Probe,
    /// Fan-out items/s over the mean of the two probes.
    pub fanout_over_probe: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Ratios {
    /// Median over the rounds of fan-out items/s over raw SELF calls/s at the same
    /// concurrency.
    pub fanout_over_probe: Option<f64>,
    pub fanout_over_probe_min: Option<f64>,
    pub fanout_over_probe_max: Option<f64>,
    /// Median fan-out items/s over inline items/s.
    pub fanout_over_inline: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct LatencyBound {
    pub report: RunReport,
    pub concurrency: u64,
    /// items × latency / concurrency: a perfect sliding window.
    pub ideal_ms: f64,
    pub makespan_over_ideal: Option<f64>,
    /// `DRAINERS` of the run (1: the tick drains).
    #[serde(default)]
    pub drainers: u64,
    /// The sink's connection cap per `Fanout-Invocation`, if it was on.
    #[serde(default)]
    pub connection_cap: Option<u32>,
    /// The most requests of one invocation the sink handled at once, and how
    /// many waited for a slot.
    #[serde(default)]
    pub peak_in_flight: u32,
    #[serde(default)]
    pub cap_waits: u64,
}

impl LatencyBound {
    fn row(&self) -> [String; 6] {
        let label = match self.connection_cap {
            None => format!("{} drainer(s), no cap", self.drainers),
            Some(cap) => format!("{} drainer(s), cap {cap}/invocation", self.drainers),
        };
        [
            label,
            format!(
                "makespan {} ms",
                self.report
                    .makespan_ms
                    .map_or("-".into(), |m| m.to_string())
            ),
            format!("{} items/s", num(self.report.items_per_second, 1)),
            format!(
                "ideal {} ms (x{})",
                num(Some(self.ideal_ms), 0),
                num(self.makespan_over_ideal, 2)
            ),
            format!(
                "peak {} in flight, {} waited",
                self.peak_in_flight, self.cap_waits
            ),
            if self.report.passed() {
                "ok".into()
            } else {
                "FAIL".into()
            },
        ]
    }
}

/// The latency-bound runs side by side: no cap (what docs/benchmarks/history-2026-11-24-27.md
/// measured), then the platform's connection cap with 1 and with N drainers.
pub fn latency_table(t: &mut Table, runs: &[&LatencyBound]) {
    if let Some(first) = runs.first() {
        t.section(&format!(
            "latency-bound: {} items x {} ms sink latency, fanout, DISPATCH_CONCURRENCY {}; ideal = items x latency / (min(concurrency, cap) x drainers)",
            first.report.items, first.report.spec.latency_ms, first.concurrency
        ));
    }
    for r in runs {
        t.row(&r.row());
    }
}

#[derive(Debug, Serialize)]
pub struct InitTiming {
    pub subjects: u64,
    /// Time in `PUT /subjects` calls for the subjects added at this step.
    pub seed_ms: f64,
    pub seeded: u64,
    pub seed_per_second: Option<f64>,
    /// `POST /batches {"source":"subjects"}` round trip: initialisation only.
    pub create_batch_ms: f64,
    pub get_batch_median_ms: Option<f64>,
}

/// What listing a batch's failed items costs in D1 rows read.
#[derive(Debug, Serialize)]
pub struct RowsRead {
    /// Items in the batch, and how many of them failed.
    pub items: u64,
    pub failed: u64,
    /// Items `GET /batches/{id}/items?status=failed&limit=1000` answered.
    pub listed: u64,
    /// Its `Fanout-D1-Rows-Read`: every statement of the request (the batch
    /// lookup for the 404 check, then the listing).
    pub rows_read: u64,
    /// `GET /batches/{id}` alone, the request's fixed part.
    pub get_batch_rows_read: u64,
    /// `GET /metrics` after the batch (one statement).
    pub metrics_rows_read: u64,
    /// `GET /batches/{id}/timeline` of the finished batch, whole.
    pub timeline_rows_read: u64,
    /// `GET /batches/{id}/items?status=pending&limit=20` of the finished batch (no
    /// item pending): the page stops walking after `ITEMS_WALKED_PER_PAGE` rows.
    pub pending_page_rows_read: u64,
    /// Whether that page answered a `next_after` (it stopped before the end).
    pub pending_page_continues: bool,
}

impl RowsRead {
    pub fn row(&self) -> [String; 4] {
        [
            format!("{} items, {} failed", self.items, self.failed),
            format!("?status=failed listed {}", self.listed),
            format!("{} rows read", self.rows_read),
            format!(
                "(GET /batches/{{id}} alone: {}; GET /metrics: {}; timeline: {}; a page of ?status=pending: {}{})",
                self.get_batch_rows_read,
                self.metrics_rows_read,
                self.timeline_rows_read,
                self.pending_page_rows_read,
                if self.pending_page_continues { ", next_after set" } else { "" }
            ),
        ]
    }
}

#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub fanout: Vec<FanoutRound>,
    pub inline: RunReport,
    /// Raw SELF round trips at concurrency 100, after the last round.
    pub wide_probe: Probe,
    pub ratios: Ratios,
    pub latency: LatencyBound,
    /// The latency-bound run again with the connection cap: 1, then N drainers.
    pub latency_capped: Vec<LatencyBound>,
    pub init: Vec<InitTiming>,
    pub rows_read: RowsRead,
    pub control: ControlBench,
    pub limits: crate::bench::limits::LimitsBench,
}

impl BenchReport {
    pub fn passed(&self) -> bool {
        self.fanout.iter().all(|r| r.report.passed())
            && self.inline.passed()
            && self.latency.report.passed()
            && self.latency_capped.iter().all(|l| l.report.passed())
    }

    pub fn table(&self) -> Table {
        let mut t = Table::default();
        let run_row = |t: &mut Table, label: &str, r: &RunReport| {
            t.row(&[
                label.to_string(),
                format!("{} items/s", num(r.items_per_second, 1)),
                format!(
                    "makespan {} ms",
                    r.makespan_ms.map_or("-".into(), |m| m.to_string())
                ),
                format!(
                    "D1 {} stmts, {} rows /item",
                    num(r.d1.statements_per_item, 3),
                    num(r.d1.rows_written_per_item, 3)
                ),
                if r.passed() {
                    "ok".into()
                } else {
                    "FAIL".into()
                },
            ]);
        };
        t.section(&format!(
            "throughput, {} no-op items, one invocation",
            self.inline.items
        ));
        let probe_cell = |p: &Probe| {
            format!(
                "{} calls/s c={}",
                num(Some(p.calls_per_second), 1),
                p.concurrency
            )
        };
        for (i, r) in self.fanout.iter().enumerate() {
            run_row(&mut t, &format!("(a) fanout, round {}", i + 1), &r.report);
            t.row(&[
                format!("    (c) probe before / after round {}", i + 1),
                probe_cell(&r.probe_before),
                probe_cell(&r.probe_after),
                format!("(a)/(c) {}", num(r.fanout_over_probe, 3)),
            ]);
        }
        run_row(&mut t, "(b) inline", &self.inline);
        t.row(&[
            "(c) probe after the last round".to_string(),
            probe_cell(&self.wide_probe),
        ]);
        t.row(&[
            format!("(a)/(c), median of {}", self.fanout.len()),
            num(self.ratios.fanout_over_probe, 3),
            format!(
                "min {} max {}",
                num(self.ratios.fanout_over_probe_min, 3),
                num(self.ratios.fanout_over_probe_max, 3)
            ),
        ]);
        t.row(&[
            "(a)/(b)".to_string(),
            num(self.ratios.fanout_over_inline, 3),
        ]);
        let mut runs = vec![&self.latency];
        runs.extend(&self.latency_capped);
        latency_table(&mut t, &runs);
        run_row(&mut t, "(no cap) run", &self.latency.report);
        t.section("batch init and progress reads");
        t.row(&[
            "subjects",
            "seed PUTs",
            "POST /batches",
            "GET /batches/{id} median",
        ]);
        for i in &self.init {
            t.row(&[
                i.subjects.to_string(),
                format!(
                    "{} ms for {} ({}/s)",
                    num(Some(i.seed_ms), 0),
                    i.seeded,
                    num(i.seed_per_second, 0)
                ),
                format!("{} ms", num(Some(i.create_batch_ms), 1)),
                format!("{} ms", num(i.get_batch_median_ms, 1)),
            ]);
        }
        t.section("D1 rows read by GET /batches/{id}/items?status=failed");
        t.row(&self.rows_read.row());
        self.control.table(&mut t);
        self.limits.table(&mut t);
        t
    }
}
