//! The local runtime: `wrangler dev` (workerd + local D1) on a state dir of our own.
//!
//! Every child runs from the repo root with `<repo>/node_modules/.bin` first on
//! PATH, because wrangler needs the Node 22 that the `node` npm package installs
//! there (the system node is older). `wrangler dev` runs in its own process group
//! so that stopping it also stops the workerd and esbuild processes it spawns, and
//! so that a crash can be simulated by SIGKILL-ing all of them at once.
//!
//! Nothing here sleeps for a fixed time to "let it start": readiness is
//! `GET /health` answering 200, and exit is the process group being empty.

use anyhow::{bail, ensure, Context, Result};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long `wrangler dev` gets to answer `/health` after a (re)start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a SIGTERM-ed process group gets to exit before it is SIGKILL-ed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long migrations may take (wrangler boots a local D1 for them).
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(120);

/// Where local D1 keeps its databases under a state dir.
const D1_DIR: &str = "v3/d1";

/// The migrated D1 this process made per Worker config (repo, its first `-c`):
/// a fresh state dir of the same config copies it instead of running
/// `wrangler d1 migrations apply` again, which boots a local D1 for each part
/// (about 15 s of the e2e suite's every Worker).
static MIGRATED: Mutex<BTreeMap<(PathBuf, Option<PathBuf>), PathBuf>> = Mutex::new(BTreeMap::new());

/// Where a runtime lives on disk and what it is started with.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Repo root: wrangler.toml, migrations/, node_modules/.
    pub repo: PathBuf,
    /// D1 and other local state (`--persist-to`). Survives restarts.
    pub state_dir: PathBuf,
    /// Directory for wrangler's output (`<name>-wrangler.log`, `<name>-migrations.log`).
    pub log_dir: PathBuf,
    /// Prefix of the log files, e.g. `e2e`.
    pub name: String,
    /// `--var KEY:VALUE` pairs: settings and, in tests, the secrets.
    pub vars: Vec<(String, String)>,
    /// `-c` wrangler configs, the Worker's own first, then Workers run beside it
    /// (multi-worker `wrangler dev`); empty: the repo's `wrangler.toml` alone.
    pub configs: Vec<PathBuf>,
}

impl RuntimeConfig {
    /// The layout under `<repo>/.loadtest/` (gitignored): `<name>-state/` and `logs/`.
    pub fn under_repo(repo: &Path, name: &str, vars: Vec<(String, String)>) -> RuntimeConfig {
        let base = repo.join(".loadtest");
        RuntimeConfig {
            repo: repo.to_path_buf(),
            state_dir: base.join(format!("{name}-state")),
            log_dir: base.join("logs"),
            name: name.to_string(),
            vars,
            configs: Vec::new(),
        }
    }

    pub fn wrangler_log(&self) -> PathBuf {
        self.log_dir.join(format!("{}-wrangler.log", self.name))
    }

    fn migrations_log(&self) -> PathBuf {
        self.log_dir.join(format!("{}-migrations.log", self.name))
    }

    /// Deletes the state dir, for a run that must start from an empty database.
    pub fn wipe_state(&self) -> Result<()> {
        remove_tree(&self.state_dir)
    }

