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
//! - `e2e`, `demo`: the subcommands built from the above.

pub mod api;
pub mod checks;
pub mod demo;
pub mod devvars;
pub mod e2e;
pub mod faults;
pub mod plan;
pub mod runtime;
pub mod signature;
pub mod sink;
pub mod target;
pub mod verdict;
