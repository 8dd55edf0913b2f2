//! The e2e suite's Worker settings (short timeouts, leases and backoff) and the
//! start of a Worker of a part's own on them, with an example Worker beside it.

use crate::driver::target::{Secrets, Target, TargetArgs};
use crate::runtime::wrangler::min_lease_seconds;
use anyhow::{ensure, Result};
use std::path::PathBuf;

/// Worker settings for the suite: short timeouts, leases and backoff so that
/// every path (retry, exhaustion, timeout, lease expiry) happens within seconds.
/// [`settings`] adds LEASE_SECONDS.
const BASE_SETTINGS: &[(&str, &str)] = &[
    ("MAX_ATTEMPTS", "3"),
    ("JOB_TIMEOUT_MS", "1000"),
    ("RETRY_BASE_MS", "100"),
    ("RETRY_MAX_MS", "400"),
    ("CLAIM_CHUNK", "50"),
    ("DISPATCH_CONCURRENCY", "25"),
    ("SUBREQUEST_BUDGET", "200"),
    ("INVOCATION_DEADLINE_MS", "15000"),
    // The sink listens on 127.0.0.1, a private target the Worker refuses by default.
    ("ALLOW_PRIVATE_TARGETS", "true"),
];

/// The suite's settings, with LEASE_SECONDS the smallest the Worker accepts for
/// them plus a second of slack for a loaded CI machine (`scenario::min_lease_seconds`,
/// the rule the scenarios use: 11 s, three calls of JOB_TIMEOUT_MS + 2 s grace plus
/// 1 s to commit, and the slack), so that lease expiry is observed quickly.
pub fn settings() -> Vec<(&'static str, String)> {
    let get = |name: &str| -> u64 {
        BASE_SETTINGS
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("the suite sets {name} to a number"))
    };
    let lease = min_lease_seconds(
        get("JOB_TIMEOUT_MS"),
        get("CLAIM_CHUNK"),
        get("DISPATCH_CONCURRENCY"),
    );
    BASE_SETTINGS
        .iter()
        .map(|(k, v)| (*k, v.to_string()))
        .chain([("LEASE_SECONDS", lease.to_string())])
        .collect()
}

/// Starts a fresh Worker of a part's own, named `name`: the suite's settings with
/// `more` over them, and `beside` (wrangler configs of Workers run next to it).
pub async fn open_worker(
    args: &TargetArgs,
    name: &str,
    more: impl IntoIterator<Item = (&'static str, String)>,
    beside: Vec<PathBuf>,
) -> Result<Target> {
    let mut settings = settings();
    settings.extend(more);
    let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Target::open_with_configs(args, name, &settings, Secrets::Random, true, beside).await
}

/// The wrangler config of the example Worker crate `dir` (relative to the repo),
/// once its build (`bash scripts/build.sh --dev <dir> build`) is there.
pub fn example_config(args: &TargetArgs, dir: &str) -> Result<PathBuf> {
    let build = format!("{dir}/build/index.js");
    ensure!(
        args.repo.join(&build).exists(),
        "{build} is missing: run `bash scripts/build.sh --dev {dir} build` first"
    );
    Ok(args.repo.canonicalize()?.join(dir).join("wrangler.toml"))
}
