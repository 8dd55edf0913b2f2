//! Fakes of the three APIs `examples/streak-reminder` calls, served by the sink
//! beside its webhook routes: GitHub's GraphQL contribution calendar, Discord
//! webhooks and Telegram's Bot API `sendMessage`. Each checks what the real API
//! would refuse (GitHub's bearer token, Telegram's bot token in the path, the
//! body's shape), answers what the test scripted (rate limits and 5xx first,
//! then success) and records every request.
//!
//! Routes:
//! - `POST /github/graphql`: the calendar of `variables.login`, its days ending at
//!   the local date of `variables.to` in the login's zone (so "today" is the
//!   Worker's today whatever the real clock says).
//! - `POST /discord/api/webhooks/{id}/{token}`: 204, as Discord answers a webhook.
//! - `POST /telegram/bot{token}/sendMessage`: 200 `{"ok": true, ...}`.
//! - `POST /fakes/setup`: [`Setup`], replacing the previous one and the record.
//! - `GET /fakes/requests`: every [`FakeRequest`], oldest first.
//!
//! A scripted answer is consumed per key (`github:<login>`, `discord:<id>`,
//! `telegram:<chat id>`): the first request of that key gets the first status,
//! and so on; once the script is used up the API answers normally. A 429 carries
//! the delay the real API would send it with (GitHub `Retry-After`, Discord
//! `Retry-After` and `retry_after`, Telegram `parameters.retry_after`), of
//! [`RETRY_AFTER_SECONDS`].

use crate::sink::client::SinkClient;
use anyhow::Result;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Days, NaiveDate};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// The delay a scripted 429 asks for.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// One GitHub user's calendar: contribution counts per day, oldest first, the
/// last one "today" in `zone`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FakeCalendar {
    pub zone: String,
    pub counts: Vec<u32>,
}

/// What the fakes answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Setup {
    /// The token GitHub accepts (`Authorization: Bearer <token>`).
    pub github_token: String,
    /// The bot token Telegram accepts (in the path).
    pub telegram_bot_token: String,
    /// Calendars by login; another login is "not found", as GitHub says it.
    pub calendars: BTreeMap<String, FakeCalendar>,
    /// Statuses answered first, by key (`github:<login>`, `discord:<id>`,
    /// `telegram:<chat id>`).
    #[serde(default)]
    pub script: BTreeMap<String, Vec<u16>>,
}

/// One request a fake received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FakeRequest {
    /// `github`, `discord` or `telegram`.
    pub api: String,
    /// The login, the webhook id or the chat id (`None` when the body had none).
    pub key: Option<String>,
    /// Whether the credentials were the ones set up (GitHub's bearer token,
    /// Telegram's bot token; Discord's token is the URL's own: always true).
    pub authorized: bool,
    /// What the fake answered.
    pub status: u16,
    /// The message text sent (Discord `content`, Telegram `text`).
    pub text: Option<String>,
    /// Request header names, lowercase (to check no secret travels in another).
    pub header_names: Vec<String>,
    /// Header values that contain a set-up secret, by header name (only
    /// `authorization` for GitHub may).
    pub secret_headers: Vec<String>,
}

#[derive(Default)]
struct Inner {
    setup: Setup,
    script: BTreeMap<String, VecDeque<u16>>,
    requests: Vec<FakeRequest>,
}

#[derive(Default)]
struct Fakes(Mutex<Inner>);

impl Fakes {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The fakes' routes, merged into the sink's router.
pub fn router() -> Router {
    Router::new()
        .route("/github/graphql", post(github))
        .route("/discord/api/webhooks/{id}/{token}", post(discord))
        .route("/telegram/{bot}/sendMessage", post(telegram))
        .route("/fakes/setup", post(setup))
        .route("/fakes/requests", get(requests))
        .with_state(Arc::new(Fakes::default()))
}

/// The local dates of a calendar whose last day is `to`'s date in `zone`.
pub fn calendar_days(
    calendar: &FakeCalendar,
    to: DateTime<chrono::Utc>,
) -> Result<Vec<(NaiveDate, u32)>, String> {
    let zone: Tz = calendar
        .zone
        .parse()
        .map_err(|_| format!("unknown zone {:?}", calendar.zone))?;
    let today = to.with_timezone(&zone).date_naive();
    let n = calendar.counts.len() as u64;
    Ok(calendar
        .counts
        .iter()
        .enumerate()
        .filter_map(|(i, &count)| {
            today
                .checked_sub_days(Days::new(n - 1 - i as u64))
                .map(|d| (d, count))
        })
        .collect())
}

/// The next scripted status for `key`, if any is left.
fn scripted(inner: &mut Inner, key: &str) -> Option<u16> {
    inner.script.get_mut(key).and_then(VecDeque::pop_front)
}

/// A request's header names, and those whose value holds one of the set-up
/// secrets (the GitHub token, the Telegram bot token).
fn header_facts(headers: &HeaderMap, setup: &Setup) -> (Vec<String>, Vec<String>) {
    let secrets = [
        setup.github_token.as_str(),
        setup.telegram_bot_token.as_str(),
    ];
    let names = headers.keys().map(|n| n.as_str().to_string()).collect();
    let with_secret = headers
        .iter()
        .filter(|(_, v)| {
            let v = v.to_str().unwrap_or_default();
            secrets.iter().any(|s| !s.is_empty() && v.contains(s))
        })
        .map(|(n, _)| n.as_str().to_string())
        .collect();
    (names, with_secret)
}

/// A scripted failure as the API would send it.
fn failure(api: &str, status: u16) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let wait = RETRY_AFTER_SECONDS.to_string();
    match (api, status) {
        ("github", 429) => (
            code,
            [("Retry-After", wait)],
            Json(json!({"message": "You have exceeded a secondary rate limit."})),
        )
            .into_response(),
        ("discord", 429) => (
            code,
            [("Retry-After", wait)],
            Json(json!({"message": "You are being rate limited.", "retry_after": RETRY_AFTER_SECONDS as f64, "global": false})),
        )
            .into_response(),
        ("telegram", 429) => (
            code,
            Json(json!({"ok": false, "error_code": 429,
                        "description": format!("Too Many Requests: retry after {RETRY_AFTER_SECONDS}"),
                        "parameters": {"retry_after": RETRY_AFTER_SECONDS}})),
        )
            .into_response(),
        ("telegram", _) => (
            code,
            Json(json!({"ok": false, "error_code": status, "description": "Internal Server Error"})),
        )
            .into_response(),
        _ => (code, "upstream unavailable").into_response(),
    }
}

