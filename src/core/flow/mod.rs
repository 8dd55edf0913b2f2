//! Flow control: limit keys (GCRA rates, concurrency, partitions, pauses), the
//! views of them, learned rates, the receiver's word (how an answer says "slow
//! down") and why a pending item waits. It imports `batch` (the model) and
//! `core`'s top; never the drain.

pub mod gcra;
pub mod learn;
pub mod limit_view;
pub mod limits;
pub mod pace;
pub mod receiver;
pub mod waiting;
