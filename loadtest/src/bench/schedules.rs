//! `loadtest schedules`: what schedules cost the minute tick, on a fresh runtime.
//!
//! 1. Idle ticks with no schedule, then again with `--idle` (1,000) idle ones (crons
//!    in named zones and on each subject's time, far one-offs): the tick's D1
//!    statements and subrequests must not move (the due query reads a partial
//!    index; idle rows are not read).
//! 2. One tick firing 1 due one-off, then one firing `--due` (100) at once, over an
//!    empty group: the same subrequests (one `batch()` for every fire, which also
//!    reads their batches back), 4 more statements per fire, one batch each.
//! 3. `--due` one-offs over `--subjects` (10) no-op subjects: one tick creates all
//!    their batches; ticks then drain every item once.

use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::run::report::Verdict;
use crate::run::table::{num, Table};
use crate::runtime::api::{Api, Invocation, Schedule, TICK_CRON};
use crate::{driver::plan, run::metrics};
use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Worker settings: the defaults, with a budget and deadline large enough for one
/// tick to drain every item of the last step.
const SETTINGS: &[(&str, &str)] = &[
    ("MAX_ATTEMPTS", "3"),
    ("RETRY_BASE_MS", "100"),
    ("RETRY_MAX_MS", "400"),
    ("SUBREQUEST_BUDGET", "10000"),
    // wrangler dev enforces no cap on a request's service-binding calls.
    ("MAX_CHILD_INVOCATIONS", "10000"),
];

/// Schedules saved at once while creating the idle ones.
const PUT_CONCURRENCY: usize = 16;

#[derive(clap::Args, Debug)]
pub struct SchedulesArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Idle schedules (none due during the run).
    #[arg(long, default_value_t = 1000)]
    pub idle: usize,
    /// Schedules due at once (one tick's page is 100).
    #[arg(long, default_value_t = 100)]
    pub due: usize,
    /// No-op subjects each due schedule of the last step covers.
    #[arg(long, default_value_t = 10)]
    pub subjects: usize,
    /// Idle ticks measured before and after the idle schedules exist.
    #[arg(long, default_value_t = 3)]
    pub idle_ticks: usize,
    /// Bound on draining the last step's items, in seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Print the report as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One tick's cost, from its invocation summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TickCost {
    pub d1_statements: i64,
    pub subrequests: i64,
    pub d1_rows_written: i64,
    pub elapsed_ms: i64,
}

impl TickCost {
    fn of(i: &Invocation) -> TickCost {
        TickCost {
            d1_statements: i.summary.d1_statements,
            subrequests: i.summary.subrequests,
            d1_rows_written: i.summary.d1_rows_written,
            elapsed_ms: i.summary.elapsed_ms,
        }
    }

    /// What must not depend on idle schedules: calls, statements, rows written.
    fn work(&self) -> (i64, i64, i64) {
        (self.subrequests, self.d1_statements, self.d1_rows_written)
    }
}

#[derive(Debug, Serialize)]
pub struct SchedulesReport {
    pub idle_schedules: usize,
    pub due: usize,
    pub subjects: usize,
    pub idle_without: Vec<TickCost>,
    pub idle_with: Vec<TickCost>,
    /// Wall time of the `PUT /schedules` calls creating the idle ones.
    pub put_idle_ms: u64,
    pub fire_one: TickCost,
    pub fire_many: TickCost,
    /// The tick that fired the due schedules with items (and drained what it could).
    pub fire_items: TickCost,
    pub items: u64,
    /// Ticks after the firing one until every item was done.
    pub drain_ticks: u64,
    pub verdicts: Vec<Verdict>,
}

pub async fn run(args: SchedulesArgs) -> Result<bool> {
    if args.target.url.is_some() {
        bail!("schedules starts its own runtime on fresh state; --url is not supported");
    }
    let mut target =
        Target::open(&args.target, "schedules", SETTINGS, Secrets::Random, true).await?;
    let report = measure(&args, &target).await;
    if let Some(runtime) = target.runtime.as_mut() {
        runtime.stop().await?;
    }
    let report = report?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(report.verdicts.iter().all(|v| v.ok))
}

/// Fires one tick and returns its invocation summary (ticks here run one at a
/// time, so the newest summary is its).
async fn tick(api: &Api) -> Result<Invocation> {
    let before = api.invocations(1).await?.first().map(|i| i.id);
    api.fire_cron(TICK_CRON).await?;
    let newest = api.invocations(1).await?.pop().context("no invocation")?;
    ensure!(Some(newest.id) != before, "the tick stored no summary");
    Ok(newest)
}

