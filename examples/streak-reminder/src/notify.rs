//! The two channels, pure: the reminder's text, a Discord webhook POST, a
//! Telegram Bot API `sendMessage`, and what their answers mean (as a webhook's:
//! 2xx delivered; 408, 425, 429 and 5xx retried after the delay they ask for;
//! other statuses refused for good, with the API's text).

use cron_fanout::jobs::webhook::{classify_status, Answered};
use cron_fanout::jobs::{Outcome, Request, Response};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::answers::{cut, word};
use crate::streak::Streak;

/// The receipts' channel names.
pub const DISCORD: &str = "discord";
pub const TELEGRAM: &str = "telegram";

/// A Telegram chat: its numeric id, or `@channelname`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ChatId {
    Id(i64),
    Name(String),
}

impl ChatId {
    /// A numeric id (also as text) or `@` and a name.
    pub fn check(&self) -> Result<(), String> {
        match self {
            ChatId::Id(_) => Ok(()),
            ChatId::Name(n) if n.parse::<i64>().is_ok() => Ok(()),
            ChatId::Name(n)
                if n.len() > 1
                    && n.len() <= 64
                    && n.starts_with('@')
                    && n[1..]
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                Ok(())
            }
            ChatId::Name(_) => {
                Err("telegram_chat_id must be a chat id (a number) or @channelname".into())
            }
        }
    }
}

/// The reminder.
pub fn message(login: &str, streak: &Streak) -> String {
    let days = if streak.current == 1 { "day" } else { "days" };
    format!(
        "{login}: your GitHub streak of {} {days} ends at midnight: no contribution yet today ({}).",
        streak.current, streak.today
    )
}

/// A Discord webhook execution. Mentions are off: the text names a login, and
/// `@everyone` in one must not ping a server.
pub fn discord_request(webhook_url: &str, text: &str) -> Request {
    let body = json!({"content": text, "allowed_mentions": {"parse": []}});
    Request::post_json(webhook_url, body.to_string())
}

/// `POST {TELEGRAM_API_URL}/bot{token}/sendMessage` (the token is part of the
/// path: Telegram has no other way).
pub fn telegram_request(api_url: &str, bot_token: &str, chat: &ChatId, text: &str) -> Request {
    let body = json!({"chat_id": chat, "text": text});
    Request::post_json(
        &format!("{api_url}/bot{bot_token}/sendMessage"),
        body.to_string(),
    )
}

/// What a channel's answer, received at `now_ms`, means. A permanent failure
/// keeps the API's own words: Telegram's `description`, Discord's `message`,
/// else the text.
pub fn read_answer(response: &Response, now_ms: i64) -> Answered {
    let outcome = match classify_status(response.status) {
        Outcome::Fail(why) => match api_text(&response.text_read()) {
            Some(text) => Outcome::Fail(format!("{why}: {text}")),
            None => Outcome::Fail(why),
        },
        other => other,
    };
    let retry = matches!(outcome, Outcome::Retry(_));
    let word = word(response, now_ms);
    Answered {
        // The API saying "slow down" (a 429, a 503 with a wait): no attempt
        // spent on it.
        refused: word.refusal && retry,
        retry_after_ms: word.wait_ms(now_ms).filter(|_| retry),
        // A budget the API announced and this answer spent pauses its host.
        paced: cron_fanout::core::flow::pace::paced(&word, now_ms),
        outcome,
    }
}

fn api_text(body: &str) -> Option<String> {
    let said = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.get("description")
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    Some(cut(&said.unwrap_or_else(|| body.to_string()))).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    use crate::answers::response as answer;

    #[test]
    fn the_reminder_names_the_streak_and_the_day() {
        let s = Streak {
            today: NaiveDate::from_ymd_opt(2026, 11, 24).unwrap(),
            contributed_today: false,
            current: 12,
        };
        assert_eq!(
            message("octocat", &s),
            "octocat: your GitHub streak of 12 days ends at midnight: no contribution yet today (2026-11-24)."
        );
        assert!(message("octocat", &Streak { current: 1, ..s }).contains("of 1 day ends"));
    }

    #[test]
    fn discord_gets_the_text_with_mentions_off() {
        let r = discord_request("https://discord.com/api/webhooks/1/tok", "hi @everyone");
        assert_eq!(r.url, "https://discord.com/api/webhooks/1/tok");
        let body: Value = serde_json::from_str(r.body.as_deref().unwrap()).unwrap();
        assert_eq!(
            body,
            json!({"content": "hi @everyone", "allowed_mentions": {"parse": []}})
        );
    }

    #[test]
    fn telegram_gets_send_message_with_the_chat() {
        let r = telegram_request(
            "https://api.telegram.org",
            "123:abc",
            &ChatId::Id(-100),
            "hi",
        );
        assert_eq!(r.url, "https://api.telegram.org/bot123:abc/sendMessage");
        let body: Value = serde_json::from_str(r.body.as_deref().unwrap()).unwrap();
        assert_eq!(body, json!({"chat_id": -100, "text": "hi"}));
        let r = telegram_request("https://t.test", "t", &ChatId::Name("@news".into()), "hi");
        assert!(r.body.unwrap().contains("\"chat_id\":\"@news\""));
    }

    #[test]
    fn chat_ids_are_numbers_or_channel_names() {
        for ok in [
            ChatId::Id(42),
            ChatId::Name("-100123".into()),
            ChatId::Name("@my_channel".into()),
        ] {
            assert_eq!(ok.check(), Ok(()), "{ok:?}");
        }
        for bad in ["", "@", "news", "@a b", "@x/../y"] {
            assert!(ChatId::Name(bad.into()).check().is_err(), "{bad}");
        }
    }

    fn read(response: &Response) -> Answered {
        read_answer(response, 1_792_567_680_000)
    }

    #[test]
    fn answers_map_as_a_webhooks_with_the_apis_delay_and_words() {
        assert_eq!(read(&answer(204, &[], "")).outcome, Outcome::Done);
        let limited = read(&answer(
            429,
            &[],
            r#"{"retry_after": 2.5, "message": "rate limited"}"#,
        ));
        assert_eq!(limited.outcome, Outcome::Retry("HTTP 429".into()));
        assert_eq!(limited.retry_after_ms, Some(2_500));
        let down = read(&answer(503, &[("Retry-After", "4")], "upstream"));
        assert_eq!(
            (down.outcome, down.retry_after_ms),
            (Outcome::Retry("HTTP 503".into()), Some(4_000))
        );
        let telegram = read(&answer(
            400,
            &[],
            r#"{"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}"#,
        ));
        assert_eq!(
            telegram.outcome,
            Outcome::Fail("HTTP 400: Bad Request: chat not found".into())
        );
        assert_eq!(telegram.retry_after_ms, None);
        let discord = read(&answer(
            404,
            &[],
            r#"{"message": "Unknown Webhook", "code": 10015}"#,
        ));
        assert_eq!(
            discord.outcome,
            Outcome::Fail("HTTP 404: Unknown Webhook".into())
        );
        let gone = read(&answer(410, &[("Retry-After", "9")], ""));
        assert_eq!(
            (gone.outcome, gone.retry_after_ms),
            (Outcome::Fail("HTTP 410".into()), None)
        );
    }
}
