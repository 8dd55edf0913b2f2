//! `loadtest bench` lines of batch control: pause, resume, cancel and
//! replay of a 100,000-item batch, each one HTTP request timed from outside; what
//! an idle tick reads from D1 while 200,000 due items sit in paused batches; the
//! D1 bytes per item and per subject, read from the local D1 file the run wrote;
//! and what migrations 0006 (batch control), 0007 (delivery), 0008 (the batch
//! list's index), 0014 (the claim cursor, a rebuilt due index), 0015 (the lease
//! windows, a rebuilt leased index) and 0017 (the queue rebuilt without its
//! (batch_id, subject_id) index) cost on a queue of a million items (host
//! SQLite; 0008 also beside 100,000 ended batches, the table it indexes; 0015 on a
//! batch made on 0014, with a cursor over all its items).

use crate::driver::drive::{self, Pace};
use crate::driver::steps::subjects_batch;
use crate::driver::target::{Target, TargetArgs};
use crate::run;
use crate::run::scenario::{Job, Scenario, Spec};
use crate::run::table::{num, Table};
use crate::runtime::api::{SubjectIn, MAX_PAGE, TICK_CRON};
use crate::sink::faults::Faults;
use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// What the issue asks of each control request on a 100,000-item batch locally.
pub const UNDER_MS: f64 = 2_000.0;

/// One timed request.
#[derive(Debug, Serialize)]
pub struct Timed {
    pub what: String,
    pub ms: f64,
    /// What the answer said (status, counts).
    pub answer: String,
}

/// D1 bytes of one table or index, and per row of what it stores.
#[derive(Debug, Serialize)]
pub struct Size {
    pub name: String,
    pub bytes: u64,
    /// Bytes per item (queue objects) or per subject (subject objects).
    pub per_row: Option<f64>,
}

/// One migration on a queue of `items` in one batch, beside `batches - 1` ended,
/// empty ones (host SQLite, in memory).
#[derive(Debug, Serialize)]
pub struct MigrationCost {
    /// Its file name's number (`0006`).
    pub migration: String,
    pub items: u64,
    pub batches: u64,
    pub ms: f64,
    /// SQLite's count of rows the migration changed (table rows, not index entries).
    pub rows_changed: u64,
}

#[derive(Debug, Serialize)]
pub struct ControlBench {
    pub items: u64,
    /// Seeding the subjects and draining the batch to be replayed (context only).
    pub drain_ms: f64,
    pub timed: Vec<Timed>,
    /// `d1_rows_read` of an idle tick with two paused batches of `items` due items
    /// and a cancelled one (claim, upkeep, finish; the summary's insert excluded).
    pub idle_tick_rows_read: Option<u64>,
    pub idle_tick_statements: i64,
    pub sizes: Vec<Size>,
    pub queue_items: u64,
    pub subjects: u64,
    /// Migrations 0006, 0007 and 0008.
    pub migrations: Vec<MigrationCost>,
}

impl ControlBench {
    pub fn table(&self, t: &mut Table) {
        t.section(&format!(
            "batch control on a {}-item batch (one request each, timed from outside)",
            self.items
        ));
        for x in &self.timed {
            t.row(&[
                x.what.clone(),
                format!("{} ms", num(Some(x.ms), 1)),
                if x.ms < UNDER_MS {
                    "under 2 s".to_string()
                } else {
                    "OVER 2 s".to_string()
                },
                x.answer.clone(),
            ]);
        }
        t.row(&[
            "idle tick, 2 paused batches of due items + 1 cancelled".to_string(),
            format!(
                "{} D1 rows read",
                self.idle_tick_rows_read
                    .map_or("-".to_string(), |n| n.to_string())
            ),
            format!("{} statements", self.idle_tick_statements),
        ]);
        t.section(&format!(
            "local D1 file after it: {} items, {} subjects",
            self.queue_items, self.subjects
        ));
        for s in &self.sizes {
            t.row(&[
                s.name.clone(),
                format!("{} bytes", s.bytes),
                s.per_row.map_or(String::new(), |b| {
                    format!("{} bytes per row", num(Some(b), 1))
                }),
            ]);
        }
        for m in &self.migrations {
            t.row(&[
                format!(
                    "migration {} on {} items, {} batches (host SQLite)",
                    m.migration, m.items, m.batches
                ),
                format!("{} ms", num(Some(m.ms), 0)),
                format!("{} rows changed", m.rows_changed),
            ]);
        }
    }
}

