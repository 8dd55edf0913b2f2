//! Real receivers' "slow down", as fakes: each answers exactly as its
//! documentation says, with a limiter of its own shape, its window scaled down
//! to seconds (a receiver's dialect and shape matter here, not its hour-long
//! numbers). Served by the sink beside its webhook routes:
//!
//! - `POST /receivers/{dialect}/{subject}`: one call, answered by [`Dialect`];
//! - `GET /receivers/{dialect}/calls`: every [`Call`] it answered, oldest first;
//! - `POST /receivers/reset`: forgets every limiter and call.
//!
//! Each host the sink answers on (`sink::MORE_HOSTS`) is a receiver of its
//! own: its own limiter and record per dialect, as two Discord webhooks are
//! two buckets.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The receivers served, by the name in their path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// GitHub REST, primary limit, refusing with a 403
    /// (docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api:
    /// every answer carries x-ratelimit-limit / -remaining / -used / -reset in
    /// epoch seconds; past it "403 or 429" with remaining 0). A fixed window.
    GithubPrimary403,
    /// The same, refusing with a 429.
    GithubPrimary429,
    /// GitHub's secondary limit (same page: "403 or 429" with `retry-after`
    /// and a message naming it; no budget announced). A sliding window.
    GithubSecondary,
    /// Discord (discord.com/developers/docs/topics/rate-limits: every answer
    /// carries X-RateLimit-Limit / -Remaining / -Reset / -Reset-After /
    /// -Bucket; a 429 adds Retry-After and a body `{"message", "retry_after":
    /// float, "global": false}`). A fixed window per bucket.
    Discord,
    /// Telegram Bot API (core.telegram.org/bots/api#responseparameters and
    /// core.telegram.org/bots/faq: a 429 whose body is `{"ok": false,
    /// "error_code": 429, "description": "Too Many Requests: retry after N",
    /// "parameters": {"retry_after": N}}`, with a Retry-After header). A token
    /// bucket.
    Telegram,
    /// Telegram behind a proxy that drops the header: the body alone.
    TelegramBody,
    /// Shopify REST Admin (shopify.dev/docs/api/usage/limits: a leaky bucket,
    /// every answer carries `X-Shopify-Shop-Api-Call-Limit: used/max`; a 429
    /// carries `Retry-After: 2.0`). Its bucket leaks max per 20 s as Shopify's.
    Shopify,
    /// The IETF RateLimit fields (datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers:
    /// `RateLimit-Policy: "default";q=Q;w=W` and `RateLimit: "default";r=R;t=T`
    /// on every answer; a 429 past the quota). A fixed window.
    Ietf,
    /// A 429 whose Retry-After is an HTTP-date (RFC 9110 §10.2.3), with the
    /// answer's own `Date`. A fixed window.
    HttpDate,
}

