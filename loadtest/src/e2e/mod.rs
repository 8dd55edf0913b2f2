//! The e2e folder: the suite's driver (this module) and its parts, one module
//! each (the dashboard's in `ui`, with its browser), on the settings and Worker
//! start they share (`suite`). It uses the shared folders (`sink`, `runtime`,
//! `driver`, `run`); no other folder imports it.
//!
//! `loadtest e2e`: the end-to-end suite CI runs against a real Worker.
//!
//! It seeds subjects whose webhooks succeed, fail for a while, fail for good or
//! hang; saves a one-off schedule due now and fires tick crons the way production
//! does, so the first tick creates the batch (schedules are all the Worker has: no
//! daily cron); and checks the end state through the API and the sink, the
//! timeline and /metrics. Then it fires the same occurrence again (nothing new),
//! sends bad input, puts, reads and deletes limits (`limits`), drives the dashboard in a headless Chromium (`ui`), crashes
//! the runtime mid-batch, and runs the schedules part (`schedules`: time zones,
//! intervals, one-offs and the missed daily batch, on a test clock). Waits are on
//! observable state with bounded timeouts; the only pause is the pacing between
//! tick rounds, so an idle tick does not spin.

pub mod backpressure;
pub mod control;
pub mod delivery;
pub mod drainers;
pub mod edges;
pub mod elastic;
pub mod flow;
pub mod hello_kind;
pub mod limits;
pub mod probe;
pub mod schedules;
pub mod service;
pub mod streak;
pub mod suite;
pub mod ui;

use crate::check;
use crate::driver::checks::{text, Check, Checks};
use crate::driver::drive;
use crate::driver::plan::{self, Expect, Mix, Planned};
use crate::driver::steps::items_by_subject;
use crate::driver::target::{Target, TargetArgs};
use crate::e2e::suite::open_worker;
use crate::runtime::api::{Api, Batch, Invocation, Item, RawResponse, SubjectIn, TICK_CRON};
use crate::sink::Delivery;
use crate::{driver::steps, driver::verdict, sink};
use anyhow::{bail, ensure, Context, Result};
use cron_fanout::core::time::rfc3339;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The Worker's default `MAX_CHILD_INVOCATIONS`, which the suite does not set.
fn worker_default_cap() -> i64 {
    cron_fanout::core::settings::DEFAULTS
        .iter()
        .find(|(n, _)| *n == "MAX_CHILD_INVOCATIONS")
        .and_then(|(_, v)| v.parse().ok())
        .expect("MAX_CHILD_INVOCATIONS has a numeric default")
}

#[derive(clap::Args, Debug)]
pub struct E2eArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Subjects to seed (the faulty ones are always included).
    #[arg(long, default_value_t = Mix::E2E.total)]
    pub subjects: usize,
    /// Bound on waiting for one batch to finish, in seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout_secs: u64,
    /// How long the hanging webhook sleeps; must exceed JOB_TIMEOUT_MS.
    #[arg(long, default_value_t = 3000)]
    pub hang_ms: u64,
    /// Per-delivery latency during the crash scenario, so items are in flight.
    #[arg(long, default_value_t = 200)]
    pub crash_latency_ms: u64,
    /// Skip the crash scenario.
    #[arg(long)]
    pub skip_crash: bool,
    /// Skip the schedules part (its own runtime, restarted on a moving test clock).
    #[arg(long)]
    pub skip_schedules: bool,
    /// Run only the batch-control part (pause, cancel, replay, retention; its own
    /// Worker).
    #[arg(long)]
    pub only_control: bool,
    /// Run only the dashboard's browser part (its own Worker with the suite's
    /// settings): a quick loop while working on the page.
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery"])]
    pub only_dashboard: bool,
    /// Run only the delivery part (completion callbacks, multi-channel items; its
    /// own Worker).
    #[arg(long)]
    pub only_delivery: bool,
    /// Run only the drainers part (`DRAINERS=4` on wrangler.drainers.toml's local
    /// queue; its own Worker).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe"])]
    pub only_drainers: bool,
    /// Run only the elastic-drain part (`DRAINERS=auto` on wrangler.drainers.toml's
    /// local queue: idle ticks, continuations, a drainer's cost; its own Worker).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_drainers"])]
    pub only_elastic: bool,
    /// Run only the endless-answer checks (a receiver answering 404 with 50 MiB,
    /// in fanout and inline mode; its own Worker with the suite's settings,
    /// restarted between the modes).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_drainers"])]
    pub only_answers: bool,
    /// Run only the flow-control part (limits as the sink sees them, turns
    /// between batches, priorities; its own Worker).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_drainers", "only_answers"])]
    pub only_flow: bool,
    /// Run only the backpressure part (a receiver's Retry-After pauses its
    /// implicit host: key; its own Worker).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_drainers", "only_answers", "only_flow"])]
    pub only_backpressure: bool,
    /// Run only the probe's modes (`POST /probe`; its own Worker with the
    /// suite's settings).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard"])]
    pub only_probe: bool,
    /// Run only the part of `examples/hello-kind` (a Worker crate of its own with
    /// its own job kind; its own Worker, built beforehand).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_service"])]
    pub only_hello_kind: bool,
    /// Run only the part of `examples/streak-reminder` (the seed's app on the
    /// library, against the sink's fakes of GitHub, Discord and Telegram; its own
    /// Worker, built beforehand).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_hello_kind", "only_service"])]
    pub only_streak: bool,
    /// Run only the part of `examples/streak-reminder-ts` (the seed's app in
    /// TypeScript, a `service` of the default Worker in one `wrangler dev`,
    /// against the sink's fakes; needs the default Worker built).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_hello_kind", "only_service", "only_streak"])]
    pub only_streak_ts: bool,
    /// Run only the `service` part (cron-fanout and the example TypeScript
    /// handler in one multi-worker `wrangler dev`).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe"])]
    pub only_service: bool,
}