#[derive(Deserialize)]
struct GraphqlBody {
    query: String,
    variables: GraphqlVariables,
}

#[derive(Deserialize)]
struct GraphqlVariables {
    login: String,
    to: String,
}

async fn github(State(fakes): State<Arc<Fakes>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut inner = fakes.lock();
    let token = inner.setup.github_token.clone();
    let (header_names, secret_headers) = header_facts(&headers, &inner.setup);
    let authorized = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {token}"));
    let parsed: Result<GraphqlBody, _> = serde_json::from_slice(&body);
    let key = parsed.as_ref().ok().map(|b| b.variables.login.clone());
    let (status, response) = if !authorized {
        (
            401,
            (
                StatusCode::UNAUTHORIZED,
                Json(json!({"message": "Bad credentials"})),
            )
                .into_response(),
        )
    } else {
        match parsed {
            Err(e) => (
                400,
                (StatusCode::BAD_REQUEST, format!("body: {e}")).into_response(),
            ),
            Ok(b) if !b.query.contains("contributionCalendar") => (
                400,
                (StatusCode::BAD_REQUEST, "not the calendar query").into_response(),
            ),
            Ok(b) => match scripted(&mut inner, &format!("github:{}", b.variables.login)) {
                Some(status) => (status, failure("github", status)),
                None => github_answer(&inner.setup, &b.variables),
            },
        }
    };
    inner.requests.push(FakeRequest {
        api: "github".into(),
        key,
        authorized,
        status,
        text: None,
        header_names,
        secret_headers,
    });
    response
}

fn github_answer(setup: &Setup, vars: &GraphqlVariables) -> (u16, Response) {
    let Some(calendar) = setup.calendars.get(&vars.login) else {
        let body = json!({"data": {"user": null}, "errors": [{"type": "NOT_FOUND", "path": ["user"],
            "message": format!("Could not resolve to a User with the login of '{}'.", vars.login)}]});
        return (200, Json(body).into_response());
    };
    let days = DateTime::parse_from_rfc3339(&vars.to)
        .map_err(|e| format!("variables.to: {e}"))
        .and_then(|to| calendar_days(calendar, to.to_utc()));
    match days {
        Err(e) => (400, (StatusCode::BAD_REQUEST, e).into_response()),
        Ok(days) => {
            let days: Vec<Value> = days
                .iter()
                .map(|(d, c)| json!({"date": d.to_string(), "contributionCount": c}))
                .collect();
            let body = json!({"data": {"user": {"contributionsCollection": {"contributionCalendar":
                {"weeks": [{"contributionDays": days}]}}}}});
            (200, Json(body).into_response())
        }
    }
}

async fn discord(
    State(fakes): State<Arc<Fakes>>,
    Path((id, _token)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut inner = fakes.lock();
    let (header_names, secret_headers) = header_facts(&headers, &inner.setup);
    let text = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("content").and_then(Value::as_str).map(str::to_string));
    let (status, response) = match &text {
        None => (
            400,
            (
                StatusCode::BAD_REQUEST,
                Json(json!({"message": "Cannot send an empty message", "code": 50006})),
            )
                .into_response(),
        ),
        Some(_) => match scripted(&mut inner, &format!("discord:{id}")) {
            Some(status) => (status, failure("discord", status)),
            None => (204, StatusCode::NO_CONTENT.into_response()),
        },
    };
    inner.requests.push(FakeRequest {
        api: "discord".into(),
        key: Some(id),
        authorized: true,
        status,
        text,
        header_names,
        secret_headers,
    });
    response
}

