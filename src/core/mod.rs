//! Pure logic: no `worker`, no clock, no randomness. Time (`now_ms`) and jitter are
//! arguments, so everything here is deterministic and unit-tested on the host.
//!
//! Rooms, each a folder that says what it owns: `drain` (the drain's machine and
//! its rules: budget, timing, watchdog, dispatch, retries, drainers' capacity),
//! `flow` (limits, learned rates, the receiver's word, why an item waits), `batch`
//! (batches and items: the model, requests, control, callbacks, receipts,
//! throughput, listing, cost, upkeep), `schedule`, `security` (signatures,
//! secrets, targets). Here at the top only what every room uses: settings,
//! metrics, time, errors, log limits. No room imports `store`, `sql`, `api`,
//! `jobs`, `edge` or `drain_loop` (`tests/module_imports.rs`).

pub mod batch;
pub mod drain;
pub mod error;
pub mod flow;
pub mod log_limit;
pub mod metrics;
pub mod schedule;
pub mod security;
pub mod settings;
pub mod time;

// The paths of before the rooms, kept for the library's users (CHANGELOG.md).
pub use self::batch::{callback, control, cost, listing, receipts, requests, throughput, upkeep};
pub use self::drain::{budget, dispatch, drainers, retry, timing, watchdog};
pub use self::flow::{learn, limit_view, limits, receiver, waiting};
pub use self::security::{secrets, signature, target};

/// `core::model` as it was: the batch room's model and its progress view.
pub mod model {
    pub use super::batch::model::*;
    pub use super::batch::progress::BatchProgress;
    pub use super::batch::rows::*;
}
