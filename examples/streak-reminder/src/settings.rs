//! The Worker's settings for this app, read from its Env (vars and secrets):
//! where GitHub's and Telegram's APIs are (settings, so tests point them at
//! fakes) and the two tokens (secrets: never logged, never in a reason, only in
//! the request that needs them).

use url::Url;

/// GitHub's API when `GITHUB_API_URL` is not set.
pub const DEFAULT_GITHUB_API_URL: &str = "https://api.github.com";
/// Telegram's Bot API when `TELEGRAM_API_URL` is not set.
pub const DEFAULT_TELEGRAM_API_URL: &str = "https://api.telegram.org";

/// What a run needs besides its payload.
#[derive(Clone, PartialEq, Eq)]
pub struct Settings {
    /// `GITHUB_API_URL`, without a trailing `/`.
    pub github_api_url: String,
    /// `GITHUB_TOKEN` (secret): sent as `Authorization: Bearer` to GitHub only.
    pub github_token: String,
    /// `TELEGRAM_API_URL`, without a trailing `/`.
    pub telegram_api_url: String,
    /// `TELEGRAM_BOT_TOKEN` (secret): part of the Bot API's path, as Telegram
    /// requires. Only needed by users with a Telegram chat.
    pub telegram_bot_token: Option<String>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("github_api_url", &self.github_api_url)
            .field("github_token", &"[redacted]")
            .field("telegram_api_url", &self.telegram_api_url)
            .field(
                "telegram_bot_token",
                &self.telegram_bot_token.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

impl Settings {
    /// Read the settings through `get` (a var or secret by name; blank is
    /// unset). An error names the setting and the rule, never a value.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let get = |name: &str| {
            get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let base = |name: &str, default: &str| -> Result<String, String> {
            let value = get(name).unwrap_or_else(|| default.to_string());
            match Url::parse(&value) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.query().is_none() => {
                    Ok(value.trim_end_matches('/').to_string())
                }
                _ => Err(format!(
                    "{name} must be an http(s) base URL without a query"
                )),
            }
        };
        Ok(Settings {
            github_api_url: base("GITHUB_API_URL", DEFAULT_GITHUB_API_URL)?,
            github_token: get("GITHUB_TOKEN").ok_or("GITHUB_TOKEN is not set")?,
            telegram_api_url: base("TELEGRAM_API_URL", DEFAULT_TELEGRAM_API_URL)?,
            telegram_bot_token: get("TELEGRAM_BOT_TOKEN"),
        })
    }

    /// The secrets, for scrubbing them out of any text that leaves a run.
    pub fn secrets(&self) -> Vec<&str> {
        let mut s = vec![self.github_token.as_str()];
        s.extend(self.telegram_bot_token.as_deref());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn only_the_github_token_is_required_and_the_urls_default_to_the_real_apis() {
        let s = read(&[("GITHUB_TOKEN", "ghp_secret")]).unwrap();
        assert_eq!(s.github_api_url, "https://api.github.com");
        assert_eq!(s.telegram_api_url, "https://api.telegram.org");
        assert_eq!(s.github_token, "ghp_secret");
        assert_eq!(s.telegram_bot_token, None);
        assert_eq!(read(&[]).unwrap_err(), "GITHUB_TOKEN is not set");
        assert_eq!(
            read(&[("GITHUB_TOKEN", "  ")]).unwrap_err(),
            "GITHUB_TOKEN is not set"
        );
    }

    #[test]
    fn base_urls_lose_a_trailing_slash_and_must_be_http() {
        let s = read(&[
            ("GITHUB_TOKEN", "t"),
            ("GITHUB_API_URL", "http://127.0.0.1:9000/github/"),
            ("TELEGRAM_API_URL", "http://127.0.0.1:9000/telegram"),
        ])
        .unwrap();
        assert_eq!(s.github_api_url, "http://127.0.0.1:9000/github");
        assert_eq!(s.telegram_api_url, "http://127.0.0.1:9000/telegram");
        for bad in ["ftp://x.test", "not a url", "https://x.test/?a=1"] {
            let err = read(&[("GITHUB_TOKEN", "t"), ("GITHUB_API_URL", bad)]).unwrap_err();
            assert_eq!(
                err,
                "GITHUB_API_URL must be an http(s) base URL without a query"
            );
        }
    }

    #[test]
    fn debug_output_never_shows_a_token() {
        let s = read(&[
            ("GITHUB_TOKEN", "ghp_secret"),
            ("TELEGRAM_BOT_TOKEN", "123:bot-secret"),
        ])
        .unwrap();
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("ghp_secret") && !shown.contains("bot-secret"),
            "{shown}"
        );
        assert!(shown.contains("[redacted]"));
        assert_eq!(s.secrets(), ["ghp_secret", "123:bot-secret"]);
    }
}
