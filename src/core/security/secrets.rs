//! The Worker's secrets, read and checked in one place (docs/guides/security.md,
//! "Security model"). The rules are about what each secret lets its holder do:
//! `DISPATCH_SECRET` authorises `POST /internal/run`, `WEBHOOK_SECRET` is known to
//! every receiver, so the two must differ, or any receiver could forge dispatches.

use crate::core::security::signature::constant_time_eq;

/// The shortest secret accepted.
pub const MIN_SECRET_CHARS: usize = 16;

/// What listings show instead of a signing secret (a subject's, an `on_finish`'s).
/// Shorter than [`MIN_SECRET_CHARS`], so writing a listed value back unchanged is
/// refused rather than silently replacing the secret.
pub const REDACTED: &str = "[redacted]";

#[derive(Clone, PartialEq, Eq)]
pub struct Secrets {
    /// `ADMIN_TOKEN`: bearer token of the admin API.
    pub admin_token: String,
    /// `DISPATCH_SECRET`: signs dispatcher → child calls.
    pub dispatch: String,
    /// `DISPATCH_SECRET_PREVIOUS`: still accepted (never used to sign) while a new
    /// `DISPATCH_SECRET` rolls out.
    pub dispatch_previous: Option<String>,
    /// `WEBHOOK_SECRET`: signs deliveries of subjects without their own secret.
    pub webhook: String,
    /// `METRICS_TOKEN`: bearer token accepted on `GET /metrics` only, so a scrape
    /// config holds a read-only credential. Optional.
    pub metrics_token: Option<String>,
}

// Never print a secret, not even in a panic message.
impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets { .. }")
    }
}

