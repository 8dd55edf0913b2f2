//! What a kind reads from the Worker's own bindings, without `cfg` and without
//! the `worker` crate: a variable, a secret, a KV namespace. The outbound seam
//! carries them ([`super::Outbound::bindings`]): on the Worker the `Env` fills
//! them (`edge::outbound`), on the host `MemoryOutbound` does (set by the test,
//! or by `testing::Harness`). A kind asks through [`super::Context::var`],
//! [`super::Context::secret`] and [`super::Context::kv`]; anything else the `Env`
//! has stays behind `ctx.host::<worker::Env>()`.

use futures::future::LocalBoxFuture;

/// The Worker's bindings a kind may read.
pub trait Bindings {
    /// A `[vars]` value as text (a JSON var's JSON text); `None` when unset.
    fn var(&self, name: &str) -> Option<String>;

    /// A secret (`wrangler secret put`); `None` when unset.
    fn secret(&self, name: &str) -> Option<String>;

    /// The KV namespace bound as `name`; `None` when there is no such binding.
    fn kv(&self, name: &str) -> Option<Box<dyn Kv + '_>>;
}

/// A KV namespace, values as text. Every call is a subrequest of the run (to a
/// Cloudflare service): count them in `Job::subrequests_per_run`. KV is
/// eventually consistent across locations: a value written may be read stale
/// elsewhere for up to a minute.
pub trait Kv {
    /// The value of `key`, `None` when there is none.
    fn get<'a>(&'a self, key: &'a str) -> LocalBoxFuture<'a, Result<Option<String>, String>>;

    /// Set `key` to `value`.
    fn put<'a>(&'a self, key: &'a str, value: &'a str) -> LocalBoxFuture<'a, Result<(), String>>;

    /// Remove `key` (nothing when there is none).
    fn delete<'a>(&'a self, key: &'a str) -> LocalBoxFuture<'a, Result<(), String>>;
}