async fn idle_ticks(api: &Api, n: usize) -> Result<Vec<TickCost>> {
    let mut costs = Vec::new();
    for _ in 0..n {
        let inv = tick(api).await?;
        ensure!(
            inv.summary.tally.batch_ids.is_empty(),
            "an idle tick touched batches {:?}",
            inv.summary.tally.batch_ids
        );
        costs.push(TickCost::of(&inv));
    }
    Ok(costs)
}

/// Saves `bodies` as schedules `<prefix>-<n>`, `PUT_CONCURRENCY` at a time.
async fn put_all(api: &Api, prefix: &str, bodies: Vec<Value>) -> Result<Vec<Schedule>> {
    let mut saved = Vec::new();
    let numbered: Vec<(String, Value)> = bodies
        .into_iter()
        .enumerate()
        .map(|(n, b)| (format!("{prefix}-{n:04}"), b))
        .collect();
    for chunk in numbered.chunks(PUT_CONCURRENCY) {
        let mut set = JoinSet::new();
        for (id, body) in chunk {
            let (api, id, body) = (api.clone(), id.clone(), body.clone());
            set.spawn(async move { api.put_schedule(&id, &body).await });
        }
        while let Some(done) = set.join_next().await {
            let (created, s) = done??;
            ensure!(created, "schedule {} existed already", s.id);
            saved.push(s);
        }
    }
    Ok(saved)
}

/// Idle schedules of every kind: none fires before 2028-02-29 (crons) or 2099.
fn idle_bodies(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| match i % 4 {
            0 => json!({"cron": "0 0 29 2 *"}),
            1 => json!({"cron": "30 6 29 2 *", "timezone": "Europe/Berlin", "group": "fire"}),
            2 => json!({"cron": "0 9 29 2 *", "timezone": "subject", "jitter_seconds": 60}),
            _ => json!({"at": format!("2099-01-01T00:{:02}:{:02}Z", i / 60 % 60, i % 60)}),
        })
        .collect()
}

/// `n` one-offs due now over `group`, and the keys their fires will have.
fn due_bodies(n: usize, group: &str) -> (Vec<Value>, String) {
    let at = cron_fanout::core::time::rfc3339(chrono::Utc::now().timestamp_millis());
    let bodies = (0..n).map(|_| json!({"at": at, "group": group})).collect();
    (bodies, at)
}

/// The tick that fires `schedules` must list each one's batch as fired.
fn fired_all(
    inv: &Invocation,
    api_batches: &[crate::runtime::api::Batch],
    prefix: &str,
    n: usize,
) -> Result<(), String> {
    let ours: Vec<&crate::runtime::api::Batch> = api_batches
        .iter()
        .filter(|b| {
            b.schedule_id
                .as_deref()
                .is_some_and(|s| s.starts_with(prefix))
        })
        .collect();
    if ours.len() != n {
        return Err(format!("{} batches of {prefix}-*, want {n}", ours.len()));
    }
    let listed: BTreeSet<&str> = inv
        .summary
        .tally
        .batch_ids
        .iter()
        .map(String::as_str)
        .collect();
    let missing = ours
        .iter()
        .filter(|b| !listed.contains(b.id.0.as_str()))
        .count();
    if missing > 0 {
        return Err(format!(
            "{missing} of the {n} batches were not created by that one tick"
        ));
    }
    Ok(())
}

/// The idle cost is flat: every idle tick did the same work with or without the
/// idle schedules.
pub fn flat(without: &[TickCost], with: &[TickCost]) -> Result<(), String> {
    let works: BTreeSet<(i64, i64, i64)> = without.iter().chain(with).map(TickCost::work).collect();
    match works.len() {
        1 if !without.is_empty() && !with.is_empty() => Ok(()),
        _ => Err(format!(
            "(subrequests, statements, rows written) without: {:?}, with: {:?}",
            without.iter().map(TickCost::work).collect::<Vec<_>>(),
            with.iter().map(TickCost::work).collect::<Vec<_>>()
        )),
    }
}

/// Firing `n` due schedules costs the subrequests of firing one, and 4 statements
/// per fire more.
pub fn constant_calls(one: &TickCost, many: &TickCost, n: usize) -> Result<(), String> {
    let extra = many.d1_statements - one.d1_statements;
    let want = 4 * (n as i64 - 1);
    if many.subrequests == one.subrequests && extra == want {
        Ok(())
    } else {
        Err(format!(
            "1 due: {} subrequests, {} statements; {n} due: {} subrequests, {} statements (want the same subrequests and {want} more statements)",
            one.subrequests, one.d1_statements, many.subrequests, many.d1_statements
        ))
    }
}

