//! `loadtest e2e`: the end-to-end suite CI runs against a real Worker.
//!
//! It seeds subjects whose webhooks succeed, fail for a while, fail for good or
//! hang; saves a one-off schedule due now and fires tick crons the way production
//! does, so the first tick creates the batch (schedules are all the Worker has: no
//! daily cron); and checks the end state through the API and the sink, the
//! timeline and /metrics. Then it fires the same occurrence again (nothing new),
//! sends bad input, drives the dashboard in a headless Chromium (`ui`), crashes
//! the runtime mid-batch, and runs the schedules part (`e2e_schedules`: time zones,
//! intervals, one-offs and the missed daily batch, on a test clock). Waits are on
//! observable state with bounded timeouts; the only pause is the pacing between
//! tick rounds, so an idle tick does not spin.

use crate::api::{Api, Batch, Invocation, SubjectIn, TICK_CRON};
use crate::checks::{text, Checks};
use crate::drive;
use crate::plan::{self, Expect, Mix, Planned};
use crate::steps::items_by_subject;
use crate::suite::settings;
use crate::target::{Secrets, Target, TargetArgs};
use crate::{control, delivery, edges, probe, sink, steps, ui, verdict};
use anyhow::{bail, ensure, Context, Result};
use cron_fanout::core::time::rfc3339;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
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
    /// Run only the `service` part (cron-fanout and the example TypeScript
    /// handler in one multi-worker `wrangler dev`).
    #[arg(long, conflicts_with_all = ["only_control", "only_delivery", "only_dashboard", "only_probe"])]
    pub only_service: bool,
}

/// Runs the suite, printing one line per check and the closing
/// `N passed, M failed`. Returns whether everything passed.
pub async fn run(args: E2eArgs) -> bool {
    let mut checks = Checks::default();
    if args.only_dashboard {
        if let Err(e) = dashboard_only(&args.target, &mut checks).await {
            checks.record("dashboard part ran to completion", Err(format!("{e:#}")));
        }
        println!("{}", checks.summary());
        return checks.all_passed();
    }
    if args.only_probe {
        if let Err(e) = probe_only(&args.target, &mut checks).await {
            checks.record("probe part ran to completion", Err(format!("{e:#}")));
        }
        println!("{}", checks.summary());
        return checks.all_passed();
    }
    let timeout = Duration::from_secs(args.timeout_secs);
    if args.only_drainers {
        if let Err(e) = crate::drainers::e2e(&args.target, timeout, &mut checks).await {
            checks.record("drainers part ran to completion", Err(format!("{e:#}")));
        }
        println!("{}", checks.summary());
        return checks.all_passed();
    }
    if args.only_hello_kind {
        hello_kind_part(&args.target, timeout, &mut checks).await;
        println!("{}", checks.summary());
        return checks.all_passed();
    }
    if args.only_streak {
        streak_part(&args.target, timeout, &mut checks).await;
        println!("{}", checks.summary());
        return checks.all_passed();
    }
    if args.only_service {
        service_part(&args.target, timeout, &mut checks).await;
        println!("{}", checks.summary());
        return checks.all_passed();
    }
    let only_one_part = args.only_control || args.only_delivery;
    if !only_one_part {
        if let Err(e) = suite(&args, &mut checks).await {
            checks.record("suite ran to completion", Err(format!("{e:#}")));
        }
    }
    if !only_one_part || args.only_control {
        if let Err(e) = control::e2e(&args.target, timeout, &mut checks).await {
            checks.record(
                "batch-control part ran to completion",
                Err(format!("{e:#}")),
            );
        }
    }
    if !only_one_part || args.only_delivery {
        if let Err(e) = delivery::e2e(&args.target, timeout, &mut checks).await {
            checks.record("delivery part ran to completion", Err(format!("{e:#}")));
        }
    }
    if !only_one_part {
        if let Err(e) = crate::drainers::e2e(&args.target, timeout, &mut checks).await {
            checks.record("drainers part ran to completion", Err(format!("{e:#}")));
        }
        if args.target.url.is_some() {
            println!("# hello-kind and service parts skipped: --url mode runs only the Worker at that URL");
        } else {
            hello_kind_part(&args.target, timeout, &mut checks).await;
            service_part(&args.target, timeout, &mut checks).await;
        }
        if args.target.url.is_some() {
            println!("# streak-reminder part skipped: --url mode runs only the Worker at that URL");
        } else {
            streak_part(&args.target, timeout, &mut checks).await;
        }
    }
    println!("{}", checks.summary());
    checks.all_passed()
}

