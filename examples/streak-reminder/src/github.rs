//! GitHub's GraphQL API, pure: the contribution-calendar request and what its
//! answer means (the calendar's days, or an outcome: rate limits and 5xx are
//! retried, a missing user or a refused token is not).

use chrono::{DateTime, TimeDelta};
use cron_fanout::jobs::webhook::{classify_answer, Answered};
use cron_fanout::jobs::{Outcome, Request, Response};
use serde::Deserialize;
use serde_json::json;

use crate::answers::{cut, word};
use crate::streak::Day;

/// The contribution calendar of one user between two instants (GitHub allows
/// at most a year between them).
pub const QUERY: &str = "query($login: String!, $from: DateTime!, $to: DateTime!) { \
user(login: $login) { contributionsCollection(from: $from, to: $to) { \
contributionCalendar { weeks { contributionDays { date contributionCount } } } } } }";

/// How far back the calendar is read: a streak longer than this shows as this.
pub const CALENDAR_DAYS: i64 = 364;

/// `POST {GITHUB_API_URL}/graphql` for `login`'s calendar up to `now_ms`.
pub fn calendar_request(api_url: &str, token: &str, login: &str, now_ms: i64) -> Request {
    let to = DateTime::from_timestamp_millis(now_ms).expect("a clock reading is in range");
    let from = to - TimeDelta::days(CALENDAR_DAYS);
    let body = json!({
        "query": QUERY,
        "variables": {"login": login, "from": from.to_rfc3339(), "to": to.to_rfc3339()},
    });
    let mut request = Request::post_json(&format!("{api_url}/graphql"), body.to_string())
        .header("Authorization", &format!("Bearer {token}"))
        // GitHub refuses API requests without a User-Agent.
        .header("User-Agent", "cron-fanout-streak-reminder");
    request.read_body = true;
    request
}

#[derive(Deserialize)]
struct GraphqlAnswer {
    data: Option<Data>,
    #[serde(default)]
    errors: Vec<GraphqlError>,
}

