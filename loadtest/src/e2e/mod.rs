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
pub mod bad_input;
pub mod control;
pub mod crash;
pub mod delivery;
pub mod drainers;
pub mod edges;
pub mod elastic;
pub mod flow;
pub mod hello_kind;
pub mod learn;
pub mod limits;
pub mod metrics;
pub mod misconfig;
pub mod probe;
pub mod receivers;
pub mod schedule_bodies;
pub mod schedules;
pub mod service;
pub mod signing;
pub mod streak;
pub mod streak_users;
pub mod suite;
pub mod ui;
pub mod waiting;

use crate::check;
use crate::driver::checks::{text, Checks};
use crate::driver::drive;
use crate::driver::plan::{self, Expect, Mix, Planned};
use crate::driver::steps::items_by_subject;
use crate::driver::target::{Target, TargetArgs};
use crate::e2e::suite::open_worker;
use crate::runtime::api::{Api, Batch, Invocation, Item, SubjectIn, TICK_CRON};
use crate::sink::Delivery;
use crate::{driver::steps, driver::verdict, sink};
use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::collections::HashMap;
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
    /// implicit host: key; its own Worker, with LEARN_LIMITS=false).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_drainers", "only_answers", "only_flow"])]
    pub only_backpressure: bool,
    /// Run only the learned-rates part (300 webhooks to a receiver of 10/s with
    /// no limit set, then a set rate under it; its own Worker).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_drainers", "only_answers", "only_flow", "only_backpressure"])]
    pub only_learn: bool,
    /// Run only the receivers part (a batch against each real receiver's fake
    /// in the sink: GitHub, Discord (also as two `multi` channels), Telegram,
    /// Shopify, the IETF fields, an HTTP-date; its own Worker; about 2.5
    /// minutes). `LOADTEST_RECEIVERS=ietf,discord-multi` runs only those.
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_drainers", "only_answers", "only_flow", "only_backpressure", "only_learn"])]
    pub only_receivers: bool,
    /// Run only the waiting_on part (what holds each pending item, and the
    /// batch's counts; its own Worker).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe", "only_drainers", "only_answers", "only_flow", "only_backpressure", "only_learn"])]
    pub only_waiting: bool,
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
    if let Some(part) = Part::only(args) {
        return part.run(target, timeout, checks).await;
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
    Part::Drainers.run(target, timeout, checks).await;
    if target.url.is_some() {
        println!("# elastic-drain, flow-control, backpressure, learned-rates and waiting_on parts skipped: --url mode cannot start a Worker with its settings");
        println!(
            "# hello-kind and service parts skipped: --url mode runs only the Worker at that URL"
        );
        println!("# streak-reminder parts skipped: --url mode runs only the Worker at that URL");
        return;
    }
    // The example Workers after the flow parts, each on a runtime of its own
    // (`service`: cron-fanout and the TypeScript handler in one multi-worker
    // `wrangler dev`).
    for part in [
        Part::Elastic,
        Part::Flow,
        Part::Backpressure,
        Part::Learn,
        Part::Receivers,
        Part::Waiting,
        Part::HelloKind,
        Part::Service,
        Part::Streak,
        Part::StreakTs,
    ] {
        part.run(target, timeout, checks).await;
    }
}

/// The parts on a Worker of their own, each run alone by its `--only-…` flag;
/// the suite runs those from `Drainers` on after its own checks.
#[derive(Clone, Copy)]
enum Part {
    Dashboard,
    Probe,
    Answers,
    Drainers,
    Elastic,
    Flow,
    Backpressure,
    Learn,
    Receivers,
    Waiting,
    HelloKind,
    Streak,
    StreakTs,
    Service,
}

impl Part {
    /// The part the flags ask for alone, if any (the first, as clap lets some
    /// flags go together).
    fn only(args: &E2eArgs) -> Option<Part> {
        [
            (args.only_dashboard, Part::Dashboard),
            (args.only_probe, Part::Probe),
            (args.only_answers, Part::Answers),
            (args.only_drainers, Part::Drainers),
            (args.only_elastic, Part::Elastic),
            (args.only_flow, Part::Flow),
            (args.only_backpressure, Part::Backpressure),
            (args.only_learn, Part::Learn),
            (args.only_receivers, Part::Receivers),
            (args.only_waiting, Part::Waiting),
            (args.only_hello_kind, Part::HelloKind),
            (args.only_streak, Part::Streak),
            (args.only_streak_ts, Part::StreakTs),
            (args.only_service, Part::Service),
        ]
        .into_iter()
        .find_map(|(asked, part)| asked.then_some(part))
    }