/// The Worker crate of `examples/hello-kind`, on a runtime of its own.
async fn hello_kind_part(args: &TargetArgs, timeout: Duration, checks: &mut Checks) {
    if let Err(e) = crate::hello_kind::e2e(args, timeout, checks).await {
        checks.record("hello-kind part ran to completion", Err(format!("{e:#}")));
    }
}

/// The Worker crate of `examples/streak-reminder`, on a runtime of its own.
async fn streak_part(args: &TargetArgs, timeout: Duration, checks: &mut Checks) {
    if let Err(e) = crate::e2e_streak::e2e(args, timeout, checks).await {
        checks.record(
            "streak-reminder part ran to completion",
            Err(format!("{e:#}")),
        );
    }
}

/// `service` items: cron-fanout and the example TypeScript handler in one
/// multi-worker `wrangler dev`.
async fn service_part(args: &TargetArgs, timeout: Duration, checks: &mut Checks) {
    if let Err(e) = crate::service::e2e(args, timeout, checks).await {
        checks.record("service part ran to completion", Err(format!("{e:#}")));
    }
}

/// The dashboard's browser part alone, on a Worker of its own.
async fn dashboard_only(args: &TargetArgs, checks: &mut Checks) -> Result<()> {
    let settings = settings();
    let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let target = Target::open(args, "e2e-dashboard", &settings, Secrets::Random, true)
        .await
        .context("starting the dashboard's Worker")?;
    ui::dashboard(&target, &args.repo, checks).await
}

/// The probe's modes alone, on a Worker of its own.
async fn probe_only(args: &TargetArgs, checks: &mut Checks) -> Result<()> {
    let settings = settings();
    let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let target = Target::open(args, "e2e-probe", &settings, Secrets::Random, true)
        .await
        .context("starting the probe's Worker")?;
    probe::e2e(&target, checks).await
}