/// A secret by name, checked for presence and length; errors name it, never its
/// value.
pub fn read(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Result<String, String> {
    match lookup(name) {
        Some(v) if v.chars().count() >= MIN_SECRET_CHARS => Ok(v),
        Some(_) => Err(format!(
            "secret {name} must be at least {MIN_SECRET_CHARS} characters"
        )),
        None => Err(format!(
            "secret {name} is not set (wrangler secret put {name}, or .dev.vars locally)"
        )),
    }
}

impl Secrets {
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Secrets, String> {
        let secrets = Secrets {
            admin_token: read(&lookup, "ADMIN_TOKEN")?,
            dispatch: read(&lookup, "DISPATCH_SECRET")?,
            dispatch_previous: match lookup("DISPATCH_SECRET_PREVIOUS") {
                Some(v) if !v.is_empty() => Some(read(&lookup, "DISPATCH_SECRET_PREVIOUS")?),
                // Empty means "no rotation under way", so it can be cleared with a
                // var as well as by deleting the secret.
                _ => None,
            },
            webhook: read(&lookup, "WEBHOOK_SECRET")?,
            metrics_token: match lookup("METRICS_TOKEN") {
                Some(v) if !v.is_empty() => Some(read(&lookup, "METRICS_TOKEN")?),
                _ => None,
            },
        };
        let same = |a: &str, b: &str| constant_time_eq(a.as_bytes(), b.as_bytes());
        for (name, dispatch) in secrets.dispatch_named() {
            if same(dispatch, &secrets.webhook) {
                return Err(format!(
                    "{name} must differ from WEBHOOK_SECRET: every webhook receiver knows WEBHOOK_SECRET and could forge POST /internal/run"
                ));
            }
            if same(dispatch, &secrets.admin_token) {
                return Err(format!("{name} must differ from ADMIN_TOKEN"));
            }
        }
        if let Some(metrics) = &secrets.metrics_token {
            // A scrape config is the credential most likely to leak: it must not
            // double as one that can do more than read /metrics.
            let others = [
                ("ADMIN_TOKEN", secrets.admin_token.as_str()),
                ("WEBHOOK_SECRET", secrets.webhook.as_str()),
            ];
            for (name, other) in others.into_iter().chain(secrets.dispatch_named()) {
                if same(metrics, other) {
                    return Err(format!("METRICS_TOKEN must differ from {name}"));
                }
            }
        }
        if same(&secrets.webhook, &secrets.admin_token) {
            return Err(
                "WEBHOOK_SECRET must differ from ADMIN_TOKEN: every webhook receiver knows WEBHOOK_SECRET"
                    .into(),
            );
        }
        Ok(secrets)
    }

    /// The secrets a dispatch may be signed with: the current one, then the
    /// previous one during a rotation.
    pub fn dispatch_keys(&self) -> Vec<&str> {
        self.dispatch_named().map(|(_, s)| s).collect()
    }

    fn dispatch_named(&self) -> impl Iterator<Item = (&'static str, &str)> {
        std::iter::once(("DISPATCH_SECRET", self.dispatch.as_str())).chain(
            self.dispatch_previous
                .as_deref()
                .map(|s| ("DISPATCH_SECRET_PREVIOUS", s)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<Secrets, String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Secrets::from_lookup(|name| map.get(name).cloned())
    }

    const GOOD: [(&str, &str); 3] = [
        ("ADMIN_TOKEN", "admin-token-0123456789"),
        ("DISPATCH_SECRET", "dispatch-secret-0123456789"),
        ("WEBHOOK_SECRET", "webhook-secret-0123456789"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut pairs: Vec<_> = GOOD
            .iter()
            .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
            .copied()
            .collect();
        pairs.extend_from_slice(extra);
        pairs
    }

    #[test]
    fn three_distinct_secrets_are_enough() {
        let s = parse(&GOOD).unwrap();
        assert_eq!(s.dispatch_keys(), ["dispatch-secret-0123456789"]);
        assert_eq!(format!("{s:?}"), "Secrets { .. }");
    }

    #[test]
    fn a_dispatch_secret_equal_to_the_webhook_secret_is_refused() {
        let err = parse(&with(&[("DISPATCH_SECRET", "webhook-secret-0123456789")])).unwrap_err();
        assert!(
            err.starts_with("DISPATCH_SECRET must differ from WEBHOOK_SECRET"),
            "{err}"
        );
        assert!(
            !err.contains("webhook-secret-0123456789"),
            "never the value: {err}"
        );
        let err = parse(&with(&[(
            "DISPATCH_SECRET_PREVIOUS",
            "webhook-secret-0123456789",
        )]))
        .unwrap_err();
        assert!(
            err.starts_with("DISPATCH_SECRET_PREVIOUS must differ"),
            "{err}"
        );
        let err = parse(&with(&[("WEBHOOK_SECRET", "admin-token-0123456789")])).unwrap_err();
        assert!(
            err.starts_with("WEBHOOK_SECRET must differ from ADMIN_TOKEN"),
            "{err}"
        );
        let err = parse(&with(&[("DISPATCH_SECRET", "admin-token-0123456789")])).unwrap_err();
        assert!(
            err.starts_with("DISPATCH_SECRET must differ from ADMIN_TOKEN"),
            "{err}"
        );
    }

    #[test]
    fn a_rotation_accepts_the_previous_dispatch_secret_too() {
        let s = parse(&with(&[(
            "DISPATCH_SECRET_PREVIOUS",
            "old-dispatch-secret-0123",
        )]))
        .unwrap();
        assert_eq!(
            s.dispatch_keys(),
            ["dispatch-secret-0123456789", "old-dispatch-secret-0123"],
            "the current one first: it signs"
        );
        let s = parse(&with(&[("DISPATCH_SECRET_PREVIOUS", "")])).unwrap();
        assert_eq!(s.dispatch_keys().len(), 1);
        let err = parse(&with(&[("DISPATCH_SECRET_PREVIOUS", "short")])).unwrap_err();
        assert!(
            err.contains("DISPATCH_SECRET_PREVIOUS must be at least 16"),
            "{err}"
        );
    }

    #[test]
    fn the_metrics_token_is_optional_and_its_own() {
        assert_eq!(parse(&GOOD).unwrap().metrics_token, None);
        assert_eq!(
            parse(&with(&[("METRICS_TOKEN", "")]))
                .unwrap()
                .metrics_token,
            None
        );
        let s = parse(&with(&[("METRICS_TOKEN", "metrics-token-0123456789")])).unwrap();
        assert_eq!(s.metrics_token.as_deref(), Some("metrics-token-0123456789"));
        let err = parse(&with(&[("METRICS_TOKEN", "short")])).unwrap_err();
        assert_eq!(err, "secret METRICS_TOKEN must be at least 16 characters");
        for (name, value) in GOOD {
            let err = parse(&with(&[("METRICS_TOKEN", value)])).unwrap_err();
            assert_eq!(err, format!("METRICS_TOKEN must differ from {name}"));
        }
    }

    #[test]
    fn missing_and_short_secrets_are_named() {
        let err = parse(&GOOD[1..]).unwrap_err();
        assert!(err.starts_with("secret ADMIN_TOKEN is not set"), "{err}");
        let err = parse(&with(&[("WEBHOOK_SECRET", "fifteen-chars-x")])).unwrap_err();
        assert_eq!(err, "secret WEBHOOK_SECRET must be at least 16 characters");
    }
}