/// Runs the suite, printing one line per check and the closing
/// `N passed, M failed`. Returns whether everything passed.
pub async fn run(args: E2eArgs) -> bool {
    let mut checks = Checks::default();
    parts(&args, &mut checks).await;
    let (verdicts, note) = crate::runtime::openapi::check_recorded(&args.target.repo);
    for (name, verdict) in verdicts {
        checks.record(&name, verdict);
    }
    println!("# openapi: {note}");
    println!("{}", checks.summary());
    checks.all_passed()
}

/// The parts the flags ask for, in the suite's order.
async fn parts(args: &E2eArgs, checks: &mut Checks) {
    let target = &args.target;
    let timeout = Duration::from_secs(args.timeout_secs);
    if args.only_dashboard {
        let ran = dashboard_only(target, checks).await;
        return ran_to_completion(checks, "dashboard part", ran);
    }
    if args.only_probe {
        let ran = probe_only(target, checks).await;
        return ran_to_completion(checks, "probe part", ran);
    }
    if args.only_answers {
        let ran = answers_only(target, timeout, checks).await;
        return ran_to_completion(checks, "endless-answers part", ran);
    }
    if args.only_drainers {
        let ran = crate::e2e::drainers::e2e(target, timeout, checks).await;
        return ran_to_completion(checks, "drainers part", ran);
    }
    if args.only_elastic {
        let ran = crate::e2e::elastic::e2e(target, timeout, checks).await;
        return ran_to_completion(checks, "elastic-drain part", ran);
    }
    if args.only_flow {
        let ran = crate::e2e::flow::e2e(target, timeout, checks).await;
        return ran_to_completion(checks, "flow-control part", ran);
    }
    if args.only_backpressure {
        let ran = crate::e2e::backpressure::e2e(target, timeout, checks).await;
        return ran_to_completion(checks, "backpressure part", ran);
    }
    if args.only_hello_kind {
        let ran = crate::e2e::hello_kind::e2e(target, timeout, checks).await;
        return ran_to_completion(checks, "hello-kind part", ran);
    }
    if args.only_streak {
        let ran = crate::e2e::streak::e2e(target, timeout, checks).await;
        return ran_to_completion(checks, "streak-reminder part", ran);
    }
    if args.only_streak_ts {
        let ran = crate::e2e::streak::e2e_ts(target, timeout, checks).await;
        return ran_to_completion(checks, "streak-reminder-ts part", ran);
    }
    if args.only_service {
        let ran = crate::e2e::service::e2e(target, timeout, checks).await;
        return ran_to_completion(checks, "service part", ran);
    }
    let only_one_part = args.only_control || args.only_delivery;
    if !only_one_part {
        let ran = suite(args, checks).await;
        ran_to_completion(checks, "suite", ran);
    }
    if !only_one_part || args.only_control {
        let ran = control::e2e(target, timeout, checks).await;
        ran_to_completion(checks, "batch-control part", ran);
    }
    if !only_one_part || args.only_delivery {
        let ran = delivery::e2e(target, timeout, checks).await;
        ran_to_completion(checks, "delivery part", ran);
    }
    if only_one_part {
        return;
    }
    let ran = crate::e2e::drainers::e2e(target, timeout, checks).await;
    ran_to_completion(checks, "drainers part", ran);
    if target.url.is_some() {
        println!("# elastic-drain, flow-control and backpressure parts skipped: --url mode cannot start a Worker with its settings");
        println!(
            "# hello-kind and service parts skipped: --url mode runs only the Worker at that URL"
        );
        println!("# streak-reminder parts skipped: --url mode runs only the Worker at that URL");
        return;
    }
    let ran = crate::e2e::elastic::e2e(target, timeout, checks).await;
    ran_to_completion(checks, "elastic-drain part", ran);
    let ran = crate::e2e::flow::e2e(target, timeout, checks).await;
    ran_to_completion(checks, "flow-control part", ran);
    let ran = crate::e2e::backpressure::e2e(target, timeout, checks).await;
    ran_to_completion(checks, "backpressure part", ran);
    // The example Workers, each on a runtime of its own (`service`: cron-fanout
    // and the TypeScript handler in one multi-worker `wrangler dev`).
    let ran = crate::e2e::hello_kind::e2e(target, timeout, checks).await;
    ran_to_completion(checks, "hello-kind part", ran);
    let ran = crate::e2e::service::e2e(target, timeout, checks).await;
    ran_to_completion(checks, "service part", ran);
    let ran = crate::e2e::streak::e2e(target, timeout, checks).await;
    ran_to_completion(checks, "streak-reminder part", ran);
    let ran = crate::e2e::streak::e2e_ts(target, timeout, checks).await;
    ran_to_completion(checks, "streak-reminder-ts part", ran);
}

/// A part that could not go on (its Worker did not start, a step it cannot do
/// without failed) as one failed check: `<what> ran to completion`.
fn ran_to_completion(checks: &mut Checks, what: &str, ran: Result<()>) {
    if let Err(e) = ran {
        checks.record(&format!("{what} ran to completion"), Err(text(e)));
    }
}

/// The dashboard's browser part alone, on a Worker of its own.
async fn dashboard_only(args: &TargetArgs, checks: &mut Checks) -> Result<()> {
    let target = open_worker(args, "e2e-dashboard", [], Vec::new())
        .await
        .context("starting the dashboard's Worker")?;
    ui::dashboard(&target, &args.repo, checks).await
}

