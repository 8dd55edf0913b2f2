//! The job kind `streak_check`: one user's daily check. A run asks GitHub for
//! the user's contribution calendar, works out the streak in the user's own
//! zone, and when it is at risk (no contribution today, a streak to lose)
//! sends the reminder to each channel the user has — `discord` and `telegram`,
//! each with its receipt, so a retry sends only what did not get through.

use std::cell::Cell;

use chrono_tz::Tz;
use cron_fanout::core::receipts::{self, ChannelResults};
use cron_fanout::core::target::{self, TargetPolicy};
use cron_fanout::core::timing::channel_deadline_ms;
use cron_fanout::jobs::webhook::{Answered, REDACTED};
use cron_fanout::jobs::{Context, Job, Outcome, Request};
use futures::future::{join_all, select, Either};
use serde::Deserialize;
use serde_json::Value;

use crate::answers::scrub;
use crate::github;
use crate::notify::{self, ChatId, DISCORD, TELEGRAM};
use crate::settings::Settings;
use crate::streak::{local_date, streak};

/// The kind's name, as subjects and items spell it.
pub const KIND: &str = "streak_check";
/// The limit key every check holds: one GitHub token's 5,000 requests an hour
/// are shared by all users, so `PUT /limits/github` paces them all.
pub const GITHUB_KEY: &str = "github";

/// `{"github_login": "octocat", "timezone": "Europe/Berlin",
///   "discord_webhook_url": "https://discord.com/api/webhooks/…",
///   "telegram_chat_id": 123456789}`: at least one channel.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreakPayload {
    pub github_login: String,
    /// The user's IANA zone, where "today" is: the subject's own `timezone`
    /// (an item carries its payload, not its subject's zone).
    #[serde(default = "utc")]
    pub timezone: String,
    /// A Discord webhook URL (it holds the webhook's token: never listed).
    #[serde(default)]
    pub discord_webhook_url: Option<String>,
    #[serde(default)]
    pub telegram_chat_id: Option<ChatId>,
}

fn utc() -> String {
    "UTC".into()
}

impl StreakPayload {
    /// Every rule but the Discord URL's target check, and the zone parsed.
    fn check(&self) -> Result<Tz, String> {
        check_login(&self.github_login)?;
        let zone = self
            .timezone
            .parse::<Tz>()
            .map_err(|_| format!("timezone {:?} is not an IANA time zone", self.timezone))?;
        if self.discord_webhook_url.is_none() && self.telegram_chat_id.is_none() {
            return Err(
                "give at least one channel: discord_webhook_url or telegram_chat_id".into(),
            );
        }
        if let Some(chat) = &self.telegram_chat_id {
            chat.check()?;
        }
        Ok(zone)
    }

    fn check_discord(&self, targets: &TargetPolicy) -> Result<(), String> {
        match &self.discord_webhook_url {
            Some(url) => target::validate_field("discord_webhook_url", url, targets).map(|_| ()),
            None => Ok(()),
        }
    }

    /// The channels this user has, in a fixed order.
    fn channels(&self) -> Vec<&'static str> {
        let mut c = Vec::new();
        if self.discord_webhook_url.is_some() {
            c.push(DISCORD);
        }
        if self.telegram_chat_id.is_some() {
            c.push(TELEGRAM);
        }
        c
    }
}

/// GitHub's login rules: 1 to 39 letters, digits or single inner hyphens.
fn check_login(login: &str) -> Result<(), String> {
    let ok = (1..=39).contains(&login.len())
        && login.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !login.starts_with('-')
        && !login.ends_with('-')
        && !login.contains("--");
    if ok {
        Ok(())
    } else {
        Err(format!("github_login {login:?} is not a GitHub login"))
    }
}

/// The job kind. Register it with `Fanout::new().job(StreakCheck)`.
pub struct StreakCheck;

impl Job for StreakCheck {
    type Payload = StreakPayload;

