//! `loadtest`: webhook sink, end-to-end suite and demo for cron-fanout.
//! See the library docs (`src/lib.rs`) for how the pieces fit.

use anyhow::Result;
use clap::{Parser, Subcommand};
use loadtest::{api_listing, bench, bench::schedules, e2e, probe, run, run::demo, sink};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "loadtest",
    version,
    about = "Load and end-to-end tests for cron-fanout"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the webhook sink alone (what every scenario embeds) until Ctrl-C.
    Sink {
        /// Port on 127.0.0.1 (0 = any free port).
        #[arg(long, default_value_t = 8788)]
        port: u16,
        /// WEBHOOK_SECRET the Worker signs deliveries with.
        #[arg(long, env = "LOADTEST_WEBHOOK_SECRET", hide_env_values = true)]
        webhook_secret: String,
        /// Emulate the platform's connection cap: at most this many requests in
        /// flight per `Fanout-Invocation` value, the rest waiting (6 on the
        /// platform). Requests without the header are not capped. Default: off.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        connection_cap: Option<u32>,
    },
    /// The end-to-end suite (CI): prints `ok - `/`FAIL - ` lines and
    /// `N passed, M failed`; exits non-zero on any failure.
    E2e(e2e::E2eArgs),
    /// Start the Worker, seed subjects, run a batch with a progress bar.
    Demo(demo::DemoArgs),
    /// One load scenario on a fresh runtime: report and verdicts; exits
    /// non-zero when a verdict fails.
    Run(run::RunArgs),
    /// Fan-out vs inline vs raw SELF rate, latency-bound makespan, batch init
    /// and progress-read timings, each on a fresh runtime.
    Bench(bench::BenchArgs),
    /// How many SELF calls one invocation can make (locally or on --url).
    Probe(probe::ProbeArgs),
    /// What schedules cost the tick: idle ticks with and without 1,000 idle
    /// schedules, 1 vs 100 due at once, 100 due over subjects; with verdicts.
    Schedules(schedules::SchedulesArgs),
    /// The library's public API, a line per item, from rustdoc's JSON
    /// (`scripts/public-api.sh` compares it with docs/reference/public-api.txt).
    ApiListing {
        /// rustdoc's JSON of the library (`target/doc/cron_fanout.json`).
        json: std::path::PathBuf,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Dropping the command's future on a signal runs the destructors that stop
    // wrangler dev (it lives in its own process group, so the terminal's Ctrl-C
    // does not reach it).
    tokio::select! {
        code = run(cli.command) => code,
        signal = shutdown_signal() => {
            eprintln!("loadtest: {signal}, stopping");
            ExitCode::from(130)
        }
    }
}

async fn run(command: Command) -> ExitCode {
    let result: Result<bool> = match command {
        Command::Sink {
            port,
            webhook_secret,
            connection_cap,
        } => serve_sink(port, &webhook_secret, connection_cap)
            .await
            .map(|()| true),
        Command::E2e(args) => Ok(e2e::run(args).await),
        Command::Demo(args) => demo::run(args).await.map(|()| true),
        Command::Run(args) => run::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Probe(args) => probe::run(args).await,
        Command::Schedules(args) => schedules::run(args).await,
        Command::ApiListing { json } => print_listing(&json),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("loadtest: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve_sink(port: u16, webhook_secret: &str, connection_cap: Option<u32>) -> Result<()> {
    let handle = sink::start(port, webhook_secret).await?;
    if connection_cap.is_some() {
        sink::SinkClient::new(&handle.url())
            .set_connection_cap(connection_cap)
            .await?;
        eprintln!(
            "connection cap: {} requests in flight per Fanout-Invocation",
            connection_cap.unwrap_or_default()
        );
    }
    println!(
        "sink listening on {} (POST /hook/<subject>?<faults>, GET /stats, POST /reset)",
        handle.url()
    );
    // Serves until the signal branch in `main` ends the process.
    std::future::pending::<()>().await;
    Ok(())
}

fn print_listing(json: &std::path::Path) -> Result<bool> {
    let text =
        std::fs::read_to_string(json).map_err(|e| anyhow::anyhow!("{}: {e}", json.display()))?;
    for line in api_listing::listing(&text)? {
        println!("{line}");
    }
    Ok(true)
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM (CI timeouts), naming which.
async fn shutdown_signal() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted",
        _ = term.recv() => "terminated",
    }
}