impl Dialect {
    pub const ALL: [Dialect; 9] = [
        Dialect::GithubPrimary403,
        Dialect::GithubPrimary429,
        Dialect::GithubSecondary,
        Dialect::Discord,
        Dialect::Telegram,
        Dialect::TelegramBody,
        Dialect::Shopify,
        Dialect::Ietf,
        Dialect::HttpDate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Dialect::GithubPrimary403 => "github-primary-403",
            Dialect::GithubPrimary429 => "github-primary-429",
            Dialect::GithubSecondary => "github-secondary",
            Dialect::Discord => "discord",
            Dialect::Telegram => "telegram",
            Dialect::TelegramBody => "telegram-body",
            Dialect::Shopify => "shopify",
            Dialect::Ietf => "ietf",
            Dialect::HttpDate => "http-date",
        }
    }

    fn parse(name: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Its limit: `quota` calls per `window` (for Shopify: a bucket of `quota`
    /// leaking `quota` per `window`; for Telegram a bucket of `quota`
    /// refilling `quota` per `window`).
    pub fn limit(self) -> (u32, Duration) {
        // About 5 a second each: well under what a local drain sends (about
        // 10 a second on a shared machine), so the receiver's limit, not the
        // machine, sets the makespan.
        match self {
            // 5,000 an hour, scaled: 10 per 2 s.
            Dialect::GithubPrimary403 | Dialect::GithubPrimary429 => (10, Duration::from_secs(2)),
            // "No more than 900 points per minute", scaled: 10 per sliding 2 s.
            // Windows of 2 s where the dialect tells time in whole seconds: in
            // a window of 1 s, a wait rounded up to the second, not the
            // pacing, would set the makespan (in the receiver's own minute or
            // hour it is a rounding of a few per cent).
            Dialect::GithubSecondary => (10, Duration::from_secs(2)),
            // A webhook's bucket, as in the wild: 5 per 2 s.
            Dialect::Discord => (5, Duration::from_secs(2)),
            // About 30 a second to a bot's chats, scaled: a bucket of 5.
            Dialect::Telegram | Dialect::TelegramBody => (5, Duration::from_secs(1)),
            // Shopify's own ratio (40 leaking 2/s: max per 20 s): 100, 5/s.
            Dialect::Shopify => (100, Duration::from_secs(20)),
            // `t=` and an HTTP-date are whole seconds: 2 s windows, as above.
            Dialect::Ietf | Dialect::HttpDate => (10, Duration::from_secs(2)),
        }
    }

    /// Whether it tells its budget on every answer.
    pub fn announces_budget(self) -> bool {
        matches!(
            self,
            Dialect::GithubPrimary403
                | Dialect::GithubPrimary429
                | Dialect::Discord
                | Dialect::Shopify
                | Dialect::Ietf
        )
    }
}

/// One call a receiver answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Call {
    pub subject: String,
    /// Ms since the receiver's first call.
    pub at_ms: u64,
    pub refused: bool,
    /// The answer told the budget.
    pub announced: bool,
    /// The answer told the budget was spent (nothing remains).
    pub spent: bool,
}

/// One receiver's limiter state and record.
#[derive(Default)]
struct Receiver {
    first: Option<SystemTime>,
    /// Fixed window: its start and calls taken in it.
    window_start: Option<SystemTime>,
    taken: u32,
    /// Sliding window: the instants taken.
    recent: VecDeque<SystemTime>,
    /// Token or leaky bucket level, and when it was last updated.
    level: f64,
    level_at: Option<SystemTime>,
    calls: Vec<Call>,
}