    /// Its name in the line of a part that could not go on.
    fn name(self) -> &'static str {
        match self {
            Part::Dashboard => "dashboard part",
            Part::Probe => "probe part",
            Part::Answers => "endless-answers part",
            Part::Drainers => "drainers part",
            Part::Elastic => "elastic-drain part",
            Part::Flow => "flow-control part",
            Part::Backpressure => "backpressure part",
            Part::Learn => "learned-rates part",
            Part::Receivers => "receivers part",
            Part::Waiting => "waiting_on part",
            Part::HelloKind => "hello-kind part",
            Part::Streak => "streak-reminder part",
            Part::StreakTs => "streak-reminder-ts part",
            Part::Service => "service part",
        }
    }

    /// Runs the part; one failed check if it could not go on.
    async fn run(self, args: &TargetArgs, timeout: Duration, checks: &mut Checks) {
        let ran = match self {
            Part::Dashboard => dashboard_only(args, checks).await,
            Part::Probe => probe_only(args, checks).await,
            Part::Answers => answers_only(args, timeout, checks).await,
            Part::Drainers => drainers::e2e(args, timeout, checks).await,
            Part::Elastic => elastic::e2e(args, timeout, checks).await,
            Part::Flow => flow::e2e(args, timeout, checks).await,
            Part::Backpressure => backpressure::e2e(args, timeout, checks).await,
            Part::Learn => learn::e2e(args, timeout, checks).await,
            Part::Receivers => receivers::e2e(args, timeout, checks).await,
            Part::Waiting => waiting::e2e(args, timeout, checks).await,
            Part::HelloKind => hello_kind::e2e(args, timeout, checks).await,
            Part::Streak => streak::e2e(streak::App::Rust, args, timeout, checks).await,
            Part::StreakTs => streak::e2e(streak::App::Ts, args, timeout, checks).await,
            Part::Service => service::e2e(args, timeout, checks).await,
        };
        ran_to_completion(checks, self.name(), ran);
    }
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
    ui::dashboard(&target, args, checks).await
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

    bad_input::bad_input(&f.api, f.plan.len(), checks).await?;
    crate::e2e::limits::http(&f.api, checks).await?;

    // The edges: bodies, dispatch signatures, redirects, signing secrets.
    if f.target.runtime.is_some() {
        edges::streamed_bodies(&f.target, checks).await?;
        signing::dispatch_signatures(&f.target, checks).await?;
    } else {
        println!(
            "# streamed bodies and dispatch signatures skipped: --url mode has no secrets or log"
        );
    }
    edges::redirects(&f.target, f.timeout, checks).await?;
    signing::signing_secrets(&f.target, f.timeout, checks).await?;
    probe::e2e(&f.target, checks).await?;

    // The dashboard in a real browser.
    ui::dashboard(&f.target, &args.target, checks).await?;

    if args.skip_crash {
        println!("# crash scenario skipped (--skip-crash)");
    } else if f.target.runtime.is_none() {
        println!("# crash scenario skipped: --url mode cannot kill the runtime");
    } else {
        let timeout = Duration::from_secs(args.timeout_secs);
        crash::crash(
            &mut f.target,
            &f.plan,
            args.crash_latency_ms,
            timeout,
            checks,
        )
        .await?;
    }

    // Last: these restart the Worker with other settings.
    if f.target.runtime.is_some() {
        edges::endless_answers(&mut f.target, f.timeout, checks).await?;
        misconfig::restarted(&mut f.target, f.timeout, checks).await?;
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
    metrics::timeline_matches(&f.api, f.finished()?)
        .await
        .map_err(anyhow::Error::msg)
}

async fn metrics_plausible(f: &mut Suite<'_>) -> Result<()> {
    metrics::metrics_plausible(&f.api, &f.args.target.repo, f.finished()?)
        .await
        .map_err(anyhow::Error::msg)
}

/// Nothing new when the same occurrence fires again.
async fn refiring_creates_nothing(f: &mut Suite<'_>) -> Result<()> {
    f.api.put_schedule(E2E_SCHEDULE, &f.one_off).await?;
    steps::refire(&f.target, f.daily()?, f.delivered).await
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
