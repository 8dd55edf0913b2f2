//! The sink's fakes of GitHub, Discord and Telegram over real HTTP: what they
//! refuse, what they answer once scripted and after, what they record.

use loadtest::sink;
use loadtest::sink::fakes::{FakeCalendar, FakesClient, Setup};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const GITHUB_TOKEN: &str = "ghp_fake_token";
const BOT_TOKEN: &str = "123:bot-token";

fn setup() -> Setup {
    Setup {
        github_token: GITHUB_TOKEN.into(),
        telegram_bot_token: BOT_TOKEN.into(),
        calendars: BTreeMap::from([(
            "ada".to_string(),
            FakeCalendar {
                zone: "Europe/Berlin".into(),
                counts: vec![3, 0],
            },
        )]),
        script: BTreeMap::from([
            ("github:ada".to_string(), vec![429]),
            ("discord:w1".to_string(), vec![503]),
            ("telegram:42".to_string(), vec![429]),
        ]),
    }
}

async fn graphql(fakes: &FakesClient, token: &str, login: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/graphql", fakes.github_api_url()))
        .header("Authorization", format!("Bearer {token}"))
        .json(&json!({"query": "query { contributionCalendar }",
                      "variables": {"login": login, "from": "2026-01-14T23:30:00Z", "to": "2027-01-14T23:30:00Z"}}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn github_checks_the_token_rate_limits_as_scripted_then_answers_the_calendar() {
    let sink = sink::start(0, "secret").await.unwrap();
    let fakes = FakesClient::new(&sink.url());
    fakes.setup(&setup()).await.unwrap();

    assert_eq!(graphql(&fakes, "wrong", "ada").await.status(), 401);
    let limited = graphql(&fakes, GITHUB_TOKEN, "ada").await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "1");
    let ok: Value = graphql(&fakes, GITHUB_TOKEN, "ada")
        .await
        .json()
        .await
        .unwrap();
    // The last day is `to`'s date in Berlin: the 15th.
    assert_eq!(
        ok["data"]["user"]["contributionsCollection"]["contributionCalendar"]["weeks"][0]
            ["contributionDays"],
        json!([{"date": "2027-01-14", "contributionCount": 3}, {"date": "2027-01-15", "contributionCount": 0}])
    );
    let unknown: Value = graphql(&fakes, GITHUB_TOKEN, "nobody")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(unknown["errors"][0]["type"], "NOT_FOUND");

    let seen: Vec<(String, u16, bool)> = fakes
        .requests()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.key.unwrap_or_default(), r.status, r.authorized))
        .collect();
    assert_eq!(
        seen,
        [
            ("ada".into(), 401, false),
            ("ada".into(), 429, true),
            ("ada".into(), 200, true),
            ("nobody".into(), 200, true)
        ]
    );
}

#[tokio::test]
async fn discord_and_telegram_answer_as_scripted_then_deliver() {
    let sink = sink::start(0, "secret").await.unwrap();
    let fakes = FakesClient::new(&sink.url());
    fakes.setup(&setup()).await.unwrap();
    let http = reqwest::Client::new();
    let discord = fakes.discord_webhook_url("w1", "tok");
    let post_discord = || http.post(&discord).json(&json!({"content": "hi"})).send();
    assert_eq!(post_discord().await.unwrap().status(), 503);
    assert_eq!(post_discord().await.unwrap().status(), 204);

    let send = |bot: &str| {
        http.post(format!("{}/bot{bot}/sendMessage", fakes.telegram_api_url()))
            .json(&json!({"chat_id": 42, "text": "hi"}))
            .send()
    };
    assert_eq!(send("wrong").await.unwrap().status(), 401);
    let limited: Value = send(BOT_TOKEN).await.unwrap().json().await.unwrap();
    assert_eq!(limited["parameters"]["retry_after"], 1);
    let sent: Value = send(BOT_TOKEN).await.unwrap().json().await.unwrap();
    assert_eq!(sent["ok"], true);

    let seen: Vec<(String, String, u16)> = fakes
        .requests()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.api, r.key.unwrap_or_default(), r.status))
        .collect();
    assert_eq!(
        seen,
        [
            ("discord".into(), "w1".into(), 503),
            ("discord".into(), "w1".into(), 204),
            ("telegram".into(), "42".into(), 401),
            ("telegram".into(), "42".into(), 429),
            ("telegram".into(), "42".into(), 200)
        ]
    );
}