    /// A `wrangler ...` command with the environment every child gets.
    fn wrangler(&self) -> Result<Command> {
        let bin_dir = self.repo.join("node_modules/.bin");
        let wrangler = bin_dir.join("wrangler");
        if !wrangler.exists() {
            bail!(
                "{} not found: run `npm ci` in {}",
                wrangler.display(),
                self.repo.display()
            );
        }
        let path = match std::env::var_os("PATH") {
            Some(old) => {
                std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(&old)))?
            }
            None => bin_dir.into_os_string(),
        };
        let mut cmd = Command::new(wrangler);
        cmd.current_dir(&self.repo)
            .env("PATH", path)
            // Never prompt (migrations ask for confirmation otherwise).
            .env("CI", "true")
            // Only loopback traffic is wanted; keep wrangler from phoning home.
            .env("WRANGLER_SEND_METRICS", "false")
            .env("WRANGLER_SEND_ERROR_REPORTS", "false")
            // Wrangler's own debug logs go next to ours instead of ~/.wrangler.
            .env("WRANGLER_LOG_PATH", &self.log_dir)
            // Plain text in the log files.
            .env("FORCE_COLOR", "0")
            .stdin(Stdio::null());
        Ok(cmd)
    }

    fn open_log(&self, path: &Path, what: &str) -> Result<File> {
        fs::create_dir_all(&self.log_dir)
            .with_context(|| format!("creating {}", self.log_dir.display()))?;
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        writeln!(
            file,
            "\n===== {what} at {} =====",
            chrono::Utc::now().to_rfc3339()
        )?;
        Ok(file)
    }

    /// `wrangler d1 migrations apply DB --local --persist-to <state dir>`.
    pub async fn apply_migrations(&self) -> Result<()> {
        self.d1(&["migrations", "apply"], &[], "migrations").await
    }

    /// Migrations for an empty state dir: a copy of the D1 this process
    /// migrated already for the same config, or else `apply_migrations`, whose
    /// result is then kept (`.loadtest/<name>-migrated/`) for the next one.
    pub async fn migrate_fresh(&self) -> Result<()> {
        let key = (self.repo.clone(), self.configs.first().cloned());
        let d1 = self.state_dir.join(D1_DIR);
        let made = MIGRATED.lock().expect("MIGRATED").get(&key).cloned();
        if let Some(made) = made {
            let mut log = self.open_log(&self.migrations_log(), "d1 migrations copied")?;
            writeln!(log, "from {}", made.display())?;
            return copy_tree(&made, &d1);
        }
        self.apply_migrations().await?;
        let kept = self
            .state_dir
            .with_file_name(format!("{}-migrated", self.name));
        remove_tree(&kept)?;
        copy_tree(&d1, &kept)?;
        MIGRATED.lock().expect("MIGRATED").insert(key, kept);
        Ok(())
    }

    /// `wrangler d1 execute DB --local --persist-to <state dir> --command <sql>`: SQL
    /// run on the local D1 behind the runtime's back, for fixtures no API makes
    /// (rows backdated by days, as if time had passed). Run it with the runtime
    /// stopped: two processes must not write one SQLite file.
    pub async fn d1_execute(&self, sql: &str) -> Result<()> {
        self.d1(&["execute"], &["--command", sql], "d1 execute")
            .await
            .with_context(|| format!("running {sql}"))
    }

    /// `wrangler d1 <verb…> DB --local --persist-to <state dir> <extra…>`, bounded
    /// by MIGRATE_TIMEOUT, its output in the migrations log.
    async fn d1(&self, verb: &[&str], extra: &[&str], what: &str) -> Result<()> {
        let log_path = self.migrations_log();
        let log = self.open_log(&log_path, &format!("d1 {}", verb.join(" ")))?;
        let mut cmd = self.wrangler()?;
        // The Worker's own config (its D1 binding), when it has one of its own.
        if let Some(config) = self.configs.first() {
            cmd.arg("-c").arg(config);
        }
        cmd.arg("d1")
            .args(verb)
            .args(["DB", "--local", "--persist-to"])
            .arg(&self.state_dir)
            .args(extra)
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting wrangler d1 {}", verb.join(" ")))?;
        let status = match tokio::time::timeout(MIGRATE_TIMEOUT, child.wait()).await {
            Ok(status) => status?,
            Err(_) => bail!(
                "{what} did not finish within {MIGRATE_TIMEOUT:?}; see {}",
                log_path.display()
            ),
        };
        if !status.success() {
            bail!("{what} failed ({status}):\n{}", tail(&log_path, 20));
        }
        Ok(())
    }
}

