//! A run's report: what it measured and the verdicts, as a table or as JSON.

use crate::run::metrics::{self, D1Cost, Percentiles};
use crate::run::scenario::Spec;
use crate::run::table::{num, Table};
use crate::runtime::api::{Batch, Invocation, Item};
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;

/// One pass/fail judgement with the reason it failed.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub name: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Verdict {
    pub fn new(name: &str, result: Result<(), String>) -> Verdict {
        Verdict {
            name: name.to_string(),
            ok: result.is_ok(),
            detail: result.err(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct States {
    pub pending: u64,
    pub processing: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Deliveries {
    pub total: u64,
    pub per_item: Option<f64>,
    /// Redeliveries of something already done (see `verdict::duplicate_deliveries`).
    pub duplicates: u64,
}

/// Everything a run observed, as read back from the API and the sink.
pub struct Observed<'a> {
    pub spec: &'a Spec,
    pub settings: &'a BTreeMap<String, String>,
    pub batch: &'a Batch,
    pub items: &'a [Item],
    /// The invocations of this run only.
    pub invocations: &'a [&'a Invocation],
    /// `None` for the noop job (no sink involved).
    pub deliveries: Option<Deliveries>,
    pub ticks: u64,
    pub in_flight_at_kill: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub spec: Spec,
    pub settings: BTreeMap<String, String>,
    pub batch_id: String,
    pub items: u64,
    pub states: States,
    /// Items by final attempt number.
    pub attempts: BTreeMap<u32, u64>,
    /// Batch created_at to the last item's completed_at.
    pub makespan_ms: Option<u64>,
    pub items_per_second: Option<f64>,
    /// Per item: batch created_at to its completed_at.
    pub latency_ms: Option<Percentiles>,
    pub ticks: u64,
    pub d1: D1Cost,
    pub deliveries: Option<Deliveries>,
    pub in_flight_at_kill: Option<u64>,
    pub verdicts: Vec<Verdict>,
}

impl RunReport {
    pub fn build(o: Observed<'_>, verdicts: Vec<Verdict>) -> Result<RunReport> {
        let created = metrics::timestamp_ms(&o.batch.created_at)?;
        let latencies = metrics::item_latencies(created, o.items)?;
        let makespan_ms = latencies.iter().copied().max();
        let items = o.items.len() as u64;
        Ok(RunReport {
            spec: o.spec.clone(),
            settings: o.settings.clone(),
            batch_id: o.batch.id.0.clone(),
            items,
            states: States {
                pending: o.batch.pending,
                processing: o.batch.processing,
                completed: o.batch.completed,
                failed: o.batch.failed,
                cancelled: o.batch.cancelled,
            },
            attempts: metrics::attempts_histogram(o.items),
            makespan_ms,
            items_per_second: makespan_ms.and_then(|m| metrics::per_second(items, m)),
            latency_ms: Percentiles::of(&latencies),
            ticks: o.ticks,
            d1: D1Cost::of(o.invocations, items, &o.batch.id.0),
            deliveries: o.deliveries,
            in_flight_at_kill: o.in_flight_at_kill,
            verdicts,
        })
    }

    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|v| v.ok)
    }

    pub fn table(&self) -> Table {
        let mut t = Table::default();
        let s = &self.states;
        let d1 = &self.d1;
        let lat = self.latency_ms;
        let p = |f: fn(&Percentiles) -> u64| lat.as_ref().map_or("-".into(), |l| f(l).to_string());
        t.section(&format!(
            "run {} ({} items, {} job, batch {})",
            self.spec.scenario.name(),
            self.items,
            self.spec.kind(),
            self.batch_id
        ));
        t.row(&[
            "states".to_string(),
            format!(
                "completed {} failed {} cancelled {} pending {} processing {}",
                s.completed, s.failed, s.cancelled, s.pending, s.processing
            ),
        ]);
        let attempts: Vec<String> = self
            .attempts
            .iter()
            .map(|(a, n)| format!("{a}: {n}"))
            .collect();
        t.row(&["attempts (item count)".to_string(), attempts.join(", ")]);
        t.row(&[
            "makespan ms".to_string(),
            self.makespan_ms.map_or("-".into(), |m| m.to_string()),
        ]);
        t.row(&["items/s".to_string(), num(self.items_per_second, 1)]);
        t.row(&[
            "latency ms p50/p95/p99/max".to_string(),
            format!(
                "{} / {} / {} / {}",
                p(|l| l.p50),
                p(|l| l.p95),
                p(|l| l.p99),
                p(|l| l.max)
            ),
        ]);
        t.row(&["ticks fired".to_string(), self.ticks.to_string()]);
        t.row(&[
            "invocations (firing + others)".to_string(),
            format!(
                "{} ({} + {})",
                d1.total.invocations, d1.firing.invocations, d1.ticks.invocations
            ),
        ]);
        t.row(&[
            "D1 statements / rows written / rows read".to_string(),
            format!(
                "{} / {} / {}",
                d1.total.d1_statements, d1.total.d1_rows_written, d1.total.d1_rows_read
            ),
        ]);
        t.row(&[
            "  per item".to_string(),
            format!(
                "{} / {} / {}",
                num(d1.statements_per_item, 3),
                num(d1.rows_written_per_item, 3),
                num(d1.rows_read_per_item, 1)
            ),
        ]);
        t.row(&[
            "  firing tick (init + its drain)".to_string(),
            format!(
                "{} / {} ({} claimed)",
                d1.firing.d1_statements, d1.firing.d1_rows_written, d1.firing.claimed
            ),
        ]);
        t.row(&[
            "  other ticks, per claimed item".to_string(),
            format!(
                "{} / {} ({} claimed)",
                num(d1.tick_statements_per_claim, 3),
                num(d1.tick_rows_written_per_claim, 3),
                d1.ticks.claimed
            ),
        ]);
        t.row(&[
            "subrequests per invocation (max / budget)".to_string(),
            format!(
                "{} / {}",
                d1.total.max_subrequests, d1.total.subrequest_budget
            ),
        ]);
        if let Some(d) = &self.deliveries {
            t.row(&[
                "deliveries (per item, duplicates)".to_string(),
                format!("{} ({}, {})", d.total, num(d.per_item, 3), d.duplicates),
            ]);
        }
        if let Some(n) = self.in_flight_at_kill {
            t.row(&["in flight at the kill".to_string(), n.to_string()]);
        }
        verdict_rows(&mut t, &self.verdicts);
        t
    }
}