#[derive(Deserialize)]
struct Data {
    user: Option<User>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct User {
    contributions_collection: Collection,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Collection {
    contribution_calendar: Calendar,
}

#[derive(Deserialize)]
struct Calendar {
    weeks: Vec<Week>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Week {
    contribution_days: Vec<ContributionDay>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContributionDay {
    date: String,
    contribution_count: u32,
}

#[derive(Deserialize)]
struct GraphqlError {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    message: String,
}

/// What GitHub's answer means at `now_ms`: the calendar's days, or the item's
/// outcome. A rate limit (429, or a 403 with `Retry-After` or
/// `x-ratelimit-remaining: 0`, or a `RATE_LIMITED` GraphQL error) is a retry
/// after the delay GitHub names; other statuses map as a webhook's answers;
/// an unknown login fails for good.
pub fn read_calendar(response: &Response, login: &str, now_ms: i64) -> Result<Vec<Day>, Answered> {
    let status = response.status;
    if status == 403 || status == 429 {
        if let Some(wait_ms) = rate_limit_wait_ms(response, now_ms) {
            return Err(Answered {
                outcome: Outcome::Retry(format!("GitHub: HTTP {status}: rate limited")),
                retry_after_ms: Some(wait_ms),
                refused: true,
                paced: cron_fanout::core::flow::pace::paced(&word(response, now_ms), now_ms),
            });
        }
    }
    if !(200..300).contains(&status) {
        let answered = classify_answer(response, now_ms);
        let outcome = match answered.outcome {
            Outcome::Retry(why) => Outcome::Retry(format!("GitHub: {why}")),
            Outcome::Fail(why) => Outcome::Fail(format!("GitHub: {why}")),
            Outcome::Done => unreachable!("only a 2xx is done"),
        };
        return Err(Answered {
            outcome,
            ..answered
        });
    }
    let text = response
        .text()
        .map_err(|e| Answered::from(Outcome::Retry(format!("GitHub: {e}"))))?;
    let answer: GraphqlAnswer = serde_json::from_str(text)
        .map_err(|e| Answered::from(Outcome::Retry(format!("GitHub: unreadable answer: {e}"))))?;
    if answer
        .errors
        .iter()
        .any(|e| e.kind.as_deref() == Some("RATE_LIMITED"))
    {
        return Err(Answered {
            outcome: Outcome::Retry("GitHub: rate limited".into()),
            retry_after_ms: word(response, now_ms).wait_ms(now_ms),
            refused: true,
            paced: cron_fanout::core::flow::pace::paced(&word(response, now_ms), now_ms),
        });
    }
    match answer.data.and_then(|d| d.user) {
        Some(user) => user
            .contributions_collection
            .contribution_calendar
            .weeks
            .into_iter()
            .flat_map(|w| w.contribution_days)
            .map(|d| match d.date.parse() {
                Ok(date) => Ok(Day {
                    date,
                    count: d.contribution_count,
                }),
                Err(_) => Err(Answered::from(Outcome::Retry(format!(
                    "GitHub: unreadable answer: date {:?}",
                    cut(&d.date)
                )))),
            })
            .collect(),
        None => Err(Answered::from(Outcome::Fail(match answer.errors.first() {
            Some(e) if e.kind.as_deref() != Some("NOT_FOUND") => {
                format!("GitHub: {}", cut(&e.message))
            }
            _ => format!("GitHub user {login:?} not found"),
        }))),
    }
}

/// How long a rate-limited answer asks to wait, as cron-fanout's reader says
/// (`Retry-After`, else until `x-ratelimit-reset`), a minute for a spent budget
/// (`x-ratelimit-remaining: 0`) that names no reset; `None` when the answer
/// names no wait (a `403` without a rate-limit signal is GitHub's "no").
fn rate_limit_wait_ms(response: &Response, now_ms: i64) -> Option<i64> {
    let word = word(response, now_ms);
    let spent = word.announced.is_some_and(|b| b.remaining == Some(0));
    word.wait_ms(now_ms)
        .or(spent.then_some(60_000))
        .filter(|_| word.refusal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::response as status;
    use serde_json::Value;

    const NOW: i64 = 1_795_521_600_000; // 2026-11-24T12:00:00Z

    fn ok(body: Value) -> Response {
        status(200, &[], &body.to_string())
    }

    fn days_answer(weeks: Value) -> Value {
        json!({"data": {"user": {"contributionsCollection": {"contributionCalendar": {"weeks": weeks}}}}})
    }

    #[test]
    fn the_request_asks_for_a_year_of_calendar_with_the_token_and_a_user_agent() {
        let r = calendar_request("https://api.github.com", "ghp_secret", "octocat", NOW);
        assert_eq!(r.url, "https://api.github.com/graphql");
        assert_eq!(r.method, "POST");
        assert_eq!(r.header_value("Authorization"), Some("Bearer ghp_secret"));
        assert!(r.header_value("User-Agent").is_some());
        assert!(r.read_body);
        let body: Value = serde_json::from_str(r.body.as_deref().unwrap()).unwrap();
        assert_eq!(body["query"], json!(QUERY));
        assert_eq!(
            body["variables"],
            json!({"login": "octocat", "from": "2025-11-25T12:00:00+00:00", "to": "2026-11-24T12:00:00+00:00"})
        );
        // The token is in the header only.
        assert!(!r.body.unwrap().contains("ghp_secret"));
    }

    #[test]
    fn the_calendars_weeks_become_days() {
        let answer = days_answer(json!([
            {"contributionDays": [{"date": "2026-11-22", "contributionCount": 0}, {"date": "2026-11-23", "contributionCount": 3}]},
            {"contributionDays": [{"date": "2026-11-24", "contributionCount": 1}]}
        ]));
        let days = read_calendar(&ok(answer), "octocat", NOW).unwrap();
        let shown: Vec<(String, u32)> =
            days.iter().map(|d| (d.date.to_string(), d.count)).collect();
        assert_eq!(
            shown,
            [
                ("2026-11-22".into(), 0),
                ("2026-11-23".into(), 3),
                ("2026-11-24".into(), 1)
            ]
        );
        assert_eq!(
            read_calendar(&ok(days_answer(json!([]))), "octocat", NOW).unwrap(),
            []
        );
    }

    #[test]
    fn an_unknown_login_fails_for_good() {
        let answer = json!({"data": {"user": null}, "errors": [{"type": "NOT_FOUND", "message": "Could not resolve to a User with the login of 'nobody'."}]});
        let err = read_calendar(&ok(answer), "nobody", NOW).unwrap_err();
        assert_eq!(
            err.outcome,
            Outcome::Fail("GitHub user \"nobody\" not found".into())
        );
        let other = json!({"data": null, "errors": [{"message": "Something went wrong"}]});
        let err = read_calendar(&ok(other), "x", NOW).unwrap_err();
        assert_eq!(
            err.outcome,
            Outcome::Fail("GitHub: Something went wrong".into())
        );
    }

    #[test]
    fn a_429_is_retried_after_its_retry_after() {
        let err = read_calendar(&status(429, &[("Retry-After", "30")], ""), "x", NOW).unwrap_err();
        assert_eq!(
            err.outcome,
            Outcome::Retry("GitHub: HTTP 429: rate limited".into())
        );
        assert_eq!(err.retry_after_ms, Some(30_000));
        // Without one: a retry with the backoff.
        let err = read_calendar(&status(429, &[], ""), "x", NOW).unwrap_err();
        assert_eq!(err.outcome, Outcome::Retry("GitHub: HTTP 429".into()));
        assert_eq!(err.retry_after_ms, None);
    }

    #[test]
    fn a_403_of_a_spent_rate_limit_waits_for_its_reset() {
        let reset = (NOW / 1_000 + 600).to_string();
        let spent = status(
            403,
            &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset),
            ],
            "",
        );
        let err = read_calendar(&spent, "x", NOW).unwrap_err();
        assert_eq!(
            err.outcome,
            Outcome::Retry("GitHub: HTTP 403: rate limited".into())
        );
        assert_eq!(err.retry_after_ms, Some(600_000));
        // A 403 that is no rate limit (a token without access) fails for good.
        let refused = status(
            403,
            &[("x-ratelimit-remaining", "4999")],
            "Resource not accessible",
        );
        let err = read_calendar(&refused, "x", NOW).unwrap_err();
        assert_eq!(
            err.outcome,
            Outcome::Fail("GitHub: HTTP 403: Resource not accessible".into())
        );
    }

    #[test]
    fn a_rate_limited_graphql_error_is_retried() {
        let answer =
            json!({"errors": [{"type": "RATE_LIMITED", "message": "API rate limit exceeded"}]});
        let err = read_calendar(&ok(answer), "x", NOW).unwrap_err();
        assert_eq!(err.outcome, Outcome::Retry("GitHub: rate limited".into()));
    }

    #[test]
    fn server_errors_retry_and_a_bad_token_fails() {
        let err = read_calendar(&status(502, &[], "bad gateway"), "x", NOW).unwrap_err();
        assert_eq!(err.outcome, Outcome::Retry("GitHub: HTTP 502".into()));
        let err = read_calendar(
            &status(401, &[], "{\"message\":\"Bad credentials\"}"),
            "x",
            NOW,
        )
        .unwrap_err();
        assert_eq!(
            err.outcome,
            Outcome::Fail("GitHub: HTTP 401: {\"message\":\"Bad credentials\"}".into())
        );
        let err = read_calendar(&ok(json!("<html>")), "x", NOW).unwrap_err();
        assert!(
            matches!(err.outcome, Outcome::Retry(ref why) if why.starts_with("GitHub: unreadable answer"))
        );
    }
}
