//! The Worker a command talks to, and the sink it delivers to: either a local
//! `wrangler dev` this process starts (default) or, with `--url`, one that is
//! already running.

use crate::driver::checks::{text, Checks};
use crate::runtime::api::Api;
use crate::runtime::devvars;
use crate::runtime::wrangler::{Runtime, RuntimeConfig};
use crate::sink::{self, SinkClient, SinkHandle};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct TargetArgs {
    /// Repo root (wrangler.toml, migrations/, node_modules/). Ignored with --url.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Use the Worker already running at this URL; start nothing. It must be a
    /// `wrangler dev` (crons are fired through its local trigger route).
    #[arg(long)]
    pub url: Option<String>,
    /// ADMIN_TOKEN of the --url Worker.
    #[arg(long, env = "LOADTEST_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Base URL of an external sink (`loadtest sink`) the Worker can reach;
    /// default: one in this process on 127.0.0.1.
    #[arg(long)]
    pub sink_url: Option<String>,
    /// WEBHOOK_SECRET of the --url Worker, for the in-process sink.
    #[arg(long, env = "LOADTEST_WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: Option<String>,
    /// A Worker setting, KEY=VALUE (repeatable): passed to wrangler as `--var`
    /// over the scenario's defaults. With --url, tells the checks what the
    /// running Worker uses.
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = parse_var)]
    pub vars: Vec<(String, String)>,
    /// The wrangler configuration, relative to --repo (default `wrangler.toml`;
    /// `wrangler.drainers.toml` binds DRAIN_QUEUE for DRAINERS > 1).
    #[arg(long)]
    pub wrangler_config: Option<PathBuf>,
}