/// A `verdicts` section: one `ok` / `FAIL` row per verdict, with why it failed.
pub fn verdict_rows(t: &mut Table, verdicts: &[Verdict]) {
    t.section("verdicts");
    for v in verdicts {
        let mark = if v.ok { "ok" } else { "FAIL" };
        let detail = v
            .detail
            .as_deref()
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        t.row(&[mark.to_string(), format!("{}{detail}", v.name)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::scenario::{Job, Scenario};
    use crate::runtime::api::Id;

    #[test]
    fn builds_from_observations() {
        let spec = Spec {
            scenario: Scenario::Happy,
            items: 2,
            job: Job::Noop,
            latency_ms: 0,
            error_rate: 0.0,
            poison_share: 0.0,
            key_concurrency: None,
        };
        let batch = Batch {
            id: Id("b".into()),
            key: None,
            status: "finished".into(),
            total: 2,
            pending: 0,
            processing: 0,
            completed: 2,
            failed: 0,
            cancelled: 0,
            percent: 100.0,
            rate_per_min: None,
            eta: None,
            created_at: "2026-01-01T12:00:00.000Z".into(),
            finished_at: None,
            schedule_id: None,
            on_finish: None,
            priority: 0,
            callback: None,
        };
        let item = |id: i64, at: &str| Item {
            id,
            subject_id: format!("s{id}"),
            kind: "noop".into(),
            status: "completed".into(),
            attempt: 1,
            max_attempts: 3,
            last_error: None,
            run_after: None,
            started_at: None,
            completed_at: Some(at.into()),
            receipts: None,
        };
        let items = [
            item(1, "2026-01-01T12:00:00.500Z"),
            item(2, "2026-01-01T12:00:01.000Z"),
        ];
        let settings = BTreeMap::new();
        let report = RunReport::build(
            Observed {
                spec: &spec,
                settings: &settings,
                batch: &batch,
                items: &items,
                invocations: &[],
                deliveries: None,
                ticks: 1,
                in_flight_at_kill: None,
            },
            vec![
                Verdict::new("a", Ok(())),
                Verdict::new("b", Err("why".into())),
            ],
        )
        .unwrap();
        assert_eq!(report.makespan_ms, Some(1000));
        assert_eq!(report.items_per_second, Some(2.0));
        assert_eq!(report.latency_ms.unwrap().p50, 500);
        assert!(!report.passed());
        let text = report.table().to_string();
        assert!(text.contains("FAIL  b: why"), "{text}");
        assert!(!text.contains("deliveries"), "{text}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["spec"]["scenario"], "happy");
        assert_eq!(json["verdicts"][0]["ok"], true);
    }
}
