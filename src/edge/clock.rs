//! The only sources of time and randomness; `core` gets them as arguments.
//!
//! Every instant the Worker reads is `Date.now()` plus this isolate's test clock
//! offset (`TEST_CLOCK_OFFSET_MS`, refused unless `ALLOW_TEST_CLOCK=true`; 0 in any
//! deployment), so a test runtime can run ticks "at" chosen instants: fires, leases,
//! `run_after` and deadlines all move together. Webhook signatures keep the real
//! time (`jobs::webhook`): the receiver checks them against its own clock.

use std::cell::Cell;

thread_local! {
    // Set once per isolate with its configuration (`edge::config`), which never
    // changes for the isolate's life.
    static OFFSET_MS: Cell<i64> = const { Cell::new(0) };
}

/// Install the configured test clock offset (0: the real clock).
pub fn set_offset(offset_ms: i64) {
    OFFSET_MS.with(|o| o.set(offset_ms));
}

pub fn now_ms() -> i64 {
    worker::js_sys::Date::now() as i64 + OFFSET_MS.with(Cell::get)
}

/// A random id (UUID v4 from the platform's CSPRNG), for batch ids and lease tokens.
pub fn random_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Jitter in [0, 1) for retry backoff; needs no cryptographic quality.
pub fn jitter() -> f64 {
    worker::js_sys::Math::random()
}
