//! cron-fanout: a daily batch of independent items on Cloudflare Workers + D1.
//!
//! `core` is pure logic, `drain_loop` the drain's one loop over its ports, `sql`
//! the statements, `store` the queries over D1 (or SQLite on the host), `jobs`
//! what running an item means, `api` the HTTP routes and handlers (generic over
//! the store), and `edge` the only code that talks to the Workers runtime.

pub mod api;
pub mod core;
pub mod drain_loop;
pub mod jobs;
pub mod sql;
pub mod store;

#[cfg(target_arch = "wasm32")]
mod edge;
