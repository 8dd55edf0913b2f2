//! Settings and secrets read from the Worker's environment and validated once per
//! isolate, so a bad deploy fails loudly on its first request or tick.

use std::rc::Rc;

use worker::Env;

use super::{clock, log};
use crate::core::drain::drainers;
use crate::core::security::secrets::{self, Secrets};
use crate::core::settings::Settings;

/// The queue binding drainers are started through (`DRAINERS` > 1 or `auto`).
pub const DRAIN_QUEUE: &str = "DRAIN_QUEUE";

pub struct Config {
    pub settings: Settings,
    pub secrets: Secrets,
}

/// Why the configuration is unusable: `message` names the setting and the rule,
/// never a secret's value. `admin_token` is the admin token when that one is valid,
/// so an admin (and only an admin) can be told the detail (`api::misconfigured`).
#[derive(Clone)]
pub struct ConfigError {
    pub message: String,
    pub admin_token: Option<String>,
}

/// A secret (or, for local development, a plain var) by name.
fn text(env: &Env, name: &str) -> Option<String> {
    env.secret(name)
        .map(|s| s.to_string())
        .or_else(|_| env.var(name).map(|v| v.to_string()))
        .ok()
}

thread_local! {
    // An isolate's env never changes (new settings or secrets mean a new
    // deployment), so it is read once: every dispatched child would re-read it.
    static CACHED: std::cell::RefCell<Option<Rc<Config>>> = const { std::cell::RefCell::new(None) };
}

impl Config {
    /// The validated configuration of this isolate, read on first use.
    pub fn get(env: &Env) -> Result<Rc<Config>, ConfigError> {
        if let Some(cfg) = CACHED.with(|c| c.borrow().clone()) {
            return Ok(cfg);
        }
        let cfg = Rc::new(Config::load(env)?);
        let offset = cfg.settings.test_clock_offset_ms;
        clock::set_offset(offset);
        if offset != 0 {
            // Loud on purpose: a shifted clock must never go unnoticed.
            log::error(
                "test_clock",
                serde_json::json!({ "offset_ms": offset, "note": "TEST_CLOCK_OFFSET_MS is set: the queue's clock (fires, leases, run_after, stored times) is shifted (test runtimes only)" }),
            );
        }
        CACHED.with(|c| *c.borrow_mut() = Some(cfg.clone()));
        Ok(cfg)
    }

    fn load(env: &Env) -> Result<Config, ConfigError> {
        let lookup = |name: &str| text(env, name);
        let admin_token = secrets::read(&lookup, "ADMIN_TOKEN").ok();
        let fail = |message: String| ConfigError {
            message,
            admin_token: admin_token.clone(),
        };
        let settings = Settings::from_lookup(lookup).map_err(fail)?;
        // Drainers need the queue: without it the ticks would send nothing and
        // drain nothing, so the deployment refuses to run instead.
        if settings.drainers.use_queue() {
            if let Err(e) = env.queue(DRAIN_QUEUE) {
                return Err(fail(drainers::missing_queue(
                    &settings.drainers.value(),
                    &e.to_string(),
                )));
            }
        }
        Ok(Config {
            settings,
            secrets: Secrets::from_lookup(lookup).map_err(fail)?,
        })
    }
}
