//! `loadtest run --check-cost`: the finished batch's `cost` (`GET
//! /batches/{id}`) against the shares of it its invocations' summaries carry
//! (`per_batch`: exactly, field by field), and its D1 rows written and read
//! against what local D1 reported for the run (each statement's
//! `meta.rows_written` / `meta.rows_read`, summed by the D1 store into every
//! invocation's summary: within 1 %; the rest is invocations charged to no
//! batch, such as an idle tick). The run's runtime is fresh: every invocation
//! it lists is the run's.

use crate::run::report::Verdict;
use crate::runtime::api::Api;
use anyhow::{ensure, Context, Result};
use cron_fanout::core::cost::Cost;
use reqwest::Method;

/// Most invocations read (`GET /invocations`' page): a run with more could
/// not be summed whole, and is refused rather than checked on a part.
const MOST_INVOCATIONS: usize = 1_000;
/// How far the batch's rows may be from the run's, as a share of the run's.
pub const ROWS_WITHIN: f64 = 0.01;

#[derive(Debug, Clone, PartialEq)]
pub struct CostCheck {
    /// The batch's `cost` as `GET /batches/{id}` answered it.
    pub cost: Cost,
    /// The sum of the shares of it its invocations' summaries carry.
    pub shares: Cost,
    /// The sum of every invocation's summary of the run: what D1 reported.
    pub reported: Cost,
    pub invocations: usize,
}

impl CostCheck {
    pub async fn read(api: &Api, batch: &str) -> Result<CostCheck> {
        let r = api
            .admin_raw(Method::GET, &format!("/batches/{batch}"), None)
            .await?;
        ensure!(r.status.is_success(), "GET /batches/{batch}: {}", r.status);
        let cost: Cost = serde_json::from_value(
            r.json()
                .and_then(|v| v.get("cost").cloned())
                .context("GET /batches/{id} has no cost")?,
        )?;
        let all = api.invocations(MOST_INVOCATIONS).await?;
        ensure!(
            all.len() < MOST_INVOCATIONS,
            "{} invocations or more: the run's cannot be summed whole",
            all.len()
        );
        let mut shares = Cost::default();
        let mut reported = Cost::default();
        for inv in &all {
            if let Some(share) = inv.summary.tally.per_batch.get(batch).and_then(|t| t.cost) {
                shares.add(&share);
            }
            reported.add(&Cost::of(&inv.summary));
        }
        Ok(CostCheck {
            cost,
            shares,
            reported,
            invocations: all.len(),
        })
    }

    /// One line of figures for the log.
    pub fn line(&self) -> String {
        let (c, r) = (&self.cost, &self.reported);
        format!(
            "batch cost: {} rows written, {} read, {} statements; its {} invocations' shares {}; D1 reported {} written ({:+.3} %), {} read ({:+.3} %)",
            c.d1_rows_written,
            c.d1_rows_read,
            c.d1_statements,
            self.invocations,
            if self.cost == self.shares { "match exactly" } else { "DIFFER" },
            r.d1_rows_written,
            off(c.d1_rows_written, r.d1_rows_written) * 100.0,
            r.d1_rows_read,
            off(c.d1_rows_read, r.d1_rows_read) * 100.0,
        )
    }

    pub fn verdicts(&self) -> Vec<Verdict> {
        let exact = if self.cost == self.shares {
            Ok(())
        } else {
            Err(format!("cost {:?}, shares {:?}", self.cost, self.shares))
        };
        let rows = within(
            "rows written",
            self.cost.d1_rows_written,
            self.reported.d1_rows_written,
        )
        .and(within(
            "rows read",
            self.cost.d1_rows_read,
            self.reported.d1_rows_read,
        ));
        vec![
            Verdict::new(
                "the batch's cost is exactly the sum of its invocations' shares",
                exact,
            ),
            Verdict::new(
                "its D1 rows written and read are within 1 % of what D1 reported for the run",
                rows,
            ),
        ]
    }
}

/// `got` against `want`, as a share of `want` (0 when both are 0).
fn off(got: i64, want: i64) -> f64 {
    if want == 0 {
        return if got == 0 { 0.0 } else { f64::INFINITY };
    }
    (got - want) as f64 / want as f64
}

fn within(what: &str, got: i64, want: i64) -> Result<(), String> {
    let off = off(got, want);
    if off.abs() <= ROWS_WITHIN {
        Ok(())
    } else {
        Err(format!(
            "{what}: {got}, D1 reported {want} ({:+.3} %)",
            off * 100.0
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(written: i64, read: i64) -> Cost {
        Cost {
            d1_rows_written: written,
            d1_rows_read: read,
            ..Cost::default()
        }
    }

    fn check(c: Cost, shares: Cost, reported: Cost) -> Vec<bool> {
        let check = CostCheck {
            cost: c,
            shares,
            reported,
            invocations: 3,
        };
        check.verdicts().iter().map(|v| v.ok).collect()
    }

    #[test]
    fn the_cost_must_match_its_shares_exactly_and_the_reported_rows_within_one_percent() {
        let c = cost(36_000, 90_000);
        assert_eq!(check(c, c, cost(36_300, 90_900)), [true, true]);
        // One row off the shares fails, however close.
        assert_eq!(check(c, cost(36_001, 90_000), c), [false, true]);
        // Past 1 % of what D1 reported, either field.
        assert_eq!(check(c, c, cost(36_400, 90_000)), [true, false]);
        assert_eq!(check(c, c, cost(36_000, 91_000)), [true, false]);
        assert_eq!(check(cost(0, 0), cost(0, 0), cost(0, 0)), [true, true]);
        assert_eq!(check(cost(1, 0), cost(1, 0), cost(0, 0)), [true, false]);
    }
}