/// The probe's modes alone, on a Worker of its own.
async fn probe_only(args: &TargetArgs, checks: &mut Checks) -> Result<()> {
    let target = open_worker(args, "e2e-probe", [], Vec::new())
        .await
        .context("starting the probe's Worker")?;
    probe::e2e(&target, checks).await
}

/// The endless-answer checks alone, on a Worker of their own.
async fn answers_only(args: &TargetArgs, timeout: Duration, checks: &mut Checks) -> Result<()> {
    let mut target = open_worker(args, "e2e-answers", [], Vec::new())
        .await
        .context("starting the endless answers' Worker")?;
    edges::endless_answers(&mut target, timeout, checks).await?;
    target.stop_checked("endless answers: ", checks).await;
    Ok(())
}

/// What the suite's checks share: the Worker and the sink, the seeded plan, and
/// what the checks before them found (the batch, and what it left once finished).
struct Suite<'a> {
    args: &'a E2eArgs,
    target: Target,
    api: Api,
    timeout: Duration,
    max_attempts: u32,
    plan: Vec<Planned>,
    subjects: Vec<SubjectIn>,
    /// The one-off schedule's body, and the key of the batch it fires.
    one_off: Value,
    key: String,
    /// The batch the racing ticks created, and the same batch finished.
    daily: Option<Batch>,
    finished: Option<Batch>,
    /// Read back once the batch ran: its items by subject, every delivery the
    /// sink received and how many, the invocations' summaries.
    items: HashMap<String, Item>,
    deliveries: Vec<Delivery>,
    delivered: u64,
    invocations: Vec<Invocation>,
}

