//! The only sources of time and randomness; `core` gets them as arguments.

pub fn now_ms() -> i64 {
    worker::js_sys::Date::now() as i64
}

/// A random id (UUID v4 from the platform's CSPRNG), for batch ids and lease tokens.
pub fn random_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Jitter in [0, 1) for retry backoff; needs no cryptographic quality.
pub fn jitter() -> f64 {
    worker::js_sys::Math::random()
}