    fn name(&self) -> &'static str {
        KIND
    }

    fn validate(&self, p: &StreakPayload, targets: &TargetPolicy) -> Result<(), String> {
        p.check()?;
        p.check_discord(targets)
    }

    async fn run(&self, ctx: &Context<'_>, p: StreakPayload) -> Outcome {
        run(ctx, &p).await
    }

    fn redact(&self, payload: &mut Value) {
        if let Some(url) = payload
            .get_mut("discord_webhook_url")
            .filter(|v| !v.is_null())
        {
            *url = Value::from(REDACTED);
        }
    }

    /// GitHub, then Discord and Telegram.
    fn subrequests_per_run(&self) -> i64 {
        3
    }

    fn has_channels(&self) -> bool {
        true
    }

    fn limit_keys(&self, _: &StreakPayload) -> Vec<String> {
        vec![GITHUB_KEY.into()]
    }
}

/// The settings, from the Worker's secrets and vars (its Env on the Worker, the
/// harness's on the host).
fn settings(ctx: &Context<'_>) -> Result<Settings, String> {
    Settings::from_lookup(|name| ctx.secret(name).or_else(|| ctx.var(name)))
}

async fn run(ctx: &Context<'_>, p: &StreakPayload) -> Outcome {
    let started_ms = ctx.now_ms();
    // Checked again, as a webhook is: settings change, queued items do not.
    let zone = match p
        .check()
        .and_then(|zone| p.check_discord(&ctx.config.policy()).map(|_| zone))
    {
        Ok(zone) => zone,
        Err(e) => return Outcome::Fail(format!("not run: {e}")),
    };
    let todo: Vec<&str> = p
        .channels()
        .into_iter()
        .filter(|c| !ctx.is_delivered(c))
        .collect();
    if todo.is_empty() {
        // An earlier run reminded every channel; its commit just never landed.
        return Outcome::Done;
    }
    let settings = match settings(ctx) {
        Ok(s) => s,
        Err(e) => return Outcome::Fail(format!("not run: {e}")),
    };
    let secrets = settings.secrets();

    let request = github::calendar_request(
        &settings.github_api_url,
        &settings.github_token,
        &p.github_login,
        started_ms,
    );
    let days = match ctx.fetch(request).await {
        Ok(answer) => github::read_calendar(&answer, &p.github_login, ctx.now_ms()),
        Err(e) => Err(Answered::from(Outcome::Retry(format!(
            "GitHub: {}",
            scrub(&e, &secrets)
        )))),
    };
    let days = match days {
        Ok(days) => days,
        Err(answered) => return answered.apply(ctx),
    };
    let streak = streak(&days, local_date(ctx.now_ms(), zone));
    if !streak.at_risk() {
        return Outcome::Done;
    }

    let text = notify::message(&p.github_login, &streak);
    let requests: Vec<(&str, Result<Request, String>)> = todo
        .iter()
        .map(|&channel| {
            let request = match channel {
                DISCORD => Ok(notify::discord_request(
                    p.discord_webhook_url.as_deref().unwrap_or_default(),
                    &text,
                )),
                _ => match (&settings.telegram_bot_token, &p.telegram_chat_id) {
                    (Some(token), Some(chat)) => Ok(notify::telegram_request(
                        &settings.telegram_api_url,
                        token,
                        chat,
                        &text,
                    )),
                    _ => Err("not sent: TELEGRAM_BOT_TOKEN is not set".to_string()),
                },
            };
            (channel, request)
        })
        .collect();

    // Both at once, each until it answers or the channel deadline (counted from
    // the run's start, GitHub's time included) passes: a late channel is a
    // transient failure of its own, reported with the other's answer, so the
    // job's own timer never throws a delivered channel's receipt away.
    let deadline_ms = channel_deadline_ms(ctx.timeout_ms);
    let left_ms = (started_ms + deadline_ms - ctx.now_ms()).max(1);
    let signal = ctx.signal.child();
    let answers: Vec<Cell<Option<Answered>>> = requests.iter().map(|_| Cell::new(None)).collect();
    let sends = join_all(requests.iter().zip(&answers).map(|((_, request), answer)| {
        let (signal, secrets) = (&signal, &secrets);
        async move {
            let answered = match request {
                Err(why) => Answered::from(Outcome::Fail(why.clone())),
                Ok(request) => match ctx.outbound().fetch(request.clone(), signal).await {
                    Ok(response) => notify::read_answer(&response, ctx.now_ms()),
                    Err(e) => Answered::from(Outcome::Retry(scrub(&e, secrets))),
                },
            };
            answer.set(Some(answered));
        }
    }));
    if let Either::Right(_) = select(std::pin::pin!(sends), ctx.outbound().sleep(left_ms)).await {
        signal.abort();
    }

    let mut results = ChannelResults::new();
    let mut wait_ms = None;
    for ((channel, _), answer) in requests.iter().zip(answers) {
        let answered = answer.into_inner();
        wait_ms = wait_ms.max(answered.as_ref().and_then(|a| a.retry_after_ms));
        let outcome = receipts::answered_or_timed_out(answered.map(|a| a.outcome), deadline_ms);
        ctx.report_channel(channel, outcome.clone());
        results.insert(channel.to_string(), outcome);
    }
    if let Some(ms) = wait_ms {
        // The longer of the two channels' asks: a retry then suits both.
        ctx.retry_after(ms);
    }
    receipts::outcome(&results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PUBLIC: TargetPolicy = TargetPolicy::PUBLIC;

    fn check(payload: Value) -> Result<(), String> {
        let p: StreakPayload = serde_json::from_value(payload).map_err(|e| e.to_string())?;
        StreakCheck.validate(&p, &PUBLIC)
    }

    #[test]
    fn a_user_with_a_login_a_zone_and_a_channel_is_accepted() {
        assert_eq!(
            check(
                json!({"github_login": "octo-cat", "timezone": "Europe/Berlin", "discord_webhook_url": "https://discord.com/api/webhooks/1/tok"})
            ),
            Ok(())
        );
        assert_eq!(
            check(json!({"github_login": "a", "telegram_chat_id": 123})),
            Ok(())
        );
        let p: StreakPayload =
            serde_json::from_value(json!({"github_login": "a", "telegram_chat_id": "@x"})).unwrap();
        assert_eq!(p.timezone, "UTC");
        assert_eq!(p.channels(), [TELEGRAM]);
    }

    #[test]
    fn bad_users_are_refused_with_the_field_named() {
        for (bad, says) in [
            (
                json!({"github_login": "", "telegram_chat_id": 1}),
                "github_login",
            ),
            (
                json!({"github_login": "-x", "telegram_chat_id": 1}),
                "github_login",
            ),
            (
                json!({"github_login": "a/b", "telegram_chat_id": 1}),
                "github_login",
            ),
            (
                json!({"github_login": "x".repeat(40), "telegram_chat_id": 1}),
                "github_login",
            ),
            (
                json!({"github_login": "a", "timezone": "Mars/Olympus", "telegram_chat_id": 1}),
                "timezone",
            ),
            (json!({"github_login": "a"}), "at least one channel"),
            (
                json!({"github_login": "a", "telegram_chat_id": "news"}),
                "telegram_chat_id",
            ),
            (
                json!({"github_login": "a", "discord_webhook_url": "http://127.0.0.1/x"}),
                "discord_webhook_url host 127.0.0.1",
            ),
            (
                json!({"github_login": "a", "discord_webhook_url": "ftp://x.test"}),
                "discord_webhook_url",
            ),
            (
                json!({"github_login": "a", "telegram_chat_id": 1, "email": "x"}),
                "unknown field",
            ),
        ] {
            let err = check(bad.clone()).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn listings_hide_the_discord_webhook_url() {
        let mut p = json!({"github_login": "a", "discord_webhook_url": "https://discord.com/api/webhooks/1/tok"});
        StreakCheck.redact(&mut p);
        assert_eq!(p["discord_webhook_url"], json!(REDACTED));
        let mut none = json!({"github_login": "a", "telegram_chat_id": 1});
        StreakCheck.redact(&mut none);
        assert_eq!(none, json!({"github_login": "a", "telegram_chat_id": 1}));
    }
}