impl<'a> Suite<'a> {
    /// Starts the Worker (a secret rotation under way: dispatches signed with
    /// the previous secret still run) and the sink; plans the subjects.
    async fn open(args: &'a E2eArgs) -> Result<Suite<'a>> {
        let mut target_args = args.target.clone();
        if !target_args
            .vars
            .iter()
            .any(|(k, _)| k == "DISPATCH_SECRET_PREVIOUS")
        {
            target_args.vars.push((
                "DISPATCH_SECRET_PREVIOUS".into(),
                crate::runtime::devvars::random_secret(),
            ));
        }
        let target = open_worker(&target_args, "e2e", [], Vec::new())
            .await
            .context("starting the Worker and the sink")?;
        let max_attempts = u32::try_from(target.setting("MAX_ATTEMPTS")?)?;
        ensure!(
            max_attempts >= 3,
            "MAX_ATTEMPTS must be >= 3 for fail_first=2 to complete"
        );
        ensure!(
            args.hang_ms > target.setting("JOB_TIMEOUT_MS")?,
            "--hang-ms must exceed JOB_TIMEOUT_MS"
        );
        let plan = plan::e2e(
            "e2e",
            Mix {
                total: args.subjects,
                ..Mix::E2E
            },
            args.hang_ms,
        );
        let subjects = plan
            .iter()
            .enumerate()
            .map(|(n, p)| p.subject(&target.sink, n))
            .collect();
        Ok(Suite {
            args,
            api: target.api.clone(),
            target,
            timeout: Duration::from_secs(args.timeout_secs),
            max_attempts,
            plan,
            subjects,
            one_off: Value::Null,
            key: String::new(),
            daily: None,
            finished: None,
            items: HashMap::new(),
            deliveries: Vec::new(),
            delivered: 0,
            invocations: Vec::new(),
        })
    }

    /// What the batch left: its items, the sink's deliveries, the summaries.
    async fn read_back(&mut self) -> Result<()> {
        let id = self.daily()?.id.clone();
        self.items = items_by_subject(&self.api, &id).await?;
        let stats = self.target.sink.stats(true).await?;
        self.delivered = stats.total;
        self.deliveries = stats.deliveries.unwrap_or_default();
        self.invocations = self.api.invocations(1000).await?;
        Ok(())
    }

    fn daily(&self) -> Result<&Batch> {
        self.daily.as_ref().context("no batch to follow")
    }

    fn finished(&self) -> Result<&Batch> {
        self.finished.as_ref().context("the batch did not finish")
    }
}

async fn suite(args: &E2eArgs, checks: &mut Checks) -> Result<()> {
    let mut f = Suite::open(args).await?;
    checks
        .run(
            &mut f,
            vec![
                check!(
                    "runtime and sink started, GET /health answers {\"ok\":true}",
                    health_answers
                ),
                check!(
                    "PUT /subjects upserts every subject (chunks of 250)",
                    subjects_upserted
                ),
            ],
        )
        .await;

    // The batch: a one-off schedule fired by ticks. (`daily` would fire over the
    // same subjects after 12:00 UTC; the schedules part tests it on a test clock.)
    f.api.delete_schedule("daily").await?;
    (f.one_off, f.key) = steps::one_off_now(&f.api, E2E_SCHEDULE).await?;
    let batch = vec![
        check!(
            format!(
                "a one-off schedule due now: two racing ticks create exactly one batch {} over all {} subjects",
                f.key,
                f.plan.len()
            ),
            racing_ticks_create_one_batch
        ),
        check!(
            "the batch finishes while tick crons fire (2 at a time)",
            batch_finishes
        ),
    ];
    checks.run(&mut f, batch).await;
    f.read_back().await?;
    // The suite keeps the Worker's default cap: the healthy items completed on
    // attempt 1 although no tick could dispatch them all.
    let cap = worker_default_cap();
    let max_attempts = f.max_attempts;
    let outcomes = vec![
        check!(
            "GET /batches/{id}/items lists one item per subject",
            one_item_per_subject
        ),
        check!(
            "healthy subjects: completed on attempt 1 after exactly one delivery",
            healthy_complete_at_once
        ),
        check!(
            "fail_first=2 subjects: completed on attempt 3 after 3 deliveries",
            fail_first_complete_on_attempt_3
        ),
        check!(
            format!("status=500 subjects: failed on attempt {max_attempts}, last_error mentions 500"),
            server_errors_fail_after_max_attempts
        ),
        check!(
            "status=400 subjects: failed on attempt 1 (permanent), last_error mentions 400",
            client_errors_fail_at_once
        ),
        check!(
            format!("hanging subject: failed on attempt {max_attempts} with a timeout reason"),
            hanging_subject_times_out
        ),
        check!(
            "batch counts add up: pending+processing+completed+failed = total, 100%, finished_at set",
            batch_counts_add_up
        ),
        check!(
            "every delivery has a valid signature and Idempotency-Key = item_id",
            deliveries_signed_and_keyed
        ),
        check!(
            format!(
                "every delivery carried its subject's data intact (non-ASCII in all, over 8 KiB in 1 of {}: short and long items, both in the dispatch body)",
                plan::BIG_DATA_EVERY
            ),
            data_arrives_intact
        ),
        check!(
            "no invocation used more subrequests than its budget",
            invocations_within_budget
        ),
        check!(
            format!("with the default MAX_CHILD_INVOCATIONS ({cap}) no tick dispatched more than {cap} items, and later ticks drained the rest"),
            ticks_within_the_child_cap
        ),
        // What the dashboard and a Prometheus scrape read, after a real run.
        check!(
            "GET /batches/{id}/timeline adds up to the finished batch's counters; its rate and ETA are null",
            timeline_adds_up
        ),
        check!(
            "GET /metrics has every metric docs/reference/metrics.md names, with plausible values",
            metrics_plausible
        ),
        check!(
            "firing the same occurrence again (the one-off saved again, ticks and `0 12 * * *` — now just a tick — fired) creates no batch and no delivery",
            refiring_creates_nothing
        ),
    ];
    checks.run(&mut f, outcomes).await;

    bad_input(&f.api, f.plan.len(), checks).await?;
    crate::e2e::limits::http(&f.api, checks).await?;

    // The edges: bodies, dispatch signatures, redirects, signing secrets.
    if f.target.runtime.is_some() {
        edges::streamed_bodies(&f.target, checks).await?;
        edges::dispatch_signatures(&f.target, checks).await?;
    } else {
        println!(
            "# streamed bodies and dispatch signatures skipped: --url mode has no secrets or log"
        );
    }
    edges::redirects(&f.target, f.timeout, checks).await?;
    edges::signing_secrets(&f.target, f.timeout, checks).await?;
    probe::e2e(&f.target, checks).await?;

    // The dashboard in a real browser.
    ui::dashboard(&f.target, &args.target.repo, checks).await?;

    if args.skip_crash {
        println!("# crash scenario skipped (--skip-crash)");
    } else if f.target.runtime.is_none() {
        println!("# crash scenario skipped: --url mode cannot kill the runtime");
    } else {
        crash(&mut f.target, &f.plan, args, checks).await?;
    }

    // Last: these restart the Worker with other settings.
    if f.target.runtime.is_some() {
        edges::endless_answers(&mut f.target, f.timeout, checks).await?;
        edges::restarted(&mut f.target, f.timeout, checks).await?;
    } else {
        println!(
            "# endless answers, private targets and misconfiguration skipped: --url mode cannot restart the Worker"
        );
    }

    let local = f.target.runtime.is_some();
    f.target.stop_checked("", checks).await;

    // Schedules: a runtime of its own, restarted at chosen instants.
    if args.skip_schedules {
        println!("# schedules part skipped (--skip-schedules)");
    } else if !local {
        println!("# schedules part skipped: --url mode cannot move the Worker's clock");
    } else {
        crate::e2e::schedules::run(&args.target, checks).await?;
    }
    Ok(())
}

async fn health_answers(f: &mut Suite<'_>) -> Result<()> {
    f.api.health().await
}

async fn subjects_upserted(f: &mut Suite<'_>) -> Result<()> {
    let mut upserted = 0;
    for chunk in f.subjects.chunks(250) {
        upserted += f.api.put_subjects(chunk).await?;
    }
    ensure!(
        upserted == f.subjects.len() as u64,
        "upserted {upserted} of {}",
        f.subjects.len()
    );
    let listed = f.api.all_subjects().await?.len();
    ensure!(
        listed == f.subjects.len(),
        "GET /subjects lists {listed}, want {}",
        f.subjects.len()
    );
    Ok(())
}

/// The one-off schedule the suite's batch is fired with.
const E2E_SCHEDULE: &str = "e2e";

/// Two tick crons fired at once race for the one-off schedule due now; the
/// batch they created is the one the suite follows.
async fn racing_ticks_create_one_batch(f: &mut Suite<'_>) -> Result<()> {
    let (a, b) = tokio::join!(f.api.fire_cron(TICK_CRON), f.api.fire_cron(TICK_CRON));
    a?;
    b?;
    let key = &f.key;
    let found: Vec<Batch> = f
        .api
        .batches(100)
        .await?
        .into_iter()
        .filter(|b| b.key.as_deref() == Some(key.as_str()))
        .collect();
    f.daily = found.first().cloned();
    let total = f.plan.len() as u64;
    match found.as_slice() {
        [b] if b.total == total => Ok(()),
        [b] => bail!("batch {} has total {}, want {total}", b.id, b.total),
        [] => bail!("no batch with key {key:?} in GET /batches"),
        many => bail!("{} batches with key {key:?}", many.len()),
    }
}

async fn batch_finishes(f: &mut Suite<'_>) -> Result<()> {
    let daily = f.daily()?;
    f.finished = Some(drive::in_pairs(&f.api, &daily.id, f.timeout, "batch").await?);
    Ok(())
}

async fn one_item_per_subject(f: &mut Suite<'_>) -> Result<()> {
    ensure!(
        f.items.len() == f.plan.len(),
        "{} items for {} subjects",
        f.items.len(),
        f.plan.len()
    );
    Ok(())
}

/// The planned subjects of `kind` ended as planned: status, attempts, one
/// delivery per attempt.
fn outcomes_of(f: &Suite<'_>, kind: Expect) -> Result<()> {
    let by_item = verdict::deliveries_by_item(&f.deliveries, &f.daily()?.id.0);
    verdict::outcomes_of_kind(&f.plan, kind, f.max_attempts, &f.items, &by_item)
        .map_err(anyhow::Error::msg)
}

async fn healthy_complete_at_once(f: &mut Suite<'_>) -> Result<()> {
    outcomes_of(f, Expect::Healthy)
}

async fn fail_first_complete_on_attempt_3(f: &mut Suite<'_>) -> Result<()> {
    outcomes_of(f, Expect::FailFirst(2))
}

async fn server_errors_fail_after_max_attempts(f: &mut Suite<'_>) -> Result<()> {
    outcomes_of(f, Expect::ServerError)
}

async fn client_errors_fail_at_once(f: &mut Suite<'_>) -> Result<()> {
    outcomes_of(f, Expect::ClientError)
}

async fn hanging_subject_times_out(f: &mut Suite<'_>) -> Result<()> {
    outcomes_of(f, Expect::Hang)
}

async fn batch_counts_add_up(f: &mut Suite<'_>) -> Result<()> {
    let failed = f
        .plan
        .iter()
        .filter(|p| {
            matches!(
                p.expect,
                Expect::ServerError | Expect::ClientError | Expect::Hang
            )
        })
        .count() as u64;
    let total = f.plan.len() as u64;
    verdict::batch_counts(f.finished()?, total, total - failed, failed).map_err(anyhow::Error::msg)
}

async fn deliveries_signed_and_keyed(f: &mut Suite<'_>) -> Result<()> {
    let refs: Vec<_> = f.deliveries.iter().collect();
    verdict::deliveries_well_formed(&refs).map_err(anyhow::Error::msg)
}

async fn data_arrives_intact(f: &mut Suite<'_>) -> Result<()> {
    let expected: HashMap<String, String> = f
        .subjects
        .iter()
        .map(|s| (s.id.clone(), sink::data_digest(&s.payload["data"])))
        .collect();
    let refs: Vec<_> = f.deliveries.iter().collect();
    verdict::data_intact(&expected, &refs).map_err(anyhow::Error::msg)
}

async fn invocations_within_budget(f: &mut Suite<'_>) -> Result<()> {
    verdict::within_budget(&f.invocations).map_err(anyhow::Error::msg)
}

async fn ticks_within_the_child_cap(f: &mut Suite<'_>) -> Result<()> {
    verdict::within_child_cap(&f.invocations, worker_default_cap()).map_err(anyhow::Error::msg)
}

async fn timeline_adds_up(f: &mut Suite<'_>) -> Result<()> {
    ui::timeline_matches(&f.api, f.finished()?)
        .await
        .map_err(anyhow::Error::msg)
}

async fn metrics_plausible(f: &mut Suite<'_>) -> Result<()> {
    ui::metrics_plausible(&f.api, &f.args.target.repo, f.finished()?)
        .await
        .map_err(anyhow::Error::msg)
}

/// Nothing new when the same occurrence fires again.
async fn refiring_creates_nothing(f: &mut Suite<'_>) -> Result<()> {
    f.api.put_schedule(E2E_SCHEDULE, &f.one_off).await?;
    steps::refire(&f.target, f.daily()?, f.delivered).await
}

/// The bad-input checks' fixture: the Worker's API and the counts bad input must
/// leave as they are.
struct BadRequests<'a> {
    api: &'a Api,
    subjects: usize,
    batches_before: usize,
}