/// By dialect and the host called (the `Host` header's name, no port).
type Receivers = Arc<Mutex<BTreeMap<(&'static str, String), Receiver>>>;

fn host_of(headers: &HeaderMap) -> String {
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    host.rsplit_once(':')
        .map_or(host, |(name, _)| name)
        .to_string()
}

pub fn router() -> Router {
    Router::new()
        .route("/receivers/{dialect}/{subject}", post(call))
        .route("/receivers/{dialect}/calls", get(calls))
        .route("/receivers/reset", post(reset))
        .with_state(Receivers::default())
}

/// What the limiter says of one call at `now`.
struct Verdict {
    taken: bool,
    /// Left after this call.
    remaining: u32,
    /// Until the window (or a unit of the bucket) frees.
    reset_in: Duration,
    /// Shopify: the bucket's level after this call.
    used: u32,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn judge(r: &mut Receiver, d: Dialect, now: SystemTime) -> Verdict {
    let (quota, window) = d.limit();
    let since = |t: SystemTime| now.duration_since(t).unwrap_or_default();
    match d {
        Dialect::GithubSecondary => {
            while r.recent.front().is_some_and(|&t| since(t) >= window) {
                r.recent.pop_front();
            }
            let taken = (r.recent.len() as u32) < quota;
            if taken {
                r.recent.push_back(now);
            }
            let reset_in = r
                .recent
                .front()
                .map_or(Duration::ZERO, |&t| window - since(t));
            Verdict {
                taken,
                remaining: quota - r.recent.len() as u32,
                reset_in,
                used: 0,
            }
        }
        Dialect::Telegram | Dialect::TelegramBody | Dialect::Shopify => {
            // Telegram: tokens refill; Shopify: the bucket's level leaks.
            let per_s = f64::from(quota) / secs(window);
            let elapsed = r.level_at.map_or(0.0, |t| secs(since(t)));
            let leak = d == Dialect::Shopify;
            r.level = if r.level_at.is_none() {
                if leak {
                    0.0
                } else {
                    f64::from(quota)
                }
            } else if leak {
                (r.level - per_s * elapsed).max(0.0)
            } else {
                (r.level + per_s * elapsed).min(f64::from(quota))
            };
            r.level_at = Some(now);
            let taken = if leak {
                r.level + 1.0 <= f64::from(quota)
            } else {
                r.level >= 1.0
            };
            if taken {
                r.level += if leak { 1.0 } else { -1.0 };
            }
            let room = if leak {
                f64::from(quota) - r.level
            } else {
                r.level
            };
            Verdict {
                taken,
                remaining: room.floor() as u32,
                reset_in: Duration::from_secs_f64(((1.0 - room).max(0.0)) / per_s),
                used: r.level.ceil() as u32,
            }
        }
        _ => {
            if r.window_start.is_none_or(|t| since(t) >= window) {
                r.window_start = Some(now);
                r.taken = 0;
            }
            let taken = r.taken < quota;
            if taken {
                r.taken += 1;
            }
            Verdict {
                taken,
                remaining: quota - r.taken,
                reset_in: window - since(r.window_start.expect("set above")),
                used: 0,
            }
        }
    }
}

async fn call(
    State(receivers): State<Receivers>,
    Path((dialect, subject)): Path<(String, String)>,
    asked: HeaderMap,
) -> Response {
    let Some(d) = Dialect::parse(&dialect) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let now = SystemTime::now();
    let mut all = receivers.lock().unwrap_or_else(|e| e.into_inner());
    let r = all.entry((d.name(), host_of(&asked))).or_default();
    let first = *r.first.get_or_insert(now);
    let v = judge(r, d, now);
    let (status, headers, body) = answer(d, &v, now);
    let announced = headers.iter().any(|(n, _)| {
        let n = n.to_ascii_lowercase();
        n.contains("ratelimit-remaining") || n == "ratelimit" || n.starts_with("x-shopify")
    });
    r.calls.push(Call {
        subject,
        at_ms: now.duration_since(first).unwrap_or_default().as_millis() as u64,
        refused: !v.taken,
        announced,
        spent: announced && v.remaining == 0,
    });
    drop(all);
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        if let (Ok(n), Ok(v)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            map.insert(n, v);
        }
    }
    (status, map, Json(body)).into_response()
}

fn epoch_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The answer as the receiver's documentation shows it.
fn answer(
    d: Dialect,
    v: &Verdict,
    now: SystemTime,
) -> (StatusCode, Vec<(String, String)>, serde_json::Value) {
    let (quota, window) = d.limit();
    let reset_at = now + v.reset_in;
    let mut h: Vec<(String, String)> = Vec::new();
    let mut add = |n: &str, v: String| h.push((n.to_string(), v));
    add("date", httpdate::fmt_http_date(now));
    let ok = (StatusCode::OK, json!({"ok": true}));
    let (status, body) = match d {
        Dialect::GithubPrimary403 | Dialect::GithubPrimary429 => {
            add("x-ratelimit-limit", quota.to_string());
            add("x-ratelimit-remaining", v.remaining.to_string());
            add("x-ratelimit-used", (quota - v.remaining).to_string());
            // Epoch seconds, rounded up: a reset never early.
            add(
                "x-ratelimit-reset",
                (epoch_s(reset_at).ceil() as u64).to_string(),
            );
            add("x-ratelimit-resource", "core".into());
            if v.taken {
                ok
            } else {
                let status = if d == Dialect::GithubPrimary403 {
                    StatusCode::FORBIDDEN
                } else {
                    StatusCode::TOO_MANY_REQUESTS
                };
                (
                    status,
                    json!({"message": "API rate limit exceeded for user ID 1.",
                    "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}),
                )
            }
        }
        Dialect::GithubSecondary => {
            if v.taken {
                ok
            } else {
                add(
                    "retry-after",
                    (secs(v.reset_in).ceil() as u64).max(1).to_string(),
                );
                (
                    StatusCode::FORBIDDEN,
                    json!({"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}),
                )
            }
        }
        Dialect::Discord => {
            add("x-ratelimit-limit", quota.to_string());
            add("x-ratelimit-remaining", v.remaining.to_string());
            add("x-ratelimit-reset", format!("{:.3}", epoch_s(reset_at)));
            add(
                "x-ratelimit-reset-after",
                format!("{:.3}", secs(v.reset_in)),
            );
            add("x-ratelimit-bucket", "fake-webhook-bucket".into());
            if v.taken {
                (StatusCode::NO_CONTENT, json!(null))
            } else {
                add(
                    "retry-after",
                    (secs(v.reset_in).ceil() as u64).max(1).to_string(),
                );
                add("x-ratelimit-scope", "shared".into());
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    json!({"message": "You are being rate limited.",
                    "retry_after": (secs(v.reset_in) * 1000.0).ceil() / 1000.0, "global": false}),
                )
            }
        }
        Dialect::Telegram | Dialect::TelegramBody => {
            if v.taken {
                (
                    StatusCode::OK,
                    json!({"ok": true, "result": {"message_id": 1}}),
                )
            } else {
                let n = (secs(v.reset_in).ceil() as u64).max(1);
                if d == Dialect::Telegram {
                    add("retry-after", n.to_string());
                }
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    json!({"ok": false, "error_code": 429,
                    "description": format!("Too Many Requests: retry after {n}"),
                    "parameters": {"retry_after": n}}),
                )
            }
        }
        Dialect::Shopify => {
            add(
                "x-shopify-shop-api-call-limit",
                format!("{}/{quota}", v.used),
            );
            if v.taken {
                ok
            } else {
                add("retry-after", "2.0".into());
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    json!({"errors": "Exceeded 2 calls per second for api client. Reduce request rates to resume uninterrupted service."}),
                )
            }
        }
        Dialect::Ietf => {
            let w = window.as_secs().max(1);
            add("ratelimit-policy", format!("\"default\";q={quota};w={w}"));
            let t = secs(v.reset_in).ceil() as u64;
            add("ratelimit", format!("\"default\";r={};t={t}", v.remaining));
            if v.taken {
                ok
            } else {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    json!({"title": "Too Many Requests"}),
                )
            }
        }
        Dialect::HttpDate => {
            if v.taken {
                ok
            } else {
                // Whole seconds, rounded up past the reset.
                let at = UNIX_EPOCH + Duration::from_secs(epoch_s(reset_at).ceil() as u64);
                add("retry-after", httpdate::fmt_http_date(at));
                (StatusCode::TOO_MANY_REQUESTS, json!(null))
            }
        }
    };
    (status, h, body)
}

async fn calls(
    State(receivers): State<Receivers>,
    Path(dialect): Path<String>,
    asked: HeaderMap,
) -> Response {
    let all = receivers.lock().unwrap_or_else(|e| e.into_inner());
    let calls = Dialect::parse(&dialect)
        .and_then(|d| all.get(&(d.name(), host_of(&asked))))
        .map(|r| r.calls.clone())
        .unwrap_or_default();
    Json(calls).into_response()
}

async fn reset(State(receivers): State<Receivers>) -> StatusCode {
    receivers.lock().unwrap_or_else(|e| e.into_inner()).clear();
    StatusCode::NO_CONTENT
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(d: Dialect, at_ms: &[u64]) -> Vec<(bool, u32)> {
        let mut r = Receiver::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        at_ms
            .iter()
            .map(|&ms| {
                let v = judge(&mut r, d, t0 + Duration::from_millis(ms));
                (v.taken, v.remaining)
            })
            .collect()
    }

    #[test]
    fn a_fixed_window_takes_its_quota_then_refuses_until_it_resets() {
        // 10 per 2 s.
        let mut at: Vec<u64> = (0..11).map(|i| i * 10).collect();
        at.extend([1_999, 2_000]);
        let got = calls(Dialect::Ietf, &at);
        let taken: Vec<bool> = got.iter().map(|g| g.0).collect();
        let mut expected = vec![true; 10];
        expected.extend([false, false, true]);
        assert_eq!(taken, expected);
        assert_eq!(got[9].1, 0, "the tenth says nothing remains");
    }

    #[test]
    fn a_sliding_window_frees_each_slot_a_window_after_it_was_taken() {
        // 10 per sliding 2 s: ten taken 100 ms apart, the eleventh refused,
        // then one slot frees 2 s after each was taken.
        let mut at: Vec<u64> = (0..11).map(|i| i * 100).collect();
        at.extend([2_000, 2_050, 2_100]);
        let got = calls(Dialect::GithubSecondary, &at);
        let taken: Vec<bool> = got.iter().map(|g| g.0).collect();
        let mut expected = vec![true; 10];
        expected.extend([false, true, false, true]);
        assert_eq!(taken, expected);
    }

    #[test]
    fn shopifys_bucket_leaks_and_telegrams_refills() {
        // A bucket of 100 leaking 5 a second: full after 100 at once.
        let mut at: Vec<u64> = vec![0; 101];
        at.push(200);
        let got = calls(Dialect::Shopify, &at);
        assert!(got[..100].iter().all(|g| g.0));
        assert_eq!(got[100], (false, 0));
        assert!(got[101].0, "one leaked out in 200 ms");
        // A bucket of 5 refilling 5 a second.
        let got = calls(Dialect::Telegram, &[0, 0, 0, 0, 0, 0, 200]);
        let taken: Vec<bool> = got.iter().map(|g| g.0).collect();
        assert_eq!(taken, [true, true, true, true, true, false, true]);
    }

    #[test]
    fn each_refusal_is_worded_as_its_documentation_says() {
        let now = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let refused = Verdict {
            taken: false,
            remaining: 0,
            reset_in: Duration::from_millis(1_337),
            used: 40,
        };
        let header = |h: &[(String, String)], n: &str| {
            h.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
        };
        let (s, h, _) = answer(Dialect::GithubPrimary403, &refused, now);
        assert_eq!(s, StatusCode::FORBIDDEN);
        assert_eq!(
            header(&h, "x-ratelimit-reset").as_deref(),
            Some("1795000002")
        );
        let (s, h, body) = answer(Dialect::Discord, &refused, now);
        assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&h, "retry-after").as_deref(), Some("2"));
        assert_eq!(
            header(&h, "x-ratelimit-reset-after").as_deref(),
            Some("1.337")
        );
        assert_eq!(body["retry_after"], 1.337);
        let (_, h, body) = answer(Dialect::TelegramBody, &refused, now);
        assert_eq!(header(&h, "retry-after"), None);
        assert_eq!(body["parameters"]["retry_after"], 2);
        let (_, h, _) = answer(Dialect::Shopify, &refused, now);
        assert_eq!(header(&h, "retry-after").as_deref(), Some("2.0"));
        assert_eq!(
            header(&h, "x-shopify-shop-api-call-limit").as_deref(),
            Some("40/100")
        );
        let (_, h, _) = answer(Dialect::HttpDate, &refused, now);
        assert_eq!(
            header(&h, "retry-after").as_deref(),
            Some("Wed, 18 Nov 2026 11:06:42 GMT")
        );
    }
}