async fn measure(args: &SchedulesArgs, target: &Target) -> Result<SchedulesReport> {
    let api = &target.api;
    let mut verdicts = Vec::new();
    // The migration's `daily` would fire over the subjects at 12:00 UTC.
    api.delete_schedule("daily").await?;
    let subjects: Vec<_> = (0..args.subjects)
        .map(|n| {
            let mut s = plan::noop_subject(format!("fire-{n:04}"));
            s.group = Some("fire".into());
            s
        })
        .collect();
    api.put_subjects(&subjects).await?;

    eprintln!("== idle ticks, no schedule");
    let idle_without = idle_ticks(api, args.idle_ticks).await?;
    eprintln!("== saving {} idle schedules", args.idle);
    let started = Instant::now();
    let idle = put_all(api, "idle", idle_bodies(args.idle)).await?;
    let put_idle_ms = started.elapsed().as_millis() as u64;
    let now = cron_fanout::core::time::rfc3339(chrono::Utc::now().timestamp_millis());
    ensure!(
        idle.iter().all(|s| s
            .next_fire_at
            .as_deref()
            .is_some_and(|t| *t > *now.as_str())),
        "an idle schedule is due"
    );
    eprintln!("== idle ticks, {} idle schedules", args.idle);
    let idle_with = idle_ticks(api, args.idle_ticks).await?;
    verdicts.push(Verdict::new(
        &format!(
            "an idle tick's cost is flat: the same subrequests, D1 statements and rows written with {} idle schedules as with none",
            args.idle
        ),
        flat(&idle_without, &idle_with),
    ));

    eprintln!(
        "== one due schedule, then {} at once (empty group)",
        args.due
    );
    let (one, _) = due_bodies(1, "nobody");
    put_all(api, "one", one).await?;
    let fire_one = tick(api).await?;
    let (many, at) = due_bodies(args.due, "nobody");
    put_all(api, "many", many).await?;
    let fire_many = tick(api).await?;
    let batches = api.batches(1000).await?;
    verdicts.push(Verdict::new(
        &format!(
            "one tick fires all {} due schedules, one batch each (key <id>:<instant>)",
            args.due
        ),
        fired_all(&fire_many, &batches, "many-", args.due).and_then(|()| {
            let keyed = batches
                .iter()
                .filter(|b| {
                    b.key
                        .as_deref()
                        .is_some_and(|k| k.starts_with("many-") && k.ends_with(&format!(":{at}")))
                })
                .count();
            (keyed == args.due)
                .then_some(())
                .ok_or(format!("{keyed} batches keyed <id>:{at}"))
        }),
    ));
    verdicts.push(Verdict::new(
        &format!(
            "firing {} due schedules costs the subrequests of firing one (one batch() and one read-back), 4 statements per fire",
            args.due
        ),
        constant_calls(&TickCost::of(&fire_one), &TickCost::of(&fire_many), args.due),
    ));

    eprintln!(
        "== {} due schedules over {} no-op subjects each",
        args.due, args.subjects
    );
    let (work, _) = due_bodies(args.due, "fire");
    put_all(api, "work", work).await?;
    let fire_items = tick(api).await?;
    let batches = api.batches(1000).await?;
    verdicts.push(Verdict::new(
        &format!("one tick creates all {} batches with their items", args.due),
        fired_all(&fire_items, &batches, "work-", args.due).and_then(|()| {
            let short: Vec<u64> = batches
                .iter()
                .filter(|b| {
                    b.schedule_id
                        .as_deref()
                        .is_some_and(|s| s.starts_with("work-"))
                })
                .map(|b| b.total)
                .filter(|t| *t != args.subjects as u64)
                .collect();
            short
                .is_empty()
                .then_some(())
                .ok_or(format!("batch totals {short:?}, want {}", args.subjects))
        }),
    ));
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut drain_ticks = 0;
    let ours = loop {
        let ours: Vec<crate::runtime::api::Batch> = api
            .batches(1000)
            .await?
            .into_iter()
            .filter(|b| {
                b.schedule_id
                    .as_deref()
                    .is_some_and(|s| s.starts_with("work-"))
            })
            .collect();
        if ours.iter().all(|b| b.is_finished()) {
            break ours;
        }
        ensure!(
            Instant::now() < deadline,
            "items not drained after {:?}",
            args.timeout_secs
        );
        tick(api).await?;
        drain_ticks += 1;
    };
    let mut items = 0u64;
    let mut wrong = Vec::new();
    for b in &ours {
        for i in api.all_items(&b.id, None).await? {
            items += 1;
            if i.status != "completed" || i.attempt != 1 {
                wrong.push(format!(
                    "{} {} attempt {}",
                    i.subject_id, i.status, i.attempt
                ));
            }
        }
    }
    let expected = (args.due * args.subjects) as u64;
    verdicts.push(Verdict::new(
        &format!("all {expected} items completed on attempt 1"),
        if items == expected && wrong.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{items} items, {} not completed once: {:?}",
                wrong.len(),
                &wrong[..wrong.len().min(5)]
            ))
        },
    ));
    let before = api.batches(1000).await?.len();
    let again = tick(api).await?;
    let after = api.batches(1000).await?.len();
    verdicts.push(Verdict::new(
        "a tick after all that fires nothing and creates no batch",
        if after == before && again.summary.tally.batch_ids.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{before} → {after} batches, {:?}",
                again.summary.tally.batch_ids
            ))
        },
    ));
    let invocations = api.invocations(1000).await?;
    verdicts.push(Verdict::new(
        "no invocation used more subrequests than its budget",
        crate::driver::verdict::within_budget(&invocations),
    ));
    Ok(SchedulesReport {
        idle_schedules: args.idle,
        due: args.due,
        subjects: args.subjects,
        idle_without,
        idle_with,
        put_idle_ms,
        fire_one: TickCost::of(&fire_one),
        fire_many: TickCost::of(&fire_many),
        fire_items: TickCost::of(&fire_items),
        items,
        drain_ticks,
        verdicts,
    })
}