/// Bad requests get a 4xx with the JSON error shape and change nothing.
async fn bad_input(api: &Api, subjects: usize, checks: &mut Checks) -> Result<()> {
    let mut list = vec![
        check!(
            "wrong admin token: 401 with a JSON error",
            wrong_token_refused
        ),
        check!(
            "no admin token: 401 with a JSON error",
            missing_token_refused
        ),
        check!(
            "malformed JSON to PUT /subjects: 400 {\"error\":{code,message}}",
            malformed_json_refused
        ),
        check!(
            "non-http webhook url: 400 with a JSON error",
            non_http_url_refused
        ),
        check!(
            "unsigned POST /internal/run: 401",
            unsigned_dispatch_refused
        ),
        check!(
            "POST /internal/run with a forged signature line: 401",
            forged_dispatch_refused
        ),
    ];
    list.extend(more_bad_input().into_iter().map(|case| {
        check!(
            format!("{}: {} {}", case.name, case.status, case.code),
            refused_with_its_code,
            case
        )
    }));
    list.push(check!(
        "bad input changed nothing: GET /subjects and GET /batches counts unchanged (no subject bad-url or bad-limits)",
        bad_input_changed_nothing
    ));
    let mut f = BadRequests {
        api,
        subjects,
        batches_before: api.batches(1000).await?.len(),
    };
    checks.run(&mut f, list).await;
    Ok(())
}