/// Runs the part on its own fresh runtime (`bench-control`).
pub async fn measure(args: &TargetArgs, items: usize, timeout: Duration) -> Result<ControlBench> {
    let spec = Spec {
        scenario: Scenario::Happy,
        items,
        job: Job::Webhook,
        latency_ms: 0,
        error_rate: 0.0,
        poison_share: 0.0,
        key_concurrency: None,
    };
    let mut target = run::open_for(args, "bench-control", &spec).await?;
    let api = target.api.clone();
    let started = Instant::now();
    eprintln!("seeding {items} webhook subjects whose receivers answer 400 ...");
    seed_failing(&target, items).await?;
    let replayed = subjects_batch(&api, "bench-replay", items).await?;
    let pace = Pace {
        every: Duration::from_millis(200),
        max_in_flight: 1,
        timeout,
    };
    eprintln!("draining it: every item fails on attempt 1 ...");
    let drained = drive::until_finished(&api, &replayed, pace, JoinSet::new()).await?;
    ensure!(
        drained.batch.failed == items as u64,
        "the batch to replay did not fail whole: {}",
        drained.batch.progress()
    );
    let drain_ms = ms(started);

    let mut timed = Vec::new();
    let paused = subjects_batch(&api, "bench-pause", items).await?;
    for action in ["pause", "resume", "pause"] {
        let (ms, b) = time(|| api.control(&paused.id, action)).await?;
        timed.push(Timed {
            what: format!("POST /batches/{{id}}/{action}"),
            ms,
            answer: format!("{} {}", b.status, b.progress()),
        });
    }
    let cancelled = subjects_batch(&api, "bench-cancel", items).await?;
    let (ms, b) = time(|| api.control(&cancelled.id, "cancel")).await?;
    ensure!(
        b.cancelled == items as u64 && b.pending == 0,
        "the cancel did not sweep every item in its call: {}",
        b.progress()
    );
    timed.push(Timed {
        what: "POST /batches/{id}/cancel".into(),
        ms,
        answer: format!("{} {}", b.status, b.progress()),
    });
    let body = json!({"status": "failed"});
    let (ms, requeued) = time(|| api.retry_batch(&replayed.id, &body)).await?;
    ensure!(requeued == items as u64, "requeued {requeued} of {items}");
    timed.push(Timed {
        what: "POST /batches/{id}/retry".into(),
        ms,
        answer: format!("requeued {requeued}"),
    });
    // Pause the replayed batch too: now nothing is claimable, but 2 × items are due.
    api.control(&replayed.id, "pause").await?;
    let (idle_tick_rows_read, idle_tick_statements) = idle_tick(&target).await?;

    let runtime = target
        .runtime
        .as_mut()
        .context("bench runs its own runtime")?;
    runtime.stop().await?;
    let (sizes, queue_items, subjects) = sizes(&runtime.config().state_dir)?;
    let mut migrations = Vec::new();
    // 0008 indexes the batches table, so it is also timed beside many batches;
    // 0014 rebuilds the due index over the pending items; 0015 the leased index;
    // 0017 the queue itself (every row copied, the legacy index built).
    for (migration, batches) in [
        ("0006", 1),
        ("0007", 1),
        ("0008", 100_000),
        ("0014", 1),
        ("0015", 1),
        ("0017", 1),
    ] {
        eprintln!("migration {migration} on 1,000,000 items, {batches} batches (host SQLite) ...");
        let dir = runtime.config().repo.join("migrations");
        migrations.push(migration_cost(&dir, migration, 1_000_000, batches)?);
    }
    Ok(ControlBench {
        items: items as u64,
        drain_ms,
        timed,
        idle_tick_rows_read,
        idle_tick_statements,
        sizes,
        queue_items,
        subjects,
        migrations,
    })
}

