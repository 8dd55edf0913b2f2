//! Load and end-to-end testing for cron-fanout.
//!
//! The `loadtest` binary drives a real Worker under `wrangler dev` (or an already
//! running one) and checks what it does from the outside: through its HTTP API and
//! through the webhooks it delivers to an in-process sink.
//!
//! One folder per thing the harness owns; each folder's `mod.rs` says what is in it.
//! Shared folders, each using only the ones before it:
//! - `sink`: the webhook receiver, its faults, signatures and API fakes.
//! - `runtime`: `wrangler dev`, the test clock, local secrets, the Worker's HTTP API.
//! - `driver`: the Worker and sink a command talks to, firing ticks, shared steps,
//!   plans and pure verdicts, the e2e report of named checks.
//! - `run`: one load scenario measured and reported (`loadtest run`), the
//!   scenarios' flows and verdicts the e2e checks share, cron-fanout beside the
//!   example service handler, and the demo.
//!
//! Parts, each a command, using the shared folders and never each other:
//! - `e2e`: the end-to-end suite and its parts (the dashboard in a browser among them).
//! - `bench`: `loadtest bench` and `loadtest schedules`.
//! - `probe`: `loadtest probe`.
//! - `api_listing`: `loadtest api-listing`, the library's public API as text.
//!
//! `tests/module_imports.rs` checks both rules, and that the imports form no circle.

pub mod api_listing;
pub mod bench;
pub mod driver;
pub mod e2e;
pub mod probe;
pub mod run;
pub mod runtime;
pub mod sink;
