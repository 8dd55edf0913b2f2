//! Settings and secrets read from the Worker's environment and validated once per
//! isolate, so a bad deploy fails loudly on its first request or tick.

use std::rc::Rc;

use worker::Env;

use crate::core::settings::Settings;

pub struct Config {
    pub settings: Settings,
    pub admin_token: String,
    pub dispatch_secret: String,
    pub webhook_secret: String,
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
    pub fn get(env: &Env) -> Result<Rc<Config>, String> {
        if let Some(cfg) = CACHED.with(|c| c.borrow().clone()) {
            return Ok(cfg);
        }
        let cfg = Rc::new(Config::load(env)?);
        CACHED.with(|c| *c.borrow_mut() = Some(cfg.clone()));
        Ok(cfg)
    }

    /// The error names the missing or invalid setting, never a secret's value.
    fn load(env: &Env) -> Result<Config, String> {
        let settings = Settings::from_lookup(|name| text(env, name))?;
        let secret = |name: &str| -> Result<String, String> {
            match text(env, name) {
                Some(v) if v.len() >= 16 => Ok(v),
                Some(_) => Err(format!("secret {name} must be at least 16 characters")),
                None => Err(format!(
                    "secret {name} is not set (wrangler secret put {name}, or .dev.vars locally)"
                )),
            }
        };
        Ok(Config {
            settings,
            admin_token: secret("ADMIN_TOKEN")?,
            dispatch_secret: secret("DISPATCH_SECRET")?,
            webhook_secret: secret("WEBHOOK_SECRET")?,
        })
    }
}
