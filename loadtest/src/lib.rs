//! Load and end-to-end testing for cron-fanout.
//!
//! The `loadtest` binary drives a real Worker under `wrangler dev` (or an already
//! running one) and checks what it does from the outside: through its HTTP API and
//! through the webhooks it delivers to an in-process sink.
//!
//! - `signature`, `faults`: pure logic of the webhook receiver.
//! - `sink`: the webhook receiver itself (HTTP server) and its client.
//! - `runtime`: starting, killing and restarting `wrangler dev` on a local state dir.
//! - `api`: typed client of the Worker's HTTP API, including cron firing.
//! - `plan`: which subjects a scenario seeds and what each is expected to end as.
//! - `verdict`: pure checks of the observed end state against the plan.
//! - `checks`: the `ok - ` / `FAIL - ` report of the e2e suite.
//! - `clock`: the Worker's test clock (`TEST_CLOCK_OFFSET_MS`) seen from the harness.
//! - `drive`: firing ticks until a batch finishes (with a progress bar), ends or
//!   is called back.
//! - `steps`: a one-off schedule fired by the next tick, crash mid-batch, re-firing,
//!   a webhook batch, items by subject: shared by e2e, run and demo.
//! - `suite`: the e2e suite's Worker settings, shared by its parts.
//!
//! Helpers two parts share live in these shared modules, not in one of the parts,
//! so the imports form no circle (`tests/module_imports.rs` checks it); the
//! drivers `e2e` and `run` call the parts.
//! - `control`: pause, resume, cancel, replay and retention end to end:
//!   the e2e checks, the `cancel` and `replay` scenarios' flows, their verdicts.
//! - `delivery`: completion callbacks and multi-channel items end to end: the e2e checks, the `multi` scenario's flow, their verdicts.
//! - `edges`: the e2e checks of the HTTP and webhook edges: streamed bodies,
//!   dispatch signatures, redirects, signing secrets, private targets, misconfiguration.
//! - `limits`: `/limits` over HTTP: put, read, list, delete, bad limits refused,
//!   their gauges in `/metrics`.
//! - `drainers`: `DRAINERS=4` on the local queue end to end: a 10,000-item batch
//!   drained by queue consumers, and a drainer killed mid-run.
//! - `scenario`: what each `run` scenario seeds and configures.
//! - `metrics`: pure measurements (makespan, percentiles, per-item costs, ratios).
//! - `report`: a run's report and verdicts, as a table or JSON.
//! - `table`: aligned plain-text tables.
//! - `browser`: a headless Chromium over WebDriver (chromedriver + fantoccini),
//!   and the page checks the dashboard parts share (width, console errors).
//! - `ui`: the dashboard checked in that browser, and /metrics and the timeline over HTTP;
//!   `ui_actions`: its batch actions and schedules view; `ui_delivery`: completion
//!   callbacks and per-channel receipts on it; `ui_limits`: its limits view.
//! - `e2e`, `demo`, `run`, `bench`, `probe`: the subcommands built from the above
//!   (`e2e_schedules`: the schedules part of `e2e`, on a moving test clock), and
//!   `schedules`: what schedules cost the tick.

pub mod api;
pub mod backpressure;
pub mod backpressure_bench;
pub mod bench;
pub mod browser;
pub mod checks;
pub mod clock;
pub mod control;
pub mod control_bench;
pub mod delivery;
pub mod demo;
pub mod devvars;
pub mod drainers;
pub mod drive;
pub mod e2e;
pub mod e2e_schedules;
pub mod e2e_streak;
pub mod edges;
pub mod elastic;
pub mod faults;
pub mod flow;
pub mod hello_kind;
pub mod limits;
pub mod limits_bench;
pub mod metrics;
pub mod plan;
pub mod probe;
pub mod probe_analysis;
pub mod report;
pub mod run;
pub mod runtime;
pub mod scenario;
pub mod schedules;
pub mod service;
pub mod service_paths;
pub mod signature;
pub mod sink;
pub mod sink_fakes;
pub mod steps;
pub mod suite;
pub mod table;
pub mod target;
pub mod ui;
pub mod ui_actions;
pub mod ui_delivery;
pub mod ui_limits;
pub mod verdict;
