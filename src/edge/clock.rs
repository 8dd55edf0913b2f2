//! The only sources of time and randomness; `core` gets them as arguments.
//!
//! The queue's clock ([`now_ms`]) is `Date.now()` plus this isolate's test clock
//! offset (`TEST_CLOCK_OFFSET_MS`, refused unless `ALLOW_TEST_CLOCK=true`; 0 in any
//! deployment), so a test runtime can run ticks "at" chosen instants: fires, leases,
//! `run_after`, deadlines and every stored time move together. Signature
//! timestamps and log rate limits read the real time ([`wall_ms`]): another party
//! checks a signature against its own clock (webhook receivers, and whoever signs a
//! dispatch), and a rate is about real seconds.

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

/// The queue's clock: the real time plus the test clock's offset.
pub fn now_ms() -> i64 {
    wall_ms() + OFFSET_MS.with(Cell::get)
}

/// The real time, never shifted: for signatures and log rate limits.
pub fn wall_ms() -> i64 {
    worker::js_sys::Date::now() as i64
}

/// A random id (UUID v4 from the platform's CSPRNG, 32 hex digits), for
/// invocation ids.
pub fn random_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The first 16 hex digits of a UUID v4 (60 random bits: one digit is its
/// version), for what every item row stores: its batch's id and its lease token's
/// prefix. 16 bytes less per row, and still no clash in practice (about 1 in 2
/// million for a million batches; a token only has to differ from the same
/// item's other claims).
pub fn short_id() -> String {
    random_id()[..16].to_string()
}

/// Jitter in [0, 1) for retry backoff; needs no cryptographic quality.
pub fn jitter() -> f64 {
    worker::js_sys::Math::random()
}
