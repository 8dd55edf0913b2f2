//! Security: signatures of deliveries and dispatches, secrets and their rules,
//! and the targets an item may reach (URL and SSRF rules). It imports only
//! `core`'s top.

pub mod secrets;
pub mod signature;
pub mod target;