impl SchedulesReport {
    pub fn table(&self) -> Table {
        let mut t = Table::default();
        let row = |t: &mut Table, name: &str, c: &TickCost| {
            t.row(&[
                name.to_string(),
                c.subrequests.to_string(),
                c.d1_statements.to_string(),
                c.d1_rows_written.to_string(),
                c.elapsed_ms.to_string(),
            ]);
        };
        t.section("schedules: one tick's cost");
        t.row(&[
            "tick",
            "subrequests",
            "D1 statements",
            "rows written",
            "elapsed ms",
        ]);
        for (n, c) in self.idle_without.iter().enumerate() {
            row(&mut t, &format!("idle, no schedule #{}", n + 1), c);
        }
        for (n, c) in self.idle_with.iter().enumerate() {
            row(
                &mut t,
                &format!("idle, {} idle schedules #{}", self.idle_schedules, n + 1),
                c,
            );
        }
        row(&mut t, "firing 1 due (empty group)", &self.fire_one);
        row(
            &mut t,
            &format!("firing {} due (empty group)", self.due),
            &self.fire_many,
        );
        row(
            &mut t,
            &format!(
                "firing {} due × {} subjects (+ its drain)",
                self.due, self.subjects
            ),
            &self.fire_items,
        );
        t.section("other figures");
        t.row(&[
            format!("PUT /schedules × {}", self.idle_schedules),
            format!(
                "{} ms ({} per s)",
                self.put_idle_ms,
                num(
                    metrics::per_second(self.idle_schedules as u64, self.put_idle_ms),
                    0
                )
            ),
        ]);
        t.row(&[
            "items drained".to_string(),
            format!(
                "{} in the firing tick and {} more ticks",
                self.items, self.drain_ticks
            ),
        ]);
        crate::run::report::verdict_rows(&mut t, &self.verdicts);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(subrequests: i64, statements: i64, rows: i64) -> TickCost {
        TickCost {
            d1_statements: statements,
            subrequests,
            d1_rows_written: rows,
            elapsed_ms: 3,
        }
    }

    #[test]
    fn flat_means_the_same_work_in_every_idle_tick() {
        let a = cost(5, 5, 1);
        assert!(flat(&[a, a], &[a, cost(5, 5, 1)]).is_ok());
        assert!(flat(&[a], &[cost(5, 6, 1)]).is_err(), "one more statement");
        assert!(flat(&[a], &[cost(6, 5, 1)]).is_err());
        assert!(flat(&[a], &[]).is_err(), "nothing measured is no proof");
    }

    #[test]
    fn constant_calls_wants_the_same_subrequests_and_four_statements_per_fire() {
        let one = cost(7, 11, 9);
        assert!(constant_calls(&one, &cost(7, 11 + 4 * 99, 900), 100).is_ok());
        assert!(constant_calls(&one, &cost(8, 11 + 4 * 99, 900), 100).is_err());
        assert!(constant_calls(&one, &cost(7, 11 + 5 * 99, 900), 100).is_err());
    }

    #[test]
    fn idle_bodies_never_fire_soon_and_mix_every_kind() {
        let bodies = idle_bodies(8);
        assert_eq!(bodies[2]["timezone"], json!("subject"));
        assert_eq!(bodies[1]["timezone"], json!("Europe/Berlin"));
        assert!(bodies[3]["at"].as_str().unwrap().starts_with("2099-"));
        assert_ne!(bodies[3]["at"], bodies[7]["at"]);
    }
}
