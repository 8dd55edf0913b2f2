//! Pure logic: no `worker`, no clock, no randomness. Time (`now_ms`) and jitter are
//! arguments, so everything here is deterministic and unit-tested on the host.

pub mod budget;
pub mod callback;
pub mod control;
pub mod cost;
pub mod dispatch;
pub mod drain;
pub mod drainers;
pub mod error;
pub mod learn;
pub mod limit_view;
pub mod limits;
pub mod listing;
pub mod log_limit;
pub mod metrics;
pub mod model;
pub mod pace;
pub mod receipts;
pub mod receiver;
pub mod requests;
pub mod retry;
pub mod schedule;
pub mod secrets;
pub mod settings;
pub mod signature;
pub mod target;
pub mod throughput;
pub mod time;
pub mod timing;
pub mod upkeep;
pub mod waiting;
pub mod watchdog;