async fn telegram(
    State(fakes): State<Arc<Fakes>>,
    Path(bot): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut inner = fakes.lock();
    let (header_names, secret_headers) = header_facts(&headers, &inner.setup);
    let authorized = bot == format!("bot{}", inner.setup.telegram_bot_token);
    let parsed = serde_json::from_slice::<Value>(&body).ok();
    let chat = parsed.as_ref().and_then(|v| match v.get("chat_id") {
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    });
    let text = parsed
        .as_ref()
        .and_then(|v| v.get("text").and_then(Value::as_str).map(str::to_string));
    let (status, response) = if !authorized {
        (
            401,
            (
                StatusCode::UNAUTHORIZED,
                Json(json!({"ok": false, "error_code": 401, "description": "Unauthorized"})),
            )
                .into_response(),
        )
    } else {
        match (&chat, &text) {
            (Some(chat), Some(_)) => match scripted(&mut inner, &format!("telegram:{chat}")) {
                Some(status) => (status, failure("telegram", status)),
                None => (200, Json(json!({"ok": true, "result": {"message_id": inner.requests.len()}})).into_response()),
            },
            _ => (400, (StatusCode::BAD_REQUEST, Json(json!({"ok": false, "error_code": 400, "description": "Bad Request: message text is empty"}))).into_response()),
        }
    };
    inner.requests.push(FakeRequest {
        api: "telegram".into(),
        key: chat,
        authorized,
        status,
        text,
        header_names,
        secret_headers,
    });
    response
}

async fn setup(State(fakes): State<Arc<Fakes>>, Json(setup): Json<Setup>) -> StatusCode {
    let mut inner = fakes.lock();
    inner.script = setup
        .script
        .iter()
        .map(|(k, v)| (k.clone(), v.iter().copied().collect()))
        .collect();
    inner.setup = setup;
    inner.requests.clear();
    StatusCode::NO_CONTENT
}

async fn requests(State(fakes): State<Arc<Fakes>>) -> Json<Vec<FakeRequest>> {
    Json(fakes.lock().requests.clone())
}

/// The fakes over HTTP, for the e2e driver.
pub struct FakesClient {
    /// The sink the fakes' routes are merged into.
    sink: SinkClient,
}

impl FakesClient {
    /// `base`: the sink's base URL.
    pub fn new(base: &str) -> FakesClient {
        FakesClient {
            sink: SinkClient::new(base),
        }
    }

    /// `GITHUB_API_URL` pointing at the fake.
    pub fn github_api_url(&self) -> String {
        format!("{}/github", self.sink.base())
    }

    /// `TELEGRAM_API_URL` pointing at the fake.
    pub fn telegram_api_url(&self) -> String {
        format!("{}/telegram", self.sink.base())
    }

    /// `DISCORD_API_URL` pointing at the fake: its webhooks are under `/api/webhooks/`.
    pub fn discord_api_url(&self) -> String {
        format!("{}/discord", self.sink.base())
    }

    /// A Discord webhook URL of the fake, `id` naming it.
    pub fn discord_webhook_url(&self, id: &str, token: &str) -> String {
        format!("{}/discord/api/webhooks/{id}/{token}", self.sink.base())
    }

    pub async fn setup(&self, setup: &Setup) -> Result<()> {
        self.sink.post("/fakes/setup", setup).await
    }

    pub async fn requests(&self) -> Result<Vec<FakeRequest>> {
        self.sink.get("/fakes/requests").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<chrono::Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn a_calendar_ends_at_the_users_local_date() {
        let cal = FakeCalendar {
            zone: "Europe/Berlin".into(),
            counts: vec![1, 2, 0],
        };
        // 23:30 UTC on the 14th is the 15th in Berlin.
        let days = calendar_days(&cal, t("2027-01-14T23:30:00Z")).unwrap();
        let shown: Vec<(String, u32)> = days.iter().map(|(d, c)| (d.to_string(), *c)).collect();
        assert_eq!(
            shown,
            [
                ("2027-01-13".into(), 1),
                ("2027-01-14".into(), 2),
                ("2027-01-15".into(), 0)
            ]
        );
        let ny = FakeCalendar {
            zone: "America/New_York".into(),
            ..cal
        };
        let last = calendar_days(&ny, t("2027-01-14T23:30:00Z")).unwrap();
        assert_eq!(last.last().unwrap().0.to_string(), "2027-01-14");
        let bad = FakeCalendar {
            zone: "Nowhere".into(),
            counts: vec![],
        };
        assert!(calendar_days(&bad, t("2027-01-14T23:30:00Z")).is_err());
    }

    #[test]
    fn a_script_is_consumed_per_key_then_answers_normally() {
        let mut inner = Inner::default();
        inner
            .script
            .insert("discord:a".into(), VecDeque::from([503, 429]));
        assert_eq!(scripted(&mut inner, "discord:a"), Some(503));
        assert_eq!(scripted(&mut inner, "discord:b"), None);
        assert_eq!(scripted(&mut inner, "discord:a"), Some(429));
        assert_eq!(scripted(&mut inner, "discord:a"), None);
    }
}