fn parse_var(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// Where the Worker's secrets come from when this process starts it.
#[derive(Debug, Clone, Copy)]
pub enum Secrets {
    /// Fresh random values for this run, passed as `--var` (tests).
    Random,
    /// `<repo>/.dev.vars`, created or completed if needed (demo).
    DevVars,
}

pub struct Target {
    pub api: Api,
    pub sink: SinkClient,
    /// `None` in --url mode.
    pub runtime: Option<Runtime>,
    /// Effective settings (defaults overridden by --var).
    pub settings: BTreeMap<String, String>,
    /// The secrets the runtime was started with (empty in --url mode): the e2e
    /// suite signs dispatches itself.
    pub secrets: BTreeMap<String, String>,
    /// Keeps the in-process sink serving.
    _sink: Option<SinkHandle>,
}

impl Target {
    /// Stops the runtime this target started, if any (--url mode started none).
    pub async fn stop(&mut self) -> Result<()> {
        match self.runtime.as_mut() {
            Some(runtime) => runtime.stop().await,
            None => Ok(()),
        }
    }

    /// Stops the runtime this target started, if any, and records the check
    /// `<part>wrangler dev stops on SIGTERM, no process left`.
    pub async fn stop_checked(&mut self, part: &str, checks: &mut Checks) {
        if let Some(runtime) = self.runtime.as_mut() {
            checks.record(
                &format!("{part}wrangler dev stops on SIGTERM, no process left"),
                runtime.stop().await.map_err(text),
            );
        }
    }

    /// Connects (--url) or starts everything: sink, migrations, `wrangler dev`.
    /// `name` prefixes the state dir and logs under `<repo>/.loadtest/`; `fresh`
    /// wipes the state dir first.
    pub async fn open(
        args: &TargetArgs,
        name: &str,
        defaults: &[(&str, &str)],
        secrets: Secrets,
        fresh: bool,
    ) -> Result<Target> {
        Target::open_with_configs(args, name, defaults, secrets, fresh, Vec::new()).await
    }

    /// [`Target::open`] with these wrangler configs (`RuntimeConfig::configs`:
    /// the Worker's own first, then Workers run beside it).
    pub async fn open_with_configs(
        args: &TargetArgs,
        name: &str,
        defaults: &[(&str, &str)],
        secrets: Secrets,
        fresh: bool,
        configs: Vec<std::path::PathBuf>,
    ) -> Result<Target> {
        let mut settings: BTreeMap<String, String> = defaults
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        settings.extend(args.vars.iter().cloned());

        if let Some(url) = &args.url {
            if let Some(config) = configs.first() {
                bail!(
                    "--url cannot start the Worker of {}: it needs its own wrangler dev",
                    config.display()
                );
            }
            let token = args
                .admin_token
                .as_deref()
                .context("--url needs --admin-token")?;
            let (sink, handle) = match (&args.sink_url, &args.webhook_secret) {
                (Some(sink_url), _) => (SinkClient::new(sink_url), None),
                (None, Some(secret)) => {
                    let handle = sink::start(0, secret).await?;
                    (SinkClient::new(&handle.url()), Some(handle))
                }
                (None, None) => bail!("--url needs --sink-url or --webhook-secret"),
            };
            let api = Api::new(url, token)?;
            api.health()
                .await
                .with_context(|| format!("{url} is not healthy"))?;
            return Ok(Target {
                api,
                sink,
                runtime: None,
                settings,
                secrets: BTreeMap::new(),
                _sink: handle,
            });
        }

        let repo = args
            .repo
            .canonicalize()
            .with_context(|| format!("repo {}", args.repo.display()))?;
        let mut vars: Vec<(String, String)> = settings.clone().into_iter().collect();
        let known: BTreeMap<String, String> = match secrets {
            Secrets::Random => {
                let generated: BTreeMap<String, String> = devvars::SECRETS
                    .iter()
                    .map(|k| (k.to_string(), devvars::random_secret()))
                    .collect();
                vars.extend(generated.clone());
                generated
            }
            Secrets::DevVars => {
                let (file, generated) = devvars::load_or_create(&repo)?;
                if !generated.is_empty() {
                    eprintln!(
                        "generated {} in {}",
                        generated.join(", "),
                        repo.join(".dev.vars").display()
                    );
                }
                file.into_iter()
                    .filter(|(k, _)| devvars::SECRETS.contains(&k.as_str()))
                    .collect()
            }
        };
        let (Some(admin_token), Some(webhook_secret)) = (
            known.get("ADMIN_TOKEN").cloned(),
            known.get("WEBHOOK_SECRET").cloned(),
        ) else {
            bail!("ADMIN_TOKEN and WEBHOOK_SECRET are required");
        };

        let mut cfg = RuntimeConfig::under_repo(&repo, name, vars);
        // `--config` of the suite's own parts (e.g. the drainers' config), when no
        // configs were given.
        cfg.configs = if configs.is_empty() {
            args.wrangler_config.iter().map(|c| repo.join(c)).collect()
        } else {
            configs
        };
        if fresh {
            cfg.wipe_state()?;
        }
        let (sink, handle) = match &args.sink_url {
            Some(url) => (SinkClient::new(url), None),
            None => {
                let handle = sink::start(0, &webhook_secret).await?;
                (SinkClient::new(&handle.url()), Some(handle))
            }
        };
        eprintln!("applying D1 migrations to {} ...", cfg.state_dir.display());
        if fresh {
            cfg.migrate_fresh().await?;
        } else {
            cfg.apply_migrations().await?;
        }
        eprintln!(
            "starting wrangler dev (log: {}) ...",
            cfg.wrangler_log().display()
        );
        let runtime = Runtime::start(cfg).await?;
        eprintln!("Worker ready at {}; sink at {}", runtime.url(), sink.base());
        let api = Api::new(&runtime.url(), &admin_token)?;
        Ok(Target {
            api,
            sink,
            runtime: Some(runtime),
            settings,
            secrets: known,
            _sink: handle,
        })
    }

    /// A numeric setting (from the defaults or --var).
    pub fn setting(&self, key: &str) -> Result<u64> {
        let v = self
            .settings
            .get(key)
            .with_context(|| format!("setting {key} is not set"))?;
        v.parse()
            .with_context(|| format!("setting {key}={v} is not a number"))
    }
}
