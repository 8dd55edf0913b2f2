//! cron-fanout: a daily batch of independent items on Cloudflare Workers + D1.
//!
//! `core` is pure logic, `drain_loop` the drain's one loop over its ports, `sql`
//! the statements, `store` the queries over D1 (or SQLite on the host), `jobs`
//! what running an item means, `api` the HTTP routes and handlers (generic over
//! the store), and `edge` the only code that talks to the Workers runtime. A
//! Worker crate runs it all through [`Fanout`] from its own `#[event]` functions,
//! with job kinds of its own beside the built-in ones, host-tested with
//! `testing`.

pub mod api;
pub mod core;
pub mod drain_loop;
mod fanout;
pub mod jobs;
pub mod sql;
pub mod store;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

#[cfg(target_arch = "wasm32")]
pub mod edge;

#[cfg(target_arch = "wasm32")]
pub use fanout::DrainBatch;
pub use fanout::Fanout;
