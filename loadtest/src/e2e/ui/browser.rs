//! A real headless Chromium driven over WebDriver: Debian's `chromium` and
//! `chromium-driver` packages (installed by `scripts/setup.sh`), `fantoccini` as
//! the client, over plain http to a chromedriver this process starts on
//! 127.0.0.1 (no TLS stack needed). The machine's network is closed, so Chromium
//! starts with everything that would call home turned off and a fresh profile.

use anyhow::{bail, Context, Result};
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// Chromium's flags: headless, no sandbox (CI runs as root), and nothing that
/// reaches out to the network on its own.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// The browser's time zone (its `TZ`): not UTC, and half an hour off any whole
/// hour, so a page that showed UTC or the machine's zone instead of the viewer's
/// would be caught. Darwin keeps UTC+09:30 all year (no DST), and ICU knows it by
/// this name (Kolkata, say, it calls Asia/Calcutta).
pub const BROWSER_TZ: &str = "Australia/Darwin";
pub const BROWSER_TZ_OFFSET_MINUTES: i64 = 9 * 60 + 30;

/// Names the Debian (and Ubuntu) packages install the binaries under.
const CHROMIUM_NAMES: &[&str] = &["chromium", "chromium-browser", "google-chrome"];
const DRIVER_NAMES: &[&str] = &["chromedriver"];

/// The first of `names` found on PATH (or in /usr/lib/chromium, where Debian keeps
/// the driver next to the browser).
fn find_binary(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain([PathBuf::from("/usr/lib/chromium")]);
    dirs.flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

/// One entry of the browser's console log.
#[derive(Debug, Clone, Deserialize)]
pub struct LogEntry {
    pub level: String,
    pub message: String,
    #[serde(default)]
    pub source: Option<String>,
}

/// chromedriver's log endpoint (`POST /session/{id}/se/log`, a vendor command):
/// the console messages since the last call, CSP violations included.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or("")))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"type": "browser"}).to_string()),
        )
    }
}

/// A chromedriver process and one browser session in it. [`Browser::close`]
/// ends both; dropping it kills the driver (and so the browser) too.
pub struct Browser {
    pub client: Client,
    driver: Child,
    profile: PathBuf,
}