async fn suite(args: &E2eArgs, checks: &mut Checks) -> Result<()> {
    let settings = settings();
    let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // A rotation under way: dispatches signed with the previous secret still run.
    let mut target_args = args.target.clone();
    if !target_args
        .vars
        .iter()
        .any(|(k, _)| k == "DISPATCH_SECRET_PREVIOUS")
    {
        target_args.vars.push((
            "DISPATCH_SECRET_PREVIOUS".into(),
            crate::devvars::random_secret(),
        ));
    }
    let mut target = Target::open(&target_args, "e2e", &settings, Secrets::Random, true)
        .await
        .context("starting the Worker and the sink")?;
    checks.record(
        "runtime and sink started, GET /health answers {\"ok\":true}",
        target.api.health().await.map_err(text),
    );
    let max_attempts = u32::try_from(target.setting("MAX_ATTEMPTS")?)?;
    ensure!(
        max_attempts >= 3,
        "MAX_ATTEMPTS must be >= 3 for fail_first=2 to complete"
    );
    ensure!(
        args.hang_ms > target.setting("JOB_TIMEOUT_MS")?,
        "--hang-ms must exceed JOB_TIMEOUT_MS"
    );
    let timeout = Duration::from_secs(args.timeout_secs);
    let api = target.api.clone();

    // Seed.
    let plan = plan::e2e(
        "e2e",
        Mix {
            total: args.subjects,
            ..Mix::E2E
        },
        args.hang_ms,
    );
    let subjects: Vec<SubjectIn> = plan
        .iter()
        .enumerate()
        .map(|(n, p)| p.subject(&target.sink, n))
        .collect();
    checks.record(
        "PUT /subjects upserts every subject (chunks of 250)",
        seed(&api, &subjects).await.map_err(text),
    );

    // The batch: a one-off schedule fired by ticks. (`daily` would fire over the
    // same subjects after 12:00 UTC; the schedules part tests it on a test clock.)
    api.delete_schedule("daily").await?;
    let (one_off, daily) = scheduled_batch(&api, plan.len(), checks).await?;
    let finished = drive::in_pairs(&api, &daily.id, timeout, "batch").await;
    let finished = checks.step(
        "the batch finishes while tick crons fire (2 at a time)",
        finished,
    );
    let items = items_by_subject(&api, &daily.id).await?;
    checks.record(
        "GET /batches/{id}/items lists one item per subject",
        if items.len() == plan.len() {
            Ok(())
        } else {
            Err(format!("{} items for {} subjects", items.len(), plan.len()))
        },
    );
    let stats = target.sink.stats(true).await?;
    let all_deliveries = stats.deliveries.unwrap_or_default();
    let by_item = verdict::deliveries_by_item(&all_deliveries, &daily.id.0);
    let kinds = [
        (
            Expect::Healthy,
            "healthy subjects: completed on attempt 1 after exactly one delivery".to_string(),
        ),
        (
            Expect::FailFirst(2),
            "fail_first=2 subjects: completed on attempt 3 after 3 deliveries".into(),
        ),
        (
            Expect::ServerError,
            format!(
                "status=500 subjects: failed on attempt {max_attempts}, last_error mentions 500"
            ),
        ),
        (
            Expect::ClientError,
            "status=400 subjects: failed on attempt 1 (permanent), last_error mentions 400".into(),
        ),
        (
            Expect::Hang,
            format!("hanging subject: failed on attempt {max_attempts} with a timeout reason"),
        ),
    ];
    for (kind, name) in kinds {
        checks.record(
            &name,
            verdict::outcomes_of_kind(&plan, kind, max_attempts, &items, &by_item),
        );
    }
    if let Some(b) = &finished {
        let failed = plan
            .iter()
            .filter(|p| {
                matches!(
                    p.expect,
                    Expect::ServerError | Expect::ClientError | Expect::Hang
                )
            })
            .count() as u64;
        let total = plan.len() as u64;
        checks.record(
            "batch counts add up: pending+processing+completed+failed = total, 100%, finished_at set",
            verdict::batch_counts(b, total, total - failed, failed),
        );
    }
    let refs: Vec<_> = all_deliveries.iter().collect();
    checks.record(
        "every delivery has a valid signature and Idempotency-Key = item_id",
        verdict::deliveries_well_formed(&refs),
    );
    let expected: HashMap<String, String> = subjects
        .iter()
        .map(|s| (s.id.clone(), sink::data_digest(&s.payload["data"])))
        .collect();
    checks.record(
        &format!(
            "every delivery carried its subject's data intact (non-ASCII in all, over 8 KiB in 1 of {}: short and long items, both in the dispatch body)",
            plan::BIG_DATA_EVERY
        ),
        verdict::data_intact(&expected, &refs),
    );
    let invocations = api.invocations(1000).await?;
    checks.record(
        "no invocation used more subrequests than its budget",
        verdict::within_budget(&invocations),
    );
    // The suite keeps the Worker's default cap: the healthy items above completed
    // on attempt 1 although no tick could dispatch them all.
    let cap = worker_default_cap();
    checks.record(
        &format!("with the default MAX_CHILD_INVOCATIONS ({cap}) no tick dispatched more than {cap} items, and later ticks drained the rest"),
        verdict::within_child_cap(&invocations, cap),
    );

    // What the dashboard and a Prometheus scrape read, after a real run.
    if let Some(b) = &finished {
        checks.record(
            "GET /batches/{id}/timeline adds up to the finished batch's counters; its rate and ETA are null",
            ui::timeline_matches(&api, b).await,
        );
        checks.record(
            "GET /metrics has every metric docs/api.md names, with plausible values",
            ui::metrics_plausible(&api, &args.target.repo, b).await,
        );
    }

    // Re-fire: nothing new.
    let refired = async {
        api.put_schedule(E2E_SCHEDULE, &one_off).await?;
        steps::refire(&target, &daily, stats.total).await
    };
    checks.record(
        "firing the same occurrence again (the one-off saved again, ticks and `0 12 * * *` — now just a tick — fired) creates no batch and no delivery",
        refired.await.map_err(text),
    );

    // Bad input.
    bad_input(&api, plan.len(), checks).await?;

    // The edges: bodies, dispatch signatures, redirects, signing secrets.
    if target.runtime.is_some() {
        edges::streamed_bodies(&target, checks).await?;
        edges::dispatch_signatures(&target, checks).await?;
    } else {
        println!(
            "# streamed bodies and dispatch signatures skipped: --url mode has no secrets or log"
        );
    }
    edges::redirects(&target, timeout, checks).await?;
    edges::signing_secrets(&target, timeout, checks).await?;
    probe::e2e(&target, checks).await?;

    // The dashboard in a real browser.
    ui::dashboard(&target, &args.target.repo, checks).await?;

    // Crash.
    if args.skip_crash {
        println!("# crash scenario skipped (--skip-crash)");
    } else if target.runtime.is_none() {
        println!("# crash scenario skipped: --url mode cannot kill the runtime");
    } else {
        crash(&mut target, &plan, args, checks).await?;
    }

    // Last: these restart the Worker with other settings.
    if target.runtime.is_some() {
        edges::restarted(&mut target, timeout, checks).await?;
    } else {
        println!(
            "# private targets and misconfiguration skipped: --url mode cannot restart the Worker"
        );
    }

    let local = target.runtime.is_some();
    target.stop_checked("", checks).await;

    // Schedules: a runtime of its own, restarted at chosen instants.
    if args.skip_schedules {
        println!("# schedules part skipped (--skip-schedules)");
    } else if !local {
        println!("# schedules part skipped: --url mode cannot move the Worker's clock");
    } else {
        crate::e2e_schedules::run(&args.target, checks).await?;
    }
    Ok(())
}