/// Webhook subjects `ctl-0000000`... whose receivers answer 400 (a permanent
/// failure on attempt 1), payloads shaped like real ones.
async fn seed_failing(target: &Target, n: usize) -> Result<()> {
    let failing = Faults {
        status: Some(400),
        ..Faults::default()
    };
    for start in (0..n).step_by(MAX_PAGE) {
        let chunk: Vec<SubjectIn> = (start..n.min(start + MAX_PAGE))
            .map(|i| {
                let id = format!("ctl-{i:07}");
                SubjectIn {
                    payload: json!({"url": target.sink.hook_url(&id, &failing),
                                    "data": {"user": i, "locale": "en"}}),
                    kind: "webhook".into(),
                    id,
                    active: true,
                    group: None,
                    timezone: None,
                }
            })
            .collect();
        target.api.put_subjects(&chunk).await?;
    }
    Ok(())
}

async fn time<T, F: std::future::Future<Output = Result<T>>>(
    f: impl FnOnce() -> F,
) -> Result<(f64, T)> {
    let started = Instant::now();
    let out = f().await?;
    Ok((ms(started), out))
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// Fires one tick that must claim nothing; its rows read and statements.
async fn idle_tick(target: &Target) -> Result<(Option<u64>, i64)> {
    tick_rows_read(target, Some(0)).await
}

/// Fires one tick and reads its `invocation` log line back from wrangler's log
/// (its `d1_rows_read`, also stored since migration 0024): its rows read and statements. With
/// `claimed`, the tick must have claimed that many items.
pub async fn tick_rows_read(target: &Target, claimed: Option<u64>) -> Result<(Option<u64>, i64)> {
    let v = tick_summary(target).await?;
    if let Some(n) = claimed {
        ensure!(
            v["claimed"] == n,
            "the tick claimed other than {n} items: {v}"
        );
    }
    Ok((
        v["d1_rows_read"].as_u64(),
        v["d1_statements"].as_i64().unwrap_or(0),
    ))
}

/// Fires one tick and reads its `invocation` log line back from wrangler's log.
pub async fn tick_summary(target: &Target) -> Result<Value> {
    let log = target
        .runtime
        .as_ref()
        .context("no local runtime")?
        .config()
        .wrangler_log();
    let before = std::fs::read_to_string(&log).unwrap_or_default().len();
    target.api.fire_cron(TICK_CRON).await?;
    // The line may reach the file just after the trigger answers.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(&log)?;
        let line = text[before.min(text.len())..]
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .find(|v| v["event"] == "invocation");
        if let Some(v) = line {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("no invocation line in {}", log.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The local D1 database file of a state dir (not miniflare's metadata file).
fn d1_file(state_dir: &Path) -> Result<PathBuf> {
    let dir = state_dir.join("v3/d1/miniflare-D1DatabaseObject");
    std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.extension().is_some_and(|x| x == "sqlite")
                && p.file_name().is_some_and(|n| n != "metadata.sqlite")
        })
        .with_context(|| format!("no D1 database in {}", dir.display()))
}

/// Bytes per table and index of the local D1 file (SQLite's `dbstat`), per item
/// for the queue and per subject for the subjects.
fn sizes(state_dir: &Path) -> Result<(Vec<Size>, u64, u64)> {
    let conn = rusqlite::Connection::open_with_flags(
        d1_file(state_dir)?,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )?;
    let count = |table: &str| -> Result<u64> {
        Ok(conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?)
    };
    let (items, subjects) = (count("cron_queue")?, count("subjects")?);
    let owners: BTreeMap<String, String> = {
        let mut stmt = conn.prepare("SELECT name, tbl_name FROM sqlite_schema")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut stmt = conn
        .prepare("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY sum(pgsize) DESC")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    let mut out = Vec::new();
    let (mut queue, mut subject) = (0u64, 0u64);
    for row in rows {
        let (name, bytes) = row?;
        let bytes = bytes as u64;
        let per_row = match owners.get(&name).map(String::as_str) {
            Some("cron_queue") => {
                queue += bytes;
                Some(bytes as f64 / items.max(1) as f64)
            }
            Some("subjects") => {
                subject += bytes;
                Some(bytes as f64 / subjects.max(1) as f64)
            }
            _ => None,
        };
        if bytes >= 65_536 || per_row.is_some() {
            out.push(Size {
                name,
                bytes,
                per_row,
            });
        }
    }
    out.push(Size {
        name: "queue, table and indexes".into(),
        bytes: queue,
        per_row: Some(queue as f64 / items.max(1) as f64),
    });
    out.push(Size {
        name: "subjects, table and indexes".into(),
        bytes: subject,
        per_row: Some(subject as f64 / subjects.max(1) as f64),
    });
    Ok((out, items, subjects))
}

/// Applies the migrations before `migration` (`0006`) to an in-memory SQLite,
/// fills a batch of `items` webhook items (a tenth completed, a tenth failed) and
/// `batches - 1` finished batches without items, then times that migration alone.
fn migration_cost(
    migrations: &Path,
    migration: &str,
    items: u64,
    batches: u64,
) -> Result<MigrationCost> {
    let conn = rusqlite::Connection::open_in_memory()?;
    conn.execute_batch("PRAGMA foreign_keys = ON")?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(migrations)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    let name = |p: &PathBuf| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let (before, rest): (Vec<PathBuf>, Vec<PathBuf>) = files
        .into_iter()
        .partition(|p| name(p).is_some_and(|n| n.as_str() < migration));
    let target = rest
        .first()
        .filter(|p| name(p).is_some_and(|n| n.starts_with(migration)))
        .with_context(|| format!("no migration {migration}"))?;
    for f in &before {
        conn.execute_batch(&std::fs::read_to_string(f)?)?;
    }
    conn.execute_batch(&format!(
        "INSERT INTO batches (id, key, status, total, completed, failed, created_at)
           VALUES ('b', 'k', 'running', {items}, {tenth}, {tenth}, 0);
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {items})
         INSERT INTO cron_queue (batch_id, subject_id, kind, payload, status, attempt,
                                 max_attempts, run_after, last_error)
         SELECT 'b', printf('user-%07d', i), 'webhook',
                json_object('url', 'https://hooks.example.com/notify/' || i, 'data', json_object('user', i)),
                CASE i % 10 WHEN 0 THEN 'completed' WHEN 1 THEN 'failed' ELSE 'pending' END,
                CASE i % 10 WHEN 0 THEN 1 WHEN 1 THEN 5 ELSE 0 END, 5, 1764000000000 + i,
                CASE i % 10 WHEN 1 THEN 'gave up after 5 attempts; last error: HTTP 500' END
         FROM n;
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {batches})
         INSERT INTO batches (id, key, status, created_at, finished_at)
         SELECT printf('e%07d', i), printf('ended-%07d', i), 'finished', i, i
         FROM n WHERE i < {batches};",
        tenth = items / 10
    ))?;
    if migration >= "0015" {
        // A batch made on 0014: a cursor over its items, never moved yet.
        conn.execute_batch(
            "UPDATE batches SET cursor_end = (SELECT max(id) FROM cron_queue) WHERE id = 'b'",
        )?;
    }
    let changes_before = conn.total_changes();
    let started = Instant::now();
    conn.execute_batch(&std::fs::read_to_string(target)?)?;
    let ms = ms(started);
    Ok(MigrationCost {
        migration: migration.to_string(),
        items,
        batches,
        ms,
        rows_changed: conn.total_changes() - changes_before,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the bench times is the migration it names, applied to a filled queue
    /// (not a timing: the figures come from `loadtest bench`).
    #[test]
    fn the_timed_migration_applies_to_a_filled_queue() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
        // (migration, batches of the 100 items, rows it changes, why)
        let cases = [
            ("0006", 1, 101, "every item and the batch copied once"),
            ("0007", 1, 0, "new columns and indexes rewrite no row"),
            ("0008", 50, 0, "an index rewrites no row"),
            (
                "0014",
                1,
                0,
                "new columns and a rebuilt index rewrite no row",
            ),
            (
                "0015",
                3,
                1 + 3,
                "the running batch's claim cursor, then every batch's window start",
            ),
            (
                "0017",
                1,
                100 + 1,
                "every item copied once, and the id high-water mark moved with them",
            ),
        ];
        for (migration, batches, rows_changed, why) in cases {
            let cost = migration_cost(&dir, migration, 100, batches).unwrap();
            assert_eq!(
                (cost.migration.as_str(), cost.rows_changed),
                (migration, rows_changed),
                "{why}"
            );
        }
        assert!(migration_cost(&dir, "0099", 10, 1).is_err());
    }
}