/// A running (or crashed, until `restart`) `wrangler dev`. Dropping it stops it.
pub struct Runtime {
    cfg: RuntimeConfig,
    port: u16,
    inspector_port: u16,
    child: Option<Child>,
    http: reqwest::Client,
}

impl Runtime {
    /// Starts `wrangler dev` on a free loopback port and waits for `/health`.
    pub async fn start(cfg: RuntimeConfig) -> Result<Runtime> {
        let mut rt = Runtime {
            cfg,
            port: free_port()?,
            inspector_port: free_port()?,
            child: None,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()?,
        };
        rt.spawn_and_wait().await?;
        Ok(rt)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.cfg
    }

    async fn spawn_and_wait(&mut self) -> Result<()> {
        let log_path = self.cfg.wrangler_log();
        let log = self
            .cfg
            .open_log(&log_path, &format!("wrangler dev on port {}", self.port))?;
        let mut cmd = self.cfg.wrangler()?;
        cmd.arg("dev")
            .args(["--ip", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .arg("--inspector-port")
            .arg(self.inspector_port.to_string())
            .arg("--persist-to")
            .arg(&self.cfg.state_dir)
            .arg("--show-interactive-dev-session=false");
        for config in &self.cfg.configs {
            cmd.arg("-c").arg(config);
        }
        for (key, value) in &self.cfg.vars {
            cmd.arg("--var").arg(format!("{key}:{value}"));
        }
        cmd.stdout(log.try_clone()?).stderr(log).process_group(0);
        // If this CLI dies without running its cleanup (SIGKILL, OOM), the kernel
        // sends wrangler SIGTERM, and wrangler stops its workerd on SIGTERM.
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().context("starting wrangler dev")?;
        self.child = Some(child);
        self.wait_ready(&log_path).await
    }

    async fn wait_ready(&mut self, log_path: &Path) -> Result<()> {
        let health = format!("{}/health", self.url());
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    self.child = None;
                    bail!(
                        "wrangler dev exited ({status}) before it was ready:\n{}",
                        tail(log_path, 30)
                    );
                }
            }
            if let Ok(resp) = self.http.get(&health).send().await {
                if resp.status() == reqwest::StatusCode::OK {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                self.kill_hard();
                bail!(
                    "GET {health} did not answer 200 within {READY_TIMEOUT:?}:\n{}",
                    tail(log_path, 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM to the whole process group, SIGKILL after a bounded grace period.
    pub async fn stop(&mut self) -> Result<()> {
        let Some(child) = self.child.take() else {
            return Ok(());
        };
        // The wait polls every 50 ms for at most STOP_GRACE; keep it off the
        // async workers' threads.
        let graceful = tokio::task::spawn_blocking(move || terminate_group(child))
            .await
            .context("waiting for wrangler dev to stop")?;
        ensure!(
            graceful,
            "wrangler dev ignored SIGTERM for {STOP_GRACE:?}; killed it"
        );
        Ok(())
    }

    /// SIGKILL to the whole process group: a crash, with no chance to flush or
    /// release anything. Returns once every process of the group is gone.
    pub fn kill_hard(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pgid = child.id() as libc::pid_t;
            signal_group(pgid, libc::SIGKILL);
            wait_group_blocking(&mut child, pgid);
        }
    }

    /// Sets (`Some`) or removes (`None`) a `--var` for the next (re)start.
    pub fn set_var(&mut self, key: &str, value: Option<&str>) {
        self.cfg.vars.retain(|(k, _)| k != key);
        if let Some(value) = value {
            self.cfg.vars.push((key.to_string(), value.to_string()));
        }
    }

    /// A `--var` this runtime is started with.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.cfg
            .vars
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Starts again on the same port and state dir (after `stop` or `kill_hard`).
    pub async fn restart(&mut self) -> Result<()> {
        self.stop().await?;
        self.spawn_and_wait().await
    }
}

impl Drop for Runtime {
    /// Runs on normal exit, on errors, on panics and when Ctrl-C cancels the
    /// command's future, so no wrangler/workerd outlives the CLI.
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            terminate_group(child);
        }
    }
}

/// SIGTERM to the child's process group, then SIGKILL if it is not gone after
/// STOP_GRACE. Returns whether it stopped on SIGTERM. Blocks until the whole
/// group is gone.
fn terminate_group(mut child: Child) -> bool {
    let pgid = child.id() as libc::pid_t;
    signal_group(pgid, libc::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while !group_gone(&mut child, pgid) {
        if Instant::now() >= deadline {
            signal_group(pgid, libc::SIGKILL);
            wait_group_blocking(&mut child, pgid);
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn signal_group(pgid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: plain syscall; ESRCH (group already gone) is fine to ignore.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// True once the leader is reaped and no other member of the group is left.
/// The leader must be reaped first: a zombie still counts as a group member.
fn group_gone(child: &mut Child, pgid: libc::pid_t) -> bool {
    if !matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    let rc = unsafe { libc::killpg(pgid, 0) };
    rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// After SIGKILL: the kernel tears the group down within milliseconds; wait for
/// it (bounded, in case a member is stuck in uninterruptible sleep).
fn wait_group_blocking(child: &mut Child, pgid: libc::pid_t) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !group_gone(child, pgid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A loopback port nobody listens on right now. Another process could take it
/// before wrangler binds it; wrangler then fails to start and we say so.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// The last `n` lines of a log file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            format!(
                "--- last lines of {} ---\n{}",
                path.display(),
                lines[start..].join("\n")
            )
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// The smallest LEASE_SECONDS the Worker accepts for these settings (the
/// Worker's own rule, `core::timing::min_lease_ms`), plus one second of slack for
/// a loaded machine.
pub fn min_lease_seconds(job_timeout_ms: u64, claim_chunk: u64, concurrency: u64) -> u64 {
    let ms = cron_fanout::core::timing::min_lease_ms(
        job_timeout_ms as i64,
        claim_chunk as i64,
        concurrency as i64,
    );
    (ms as u64).div_ceil(1000) + 1
}

/// Removes `dir` and all below it; one that is not there is fine.
fn remove_tree(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", dir.display()))
        }
        _ => Ok(()),
    }
}

/// Copies the files below `from` to `to` (made as needed), with no process
/// holding them open: a D1 SQLite file with its `-wal` and `-shm` is a
/// consistent database.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_is_the_workers_minimum_plus_slack() {
        // e2e's settings: 1 s timeout -> the Worker's 11 s minimum, 12 with slack.
        // 3 calls of (timeout + 2 s) + 2 s, rounded up, + 1 s of slack.
        assert_eq!(min_lease_seconds(1_000, 50, 25), 12);
        assert_eq!(min_lease_seconds(10_000, 50, 25), 39);
        assert_eq!(min_lease_seconds(10_100, 50, 25), 40);
        // A chunk no larger than the window queues one call's worth: 2 calls.
        assert_eq!(min_lease_seconds(1_000, 25, 25), 9);
    }

    #[test]
    fn a_copied_tree_has_every_file_below_with_its_bytes() {
        let root = std::env::temp_dir().join(format!("loadtest-copy-{}", std::process::id()));
        let (from, to) = (root.join("from"), root.join("to"));
        fs::create_dir_all(from.join("v3/d1/db")).unwrap();
        fs::write(from.join("v3/d1/db/x.sqlite"), b"pages").unwrap();
        fs::write(from.join("v3/d1/db/x.sqlite-wal"), b"frames").unwrap();
        copy_tree(&from, &to).unwrap();
        assert_eq!(fs::read(to.join("v3/d1/db/x.sqlite")).unwrap(), b"pages");
        assert_eq!(
            fs::read(to.join("v3/d1/db/x.sqlite-wal")).unwrap(),
            b"frames"
        );
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        // Removing what is not there is no error.
        remove_tree(&root).unwrap();
    }
}
