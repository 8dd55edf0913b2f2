//! Batches and their items: the model every room shares (states, claimed items,
//! outcomes, transitions, tallies), what a request to create or change them may
//! say, control, completion callbacks, per-channel receipts, throughput, listing,
//! what a batch cost and the tick's upkeep. It imports `core`'s top, `schedule`
//! (a schedule's body), `flow` (limit keys, waiting reasons) and `security`
//! (callback targets); never the drain.

pub mod callback;
pub mod control;
pub mod cost;
pub mod fields;
pub mod listing;
pub mod model;
pub mod progress;
pub mod receipts;
pub mod requests;
pub mod rows;
pub mod throughput;
pub mod upkeep;