/// `r` has status `status` and, with `shape`, the JSON error shape.
fn answered(r: &RawResponse, status: StatusCode, shape: bool) -> Result<()> {
    ensure!(
        r.status == status,
        "got {} {}, want {status}",
        r.status,
        crate::runtime::api::clip(&r.body)
    );
    ensure!(
        !shape || r.error_shape().is_some(),
        "body is not {{\"error\":{{\"code\",\"message\"}}}}: {}",
        crate::runtime::api::clip(&r.body)
    );
    Ok(())
}

async fn wrong_token_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let r = f
        .api
        .raw(Method::GET, "/subjects", Some("wrong-token"), None)
        .await?;
    answered(&r, StatusCode::UNAUTHORIZED, true)
}

async fn missing_token_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let r = f
        .api
        .raw(
            Method::PUT,
            "/subjects",
            None,
            Some(r#"{"subjects":[]}"#.into()),
        )
        .await?;
    answered(&r, StatusCode::UNAUTHORIZED, true)
}

async fn malformed_json_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let r = f
        .api
        .admin_raw(
            Method::PUT,
            "/subjects",
            Some(r#"{"subjects": [{"id": "x""#.into()),
        )
        .await?;
    answered(&r, StatusCode::BAD_REQUEST, true)
}

async fn non_http_url_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let bad_url = json!({"subjects": [{"id": "bad-url", "kind": "webhook", "payload": {"url": "ftp://127.0.0.1/x"}, "active": true}]});
    let r = f
        .api
        .admin_raw(Method::PUT, "/subjects", Some(bad_url.to_string()))
        .await?;
    answered(&r, StatusCode::BAD_REQUEST, true)
}

/// An item as a dispatch carries it, for the refused dispatches.
fn run_body() -> String {
    json!({"item_id": 1, "lease_token": "x", "batch_id": "x", "subject_id": "x", "attempt": 1, "kind": "webhook", "payload": {}})
        .to_string()
}

async fn unsigned_dispatch_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let r = f
        .api
        .raw(Method::POST, "/internal/run", None, Some(run_body()))
        .await?;
    answered(&r, StatusCode::UNAUTHORIZED, false)
}

/// The same item after a signature line made with another secret: refused like
/// the unsigned one.
async fn forged_dispatch_refused(f: &mut BadRequests<'_>) -> Result<()> {
    let run = run_body();
    let forged_sig = crate::sink::signature::sign(
        b"not-the-dispatch-secret",
        chrono::Utc::now().timestamp(),
        run.as_bytes(),
    );
    let r = f
        .api
        .raw(
            Method::POST,
            "/internal/run",
            None,
            Some(format!("{forged_sig}\n{run}")),
        )
        .await?;
    answered(&r, StatusCode::UNAUTHORIZED, false)
}

/// One of the table's requests gets its status and its stable error code.
async fn refused_with_its_code(f: &mut BadRequests<'_>, case: BadInput) -> Result<()> {
    let r = f.api.admin_raw(case.method, case.path, case.body).await?;
    answered(&r, case.status, true)?;
    r.refused(case.status, case.code)
        .map_err(anyhow::Error::msg)
}

async fn bad_input_changed_nothing(f: &mut BadRequests<'_>) -> Result<()> {
    let after = f.api.all_subjects().await?;
    let batches_after = f.api.batches(1000).await?.len();
    ensure!(
        after.len() == f.subjects
            && after
                .iter()
                .all(|s| s.id != "bad-url" && s.id != "bad-limits")
            && batches_after == f.batches_before,
        "{} subjects (want {}), {batches_after} batches (want {})",
        after.len(),
        f.subjects,
        f.batches_before
    );
    Ok(())
}

/// One bad request and the answer docs/api.md promises for it.
struct BadInput {
    name: &'static str,
    method: Method,
    path: &'static str,
    body: Option<String>,
    status: StatusCode,
    /// The stable `error.code`.
    code: &'static str,
}