async fn seed(api: &Api, subjects: &[SubjectIn]) -> Result<()> {
    let mut upserted = 0;
    for chunk in subjects.chunks(250) {
        upserted += api.put_subjects(chunk).await?;
    }
    ensure!(
        upserted == subjects.len() as u64,
        "upserted {upserted} of {}",
        subjects.len()
    );
    let listed = api.all_subjects().await?.len();
    ensure!(
        listed == subjects.len(),
        "GET /subjects lists {listed}, want {}",
        subjects.len()
    );
    Ok(())
}

/// The one-off schedule the suite's batch is fired with.
const E2E_SCHEDULE: &str = "e2e";

/// Saves a one-off schedule due now, fires two tick crons at once (they race for
/// it) and finds the one batch they created; returns the schedule's body too.
async fn scheduled_batch(api: &Api, total: usize, checks: &mut Checks) -> Result<(Value, Batch)> {
    let (body, key) = steps::one_off_now(api, E2E_SCHEDULE).await?;
    let (a, b) = tokio::join!(api.fire_cron(TICK_CRON), api.fire_cron(TICK_CRON));
    a?;
    b?;
    let found: Vec<Batch> = api
        .batches(100)
        .await?
        .into_iter()
        .filter(|b| b.key.as_deref() == Some(key.as_str()))
        .collect();
    let result = match found.as_slice() {
        [b] if b.total == total as u64 => Ok(()),
        [b] => Err(format!(
            "batch {} has total {}, want {total}",
            b.id, b.total
        )),
        [] => Err(format!("no batch with key {key:?} in GET /batches")),
        many => Err(format!("{} batches with key {key:?}", many.len())),
    };
    let name = format!(
        "a one-off schedule due now: two racing ticks create exactly one batch {key} over all {total} subjects"
    );
    if !checks.record(&name, result) && found.is_empty() {
        bail!("no batch to follow");
    }
    Ok((body, found[0].clone()))
}

