//! cron-fanout: a daily batch of independent items on Cloudflare Workers + D1.
//!
//! `core` is pure logic, `drain_loop` the drain's one loop over its ports, `sql`
//! the statements, `store` the queries over D1 (or SQLite on the host), `jobs`
//! what running an item means, `api` the HTTP routes and handlers (generic over
//! the store), and `edge` the only code that talks to the Workers runtime. A
//! Worker crate runs it all through [`Fanout`] from its own `#[event]` functions,
//! with job kinds of its own beside the built-in ones, host-tested with
//! `testing`.
//!
//! The API users build on, kept on purpose (CHANGELOG.md says what changed and
//! what to write instead; `scripts/public-api.sh` holds it to
//! docs/reference/public-api.txt): [`Fanout`], `DrainBatch`, `edge::start`,
//! `jobs`, `testing` and `core`. `api`, `drain_loop`, `sql` and `store` are public
//! for this workspace's own tests and harness only, hidden from the docs and free
//! to change.

#[doc(hidden)]
pub mod api;
pub mod core;
#[doc(hidden)]
pub mod drain_loop;
mod fanout;
pub mod jobs;
#[doc(hidden)]
pub mod sql;
#[doc(hidden)]
pub mod store;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

#[cfg(target_arch = "wasm32")]
pub mod edge;

#[cfg(target_arch = "wasm32")]
pub use fanout::DrainBatch;
pub use fanout::Fanout;