/// The rest of the issue's bad-input list, sent with a valid admin token.
fn more_bad_input() -> Vec<BadInput> {
    let case = |name, method, path, body: Option<String>, status, code| BadInput {
        name,
        method,
        path,
        body,
        status,
        code,
    };
    let subject = |id: Value, kind: &str| json!({"id": id, "kind": kind, "payload": {"url": "http://127.0.0.1/x"}});
    let put = |subjects: Vec<Value>| Some(json!({ "subjects": subjects }).to_string());
    let many: Vec<Value> = (0..1001)
        .map(|i| subject(json!(format!("many-{i}")), "webhook"))
        .collect();
    let huge = format!(r#"{{"subjects":[],"pad":"{}"}}"#, "x".repeat(300 * 1024));
    let limited = |limits: Value| json!({"id": "bad-limits", "kind": "noop", "payload": {}, "limits": limits});
    let noop_item = |id: &str| json!({"subject_id": id, "kind": "noop", "payload": {}});
    vec![
        case(
            "unknown field",
            Method::PUT,
            "/subjects",
            Some(r#"{"subjects":[],"extra":1}"#.into()),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        case(
            "wrong type",
            Method::PUT,
            "/subjects",
            put(vec![subject(json!(5), "webhook")]),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        case(
            "empty id",
            Method::PUT,
            "/subjects",
            put(vec![subject(json!(""), "webhook")]),
            StatusCode::BAD_REQUEST,
            "invalid_id",
        ),
        case(
            "201-char id",
            Method::PUT,
            "/subjects",
            put(vec![subject(json!("i".repeat(201)), "webhook")]),
            StatusCode::BAD_REQUEST,
            "invalid_id",
        ),
        case(
            "1001 subjects in one call",
            Method::PUT,
            "/subjects",
            put(many),
            StatusCode::BAD_REQUEST,
            "too_many",
        ),
        case(
            "unknown kind",
            Method::PUT,
            "/subjects",
            put(vec![subject(json!("k"), "email")]),
            StatusCode::BAD_REQUEST,
            "invalid_payload",
        ),
        case(
            "body over 256 KiB",
            Method::PUT,
            "/subjects",
            Some(huge),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        case(
            "a subject with a fifth limit key",
            Method::PUT,
            "/subjects",
            put(vec![limited(json!(["a", "b", "c", "d", "e"]))]),
            StatusCode::BAD_REQUEST,
            "invalid_limits",
        ),
        case(
            "a subject's limit key with a space",
            Method::PUT,
            "/subjects",
            put(vec![limited(json!(["tenant acme"]))]),
            StatusCode::BAD_REQUEST,
            "invalid_limits",
        ),
        case(
            "an item holding a limit key twice",
            Method::POST,
            "/batches",
            Some(
                json!({"key": "bad-limits", "items": [noop_item("a"),
                    {"subject_id": "b", "kind": "noop", "payload": {}, "limits": ["github", "github"]}]})
                .to_string(),
            ),
            StatusCode::BAD_REQUEST,
            "invalid_limits",
        ),
        case(
            "a batch of priority 11",
            Method::POST,
            "/batches",
            Some(json!({"key": "bad-priority", "items": [noop_item("a")], "priority": 11}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_priority",
        ),
        case(
            "a schedule of priority \"high\"",
            Method::PUT,
            "/schedules/bad-priority",
            Some(json!({"every_seconds": 3600, "priority": "high"}).to_string()),
            StatusCode::BAD_REQUEST,
            "invalid_priority",
        ),
        case(
            "the schedule refused for its priority was not created",
            Method::GET,
            "/schedules/bad-priority",
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        case(
            "unknown batch source",
            Method::POST,
            "/batches",
            Some(r#"{"source":"users"}"#.into()),
            StatusCode::BAD_REQUEST,
            "invalid_source",
        ),
        case(
            "reserved daily key",
            Method::POST,
            "/batches",
            Some(r#"{"key":"daily:2099-01-01","source":"subjects"}"#.into()),
            StatusCode::BAD_REQUEST,
            "reserved_key",
        ),
        case(
            "unknown status filter",
            Method::GET,
            "/batches/none/items?status=done",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_query",
        ),
        case(
            "unknown batch",
            Method::GET,
            "/batches/none",
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        case(
            "unknown route",
            Method::GET,
            "/nowhere",
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        case(
            "wrong method",
            Method::DELETE,
            "/batches",
            None,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        case(
            "probe with 0 calls",
            Method::POST,
            "/probe",
            Some(r#"{"calls":0}"#.into()),
            StatusCode::BAD_REQUEST,
            "invalid_probe",
        ),
        case(
            "probe with an unknown field",
            Method::POST,
            "/probe",
            Some(r#"{"calls":1,"rate":5}"#.into()),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
    ]
}

/// The crash checks' fixture: the runtime they kill, the suite's subjects slowed
/// down, the ad-hoc batch over them and what the checks before found.
struct Crash<'a> {
    target: &'a mut Target,
    api: Api,
    timeout: Duration,
    slow: Vec<Planned>,
    /// The ad-hoc batch's body, and the batch.
    body: Value,
    batch: Option<Batch>,
    /// Invocation ids seen before the kill.
    known: HashSet<i64>,
    processing_at_kill: Option<u64>,
    invocations: Vec<Invocation>,
}

/// Kills the runtime (SIGKILL, whole process group) while a tick has items in
/// flight, restarts it on the same state dir and checks recovery.
async fn crash(
    target: &mut Target,
    plan: &[Planned],
    args: &E2eArgs,
    checks: &mut Checks,
) -> Result<()> {
    let api = target.api.clone();
    let slow = plan::all_slow(plan, args.crash_latency_ms);
    let subjects: Vec<SubjectIn> = slow
        .iter()
        .enumerate()
        .map(|(n, p)| p.subject(&target.sink, n))
        .collect();
    api.put_subjects(&subjects)
        .await
        .context("re-seeding slow subjects")?;
    let key = format!("crash-{}", chrono::Utc::now().timestamp_millis());
    let mut f = Crash {
        target,
        api,
        timeout: Duration::from_secs(args.timeout_secs),
        slow,
        body: json!({"key": key, "source": "subjects"}),
        batch: None,
        known: HashSet::new(),
        processing_at_kill: None,
        invocations: Vec::new(),
    };
    checks
        .run(
            &mut f,
            vec![
                check!(
                    needed "POST /batches creates an ad-hoc batch (201) over all subjects",
                    ad_hoc_batch_created
                ),
                check!(
                    "POST /batches with an existing key returns that batch (200)",
                    existing_key_returns_the_batch
                ),
                check!(
                    needed "runtime restarts on the same state dir after SIGKILL",
                    restarts_after_a_kill_mid_batch
                ),
                check!(
                    "crash hit items in flight (processing > 0 after restart)",
                    kill_hit_items_in_flight
                ),
                check!(
                    "crash batch finishes after restart while ticks fire",
                    crash_batch_finishes
                ),
            ],
        )
        .await;

    let batch = f.batch.as_ref().context("no crash batch")?;
    let processing_at_kill = f
        .processing_at_kill
        .context("the items in flight at the kill are unknown")?;
    let items = items_by_subject(&f.api, &batch.id).await?;
    let stats = f.target.sink.stats(true).await?;
    let deliveries = stats.deliveries.unwrap_or_default();
    let by_item = verdict::deliveries_by_item(&deliveries, &batch.id.0);
    // Judged together (`loadtest run` reports them too), one line each.
    let recovery = verdict::crash_recovery(&f.slow, &items, &by_item, processing_at_kill);
    let mut list: Vec<Check<Crash>> = recovery
        .into_iter()
        .map(|(name, verdict)| check!(name, recovered, verdict))
        .collect();
    f.invocations = f.api.invocations(1000).await?;
    list.extend([
        check!(
            "crash: the reaper requeued exactly the leases left by the crash",
            reaper_requeued_the_crash_leases
        ),
        check!(
            "crash: no invocation used more subrequests than its budget",
            crash_invocations_within_budget
        ),
    ]);
    checks.run(&mut f, list).await;
    Ok(())
}

fn crash_batch<'f>(f: &'f Crash<'_>) -> Result<&'f Batch> {
    f.batch.as_ref().context("no crash batch")
}

async fn ad_hoc_batch_created(f: &mut Crash<'_>) -> Result<()> {
    let (created, batch) = f.api.create_batch(&f.body).await?;
    let total = batch.total;
    f.batch = Some(batch);
    ensure!(
        created && total == f.slow.len() as u64,
        "created {created}, total {total}"
    );
    Ok(())
}

async fn existing_key_returns_the_batch(f: &mut Crash<'_>) -> Result<()> {
    let batch = crash_batch(f)?;
    let (created_again, again) = f.api.create_batch(&f.body).await?;
    ensure!(
        !created_again && again.id == batch.id,
        "created {created_again}, id {} vs {}",
        again.id,
        batch.id
    );
    Ok(())
}

async fn restarts_after_a_kill_mid_batch(f: &mut Crash<'_>) -> Result<()> {
    let id = crash_batch(f)?.id.clone();
    f.known = f.api.invocation_ids().await?;
    let at_kill = steps::kill_mid_batch(f.target, &id, f.timeout).await?;
    eprintln!("  [crash] killed with {}", at_kill.progress());
    let runtime = f.target.runtime.as_mut().context("no local runtime")?;
    runtime.restart().await
}

async fn kill_hit_items_in_flight(f: &mut Crash<'_>) -> Result<()> {
    // Nothing has run since the restart, so the counts are those at the kill.
    let frozen = f.api.batch(&crash_batch(f)?.id).await?;
    eprintln!("  [crash] after restart: {}", frozen.progress());
    f.processing_at_kill = Some(frozen.processing);
    ensure!(frozen.processing > 0, "{}", frozen.progress());
    Ok(())
}

async fn crash_batch_finishes(f: &mut Crash<'_>) -> Result<()> {
    drive::in_pairs(&f.api, &crash_batch(f)?.id, f.timeout, "crash").await?;
    Ok(())
}

/// One of `verdict::crash_recovery`'s verdicts, judged with the others.
async fn recovered(_: &mut Crash<'_>, verdict: Result<(), String>) -> Result<()> {
    verdict.map_err(anyhow::Error::msg)
}

async fn reaper_requeued_the_crash_leases(f: &mut Crash<'_>) -> Result<()> {
    let processing_at_kill = f.processing_at_kill.unwrap_or_default();
    let since_crash: Vec<&Invocation> = f
        .invocations
        .iter()
        .filter(|i| !f.known.contains(&i.id))
        .collect();
    // What each scheduled run did since the crash, oldest first: the evidence
    // for this check and the next when they fail.
    for Invocation { id, summary: i } in since_crash.iter().rev() {
        let t = &i.tally;
        eprintln!(
            "  [crash] invocation {id} {} at {} {} ms: claimed {} completed {} retried {} failed {} lost_leases {} released {} reaped {} subrequests {}/{}",
            i.trigger.as_str(), rfc3339(i.started_at), i.elapsed_ms, t.claimed, t.completed, t.retried,
            t.failed, t.lost_leases, t.released, t.reaped, i.subrequests, i.subrequest_budget
        );
    }
    let reaped: i64 = since_crash.iter().map(|i| i.summary.tally.reaped).sum();
    ensure!(
        u64::try_from(reaped) == Ok(processing_at_kill),
        "invocations report {reaped} reaped, {processing_at_kill} were processing"
    );
    Ok(())
}

async fn crash_invocations_within_budget(f: &mut Crash<'_>) -> Result<()> {
    verdict::within_budget(&f.invocations).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::e2e::suite::settings;
    use cron_fanout::core::settings::Settings;

    fn parse(pairs: &[(&'static str, String)]) -> Result<Settings, String> {
        Settings::from_lookup(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn the_suite_lease_is_the_smallest_the_worker_accepts_plus_a_second() {
        let mut s = settings();
        assert!(parse(&s).is_ok(), "{:?}", parse(&s));
        let lease = s.iter().position(|(k, _)| *k == "LEASE_SECONDS").unwrap();
        assert_eq!(s[lease].1, "12");
        // One second less is the bare minimum, two less is refused.
        s[lease].1 = "11".into();
        assert!(parse(&s).is_ok());
        s[lease].1 = "10".into();
        assert!(parse(&s).unwrap_err().starts_with("LEASE_SECONDS"));
    }
}