impl Browser {
    /// Starts chromedriver on a free local port and opens Chromium with a fresh
    /// profile under `work_dir`; the driver's log goes to `work_dir/chromedriver.log`.
    pub async fn start(work_dir: &Path) -> Result<Browser> {
        let chromium = find_binary(CHROMIUM_NAMES).context(
            "Chromium is not installed: run scripts/setup.sh (apt-get install chromium chromium-driver)",
        )?;
        let driver_bin = find_binary(DRIVER_NAMES).context(
            "chromedriver is not installed: run scripts/setup.sh (apt-get install chromium-driver)",
        )?;
        std::fs::create_dir_all(work_dir)?;
        let profile = work_dir.join(format!("profile-{}", std::process::id()));
        if profile.exists() {
            std::fs::remove_dir_all(&profile)?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::File::create(work_dir.join("chromedriver.log"))?;
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            // Chromium inherits it from the driver.
            .env("TZ", BROWSER_TZ)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", driver_bin.display()))?;
        let base = format!("http://127.0.0.1:{port}");
        wait_ready(&base).await?;

        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.push("--window-size=1280,900".into());
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(caps) = caps else {
            unreachable!("a JSON object literal")
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&base)
            .await
            .with_context(|| format!("opening {} through {}", chromium.display(), base))?;
        Ok(Browser {
            client,
            driver,
            profile,
        })
    }

    /// The console messages since the last call.
    pub async fn logs(&self) -> Result<Vec<LogEntry>> {
        let v = self.client.issue_cmd(BrowserLog).await?;
        Ok(serde_json::from_value(v)?)
    }

    pub async fn screenshot(&self, path: &Path) -> Result<()> {
        let png = self.client.screenshot().await?;
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    /// Scrolls the element with id `id` into view, then takes the screenshot.
    pub async fn screenshot_of(&self, id: &str, path: &Path) -> Result<()> {
        let script = format!("document.getElementById('{id}').scrollIntoView(); return 0;");
        self.client.execute(&script, vec![]).await?;
        self.screenshot(path).await
    }

    /// The text of the first element matching `css`, or `None` if there is none.
    /// Read in one script call: the page re-renders as it refreshes, so an element
    /// found by one WebDriver call may be gone by the next.
    pub async fn text(&self, css: &str) -> Result<Option<String>> {
        let script =
            "const el = document.querySelector(arguments[0]); return el ? el.textContent : null;";
        let v = self.client.execute(script, vec![json!(css)]).await?;
        Ok(v.as_str().map(str::to_string))
    }

    /// How many elements match `css`.
    pub async fn count(&self, css: &str) -> Result<usize> {
        let script = "return document.querySelectorAll(arguments[0]).length;";
        let v = self.client.execute(script, vec![json!(css)]).await?;
        Ok(v.as_u64().unwrap_or(0) as usize)
    }

    /// Clicks the first element matching `css` (found again if a refresh
    /// replaced it in between).
    pub async fn click(&self, css: &str) -> Result<()> {
        for _ in 0..5 {
            let el = self.client.find(Locator::Css(css)).await?;
            match el.click().await {
                Err(e) if e.is_stale_element_reference() => continue,
                other => return other.with_context(|| format!("clicking {css}")),
            }
        }
        bail!("{css} kept being replaced while clicking it")
    }

    /// Types `text` into the input matching `css`.
    pub async fn type_into(&self, css: &str, text: &str) -> Result<()> {
        let el = self.client.find(Locator::Css(css)).await?;
        el.clear().await?;
        el.send_keys(text).await?;
        Ok(())
    }

    /// Waits until `probe` answers `Some`, polling every 100 ms, for at most
    /// `timeout`; `what` names the wait in the error.
    pub async fn until<T, F, Fut>(&self, what: &str, timeout: Duration, mut probe: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>>>,
    {
        let start = Instant::now();
        loop {
            if let Some(v) = probe().await? {
                return Ok(v);
            }
            if start.elapsed() > timeout {
                bail!("timed out after {timeout:?} waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn close(mut self) -> Result<()> {
        let closed = self.client.clone().close().await;
        let _ = self.driver.kill().await;
        let _ = std::fs::remove_dir_all(&self.profile);
        closed.context("closing the browser session")
    }
}

async fn wait_ready(base: &str) -> Result<()> {
    let http = reqwest::Client::new();
    let start = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{base}/status")).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        if start.elapsed() > Duration::from_secs(20) {
            bail!("chromedriver at {base} did not answer /status within 20 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Console entries that are errors of the page: anything at SEVERE, and any CSP
/// report whatever its level. `allow` filters out expected ones (e.g. the 401 of
/// a wrong token, which Chromium logs as a failed resource load).
pub fn page_errors<'a>(
    logs: &'a [LogEntry],
    allow: &dyn Fn(&LogEntry) -> bool,
) -> Vec<&'a LogEntry> {
    logs.iter()
        .filter(|e| e.level == "SEVERE" || e.message.contains("Content Security Policy"))
        .filter(|e| !allow(e))
        .collect()
}

/// How long a page check waits for what it expects to show.
pub const WAIT: Duration = Duration::from_secs(30);

/// The page is no wider than the window (no sideways scrolling).
pub async fn fits_width(b: &Browser) -> Result<bool> {
    let script = "return document.documentElement.scrollWidth <= window.innerWidth;";
    Ok(b.client.execute(script, vec![]).await? == json!(true))
}

/// The page logged no error but those `allow` accepts.
pub fn no_errors(logs: &[LogEntry], allow: &dyn Fn(&LogEntry) -> bool) -> Result<(), String> {
    let errors = page_errors(logs, allow);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors
            .iter()
            .map(|e| format!("{}: {}", e.level, e.message))
            .collect::<Vec<_>>()
            .join(" | "))
    }
}

/// The number in a count cell (`1,234`), if it shows one.
pub fn number(text: Option<String>) -> Result<Option<u64>> {
    Ok(text.and_then(|t| {
        let digits: String = t.chars().filter(char::is_ascii_digit).collect();
        digits.parse().ok()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(level: &str, message: &str) -> LogEntry {
        LogEntry {
            level: level.into(),
            message: message.into(),
            source: Some("network".into()),
        }
    }

    #[test]
    fn errors_are_severe_entries_and_csp_reports_except_allowed_ones() {
        let logs = [
            entry("INFO", "hello"),
            entry("SEVERE", "Uncaught TypeError: x is undefined"),
            entry("WARNING", "Refused to apply inline style because it violates the following Content Security Policy directive"),
            entry("SEVERE", "Failed to load resource: the server responded with a status of 401 ()"),
        ];
        let none = |_: &LogEntry| false;
        assert_eq!(page_errors(&logs, &none).len(), 3);
        let allow_401 = |e: &LogEntry| e.message.contains("status of 401");
        let left = page_errors(&logs, &allow_401);
        assert_eq!(left.len(), 2);
        assert!(left.iter().all(|e| !e.message.contains("401")));
    }
}