/// Bad requests get a 4xx with the JSON error shape and change nothing.
async fn bad_input(api: &Api, subjects: usize, checks: &mut Checks) -> Result<()> {
    let expect =
        |r: crate::api::RawResponse, status: StatusCode, shape: bool| -> Result<(), String> {
            if r.status != status {
                return Err(format!(
                    "got {} {}, want {status}",
                    r.status,
                    crate::api::clip(&r.body)
                ));
            }
            if shape && r.error_shape().is_none() {
                return Err(format!(
                    "body is not {{\"error\":{{\"code\",\"message\"}}}}: {}",
                    crate::api::clip(&r.body)
                ));
            }
            Ok(())
        };
    let wrong = api
        .raw(Method::GET, "/subjects", Some("wrong-token"), None)
        .await?;
    checks.record(
        "wrong admin token: 401 with a JSON error",
        expect(wrong, StatusCode::UNAUTHORIZED, true),
    );
    let none = api
        .raw(
            Method::PUT,
            "/subjects",
            None,
            Some(r#"{"subjects":[]}"#.into()),
        )
        .await?;
    checks.record(
        "no admin token: 401 with a JSON error",
        expect(none, StatusCode::UNAUTHORIZED, true),
    );
    let malformed = api
        .admin_raw(
            Method::PUT,
            "/subjects",
            Some(r#"{"subjects": [{"id": "x""#.into()),
        )
        .await?;
    checks.record(
        "malformed JSON to PUT /subjects: 400 {\"error\":{code,message}}",
        expect(malformed, StatusCode::BAD_REQUEST, true),
    );
    let bad_url = json!({"subjects": [{"id": "bad-url", "kind": "webhook", "payload": {"url": "ftp://127.0.0.1/x"}, "active": true}]});
    let bad_url = api
        .admin_raw(Method::PUT, "/subjects", Some(bad_url.to_string()))
        .await?;
    checks.record(
        "non-http webhook url: 400 with a JSON error",
        expect(bad_url, StatusCode::BAD_REQUEST, true),
    );
    let run = json!({"item_id": 1, "lease_token": "x", "batch_id": "x", "subject_id": "x", "attempt": 1, "kind": "webhook", "payload": {}});
    let unsigned = api
        .raw(Method::POST, "/internal/run", None, Some(run.to_string()))
        .await?;
    checks.record(
        "unsigned POST /internal/run: 401",
        expect(unsigned, StatusCode::UNAUTHORIZED, false),
    );
    // The same item after a signature line made with another secret: refused
    // like the unsigned one.
    let forged_sig = crate::signature::sign(
        b"not-the-dispatch-secret",
        chrono::Utc::now().timestamp(),
        run.to_string().as_bytes(),
    );
    let forged = api
        .raw(
            Method::POST,
            "/internal/run",
            None,
            Some(format!("{forged_sig}\n{run}")),
        )
        .await?;
    checks.record(
        "POST /internal/run with a forged signature line: 401",
        expect(forged, StatusCode::UNAUTHORIZED, false),
    );
    let batches_before = api.batches(1000).await?.len();
    for case in more_bad_input() {
        let r = api.admin_raw(case.method, case.path, case.body).await?;
        let got = r.error_shape().map(|(c, _)| c);
        checks.record(
            &format!("{}: {} {}", case.name, case.status, case.code),
            expect(r, case.status, true).and_then(|()| match got.as_deref() {
                Some(c) if c == case.code => Ok(()),
                other => Err(format!("error code {other:?}, want {:?}", case.code)),
            }),
        );
    }
    let after = api.all_subjects().await?;
    let batches_after = api.batches(1000).await?.len();
    checks.record(
        "bad input changed nothing: GET /subjects and GET /batches counts unchanged",
        if after.len() == subjects
            && after.iter().all(|s| s.id != "bad-url")
            && batches_after == batches_before
        {
            Ok(())
        } else {
            Err(format!(
                "{} subjects (want {subjects}), {batches_after} batches (want {batches_before})",
                after.len()
            ))
        },
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
    let body = json!({"key": key, "source": "subjects"});
    let (created, batch) = api.create_batch(&body).await?;
    checks.record(
        "POST /batches creates an ad-hoc batch (201) over all subjects",
        if created && batch.total == plan.len() as u64 {
            Ok(())
        } else {
            Err(format!("created {created}, total {}", batch.total))
        },
    );
    let (created_again, again) = api.create_batch(&body).await?;
    checks.record(
        "POST /batches with an existing key returns that batch (200)",
        if !created_again && again.id == batch.id {
            Ok(())
        } else {
            Err(format!(
                "created {created_again}, id {} vs {}",
                again.id, batch.id
            ))
        },
    );
    let known = api.invocation_ids().await?;

    let at_kill =
        steps::kill_mid_batch(target, &batch.id, Duration::from_secs(args.timeout_secs)).await?;
    let runtime = target.runtime.as_mut().context("no local runtime")?;
    eprintln!("  [crash] killed with {}", at_kill.progress());
    checks.step(
        "runtime restarts on the same state dir after SIGKILL",
        runtime.restart().await,
    );

    // Nothing has run since the restart, so the counts are those at the kill.
    let frozen = api.batch(&batch.id).await?;
    let processing_at_kill = frozen.processing;
    eprintln!("  [crash] after restart: {}", frozen.progress());
    checks.record(
        "crash hit items in flight (processing > 0 after restart)",
        if processing_at_kill > 0 {
            Ok(())
        } else {
            Err(frozen.progress())
        },
    );

    let finished = drive::in_pairs(
        &api,
        &batch.id,
        Duration::from_secs(args.timeout_secs),
        "crash",
    )
    .await;
    checks.step(
        "crash batch finishes after restart while ticks fire",
        finished,
    );
    let items = items_by_subject(&api, &batch.id).await?;
    let stats = target.sink.stats(true).await?;
    let deliveries = stats.deliveries.unwrap_or_default();
    let by_item = verdict::deliveries_by_item(&deliveries, &batch.id.0);
    for (name, result) in verdict::crash_recovery(&slow, &items, &by_item, processing_at_kill) {
        checks.record(name, result);
    }
    let invocations = api.invocations(1000).await?;
    let since_crash: Vec<&Invocation> = invocations
        .iter()
        .filter(|i| !known.contains(&i.id))
        .collect();
    // What each scheduled run did since the crash, oldest first: the evidence
    // for the two checks below when they fail.
    for Invocation { id, summary: i } in since_crash.iter().rev() {
        let t = &i.tally;
        eprintln!(
            "  [crash] invocation {id} {} at {} {} ms: claimed {} completed {} retried {} failed {} lost_leases {} released {} reaped {} subrequests {}/{}",
            i.trigger.as_str(), rfc3339(i.started_at), i.elapsed_ms, t.claimed, t.completed, t.retried,
            t.failed, t.lost_leases, t.released, t.reaped, i.subrequests, i.subrequest_budget
        );
    }
    let reaped: i64 = since_crash.iter().map(|i| i.summary.tally.reaped).sum();
    checks.record(
        "crash: the reaper requeued exactly the leases left by the crash",
        if u64::try_from(reaped) == Ok(processing_at_kill) {
            Ok(())
        } else {
            Err(format!(
                "invocations report {reaped} reaped, {processing_at_kill} were processing"
            ))
        },
    );
    checks.record(
        "crash: no invocation used more subrequests than its budget",
        verdict::within_budget(&invocations),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(s[lease].1, "11");
        // One second less is the bare minimum, two less is refused.
        s[lease].1 = "10".into();
        assert!(parse(&s).is_ok());
        s[lease].1 = "9".into();
        assert!(parse(&s).unwrap_err().starts_with("LEASE_SECONDS"));
    }
}
