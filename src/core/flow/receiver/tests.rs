//! Each receiver's real answers (status, headers, body) as their documentation
//! shows them, and what the reader makes of each.

use super::*;

/// Our now: Wed, 18 Nov 2026 11:06:40 GMT.
const NOW: i64 = 1_795_000_000_000;
const NOW_DATE: &str = "Wed, 18 Nov 2026 11:06:40 GMT";
/// RETRY_MAX_MS's default: 30 min.
const CAP: i64 = 1_800_000;

fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Word {
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    read(status, &headers, body.as_bytes(), NOW, CAP)
}

/// A fixture: the answer, then what it must read as.
struct Case {
    what: &'static str,
    status: u16,
    headers: &'static [(&'static str, &'static str)],
    body: &'static str,
    refusal: bool,
    wait_ms: Option<i64>,
    source: Option<Signal>,
}

fn check(cases: &[Case]) {
    for c in cases {
        let word = answer(c.status, c.headers, c.body);
        assert_eq!(word.refusal, c.refusal, "{}: refusal", c.what);
        assert_eq!(word.wait_ms(NOW), c.wait_ms, "{}: wait", c.what);
        assert_eq!(word.source, c.source, "{}: source", c.what);
    }
}

#[test]
fn github_primary_and_secondary_limits() {
    check(&[
        // docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
        // ("Exceeding the primary rate limit": 403 or 429, x-ratelimit-remaining
        // 0, x-ratelimit-reset in UTC epoch seconds).
        Case {
            what: "GitHub primary, 403",
            status: 403,
            headers: &[
                ("date", NOW_DATE),
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-used", "5000"),
                ("x-ratelimit-reset", "1795000090"),
                ("x-ratelimit-resource", "core"),
            ],
            body: r#"{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}"#,
            refusal: true,
            wait_ms: Some(90_000),
            source: Some(Signal::Reset),
        },
        Case {
            what: "GitHub primary, 429",
            status: 429,
            headers: &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1795000090"),
            ],
            body: "",
            refusal: true,
            wait_ms: Some(90_000),
            source: Some(Signal::Reset),
        },
        // Same page, "Exceeding the secondary rate limit": a retry-after header
        // in seconds, with a 403 or a 429.
        Case {
            what: "GitHub secondary, 403 with retry-after",
            status: 403,
            headers: &[("retry-after", "60"), ("x-ratelimit-remaining", "4999")],
            body: r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}"#,
            refusal: true,
            wait_ms: Some(60_000),
            source: Some(Signal::RetryAfter),
        },
        // The secondary limit's message alone is a signal: wait per the backoff.
        Case {
            what: "GitHub secondary, 403 with the message only",
            status: 403,
            headers: &[],
            body: r#"{"message":"You have exceeded a secondary rate limit and have been temporarily blocked from content creation."}"#,
            refusal: true,
            wait_ms: None,
            source: None,
        },
        // A 403 with a budget left and no rate-limit word is GitHub's "no".
        Case {
            what: "GitHub 403 forbidden",
            status: 403,
            headers: &[
                ("x-ratelimit-remaining", "4999"),
                ("x-ratelimit-reset", "1795000090"),
            ],
            body: r#"{"message":"Resource not accessible by integration"}"#,
            refusal: false,
            wait_ms: Some(90_000),
            source: Some(Signal::Reset),
        },
    ]);
}

#[test]
fn discord_telegram_and_shopify_refusals() {
    check(&[
        // discord.com/developers/docs/topics/rate-limits ("Exceeding A Rate
        // Limit"): Retry-After in whole seconds, X-RateLimit-Reset-After and the
        // body's retry_after precise.
        Case {
            what: "Discord, Retry-After first",
            status: 429,
            headers: &[
                ("Retry-After", "2"),
                ("X-RateLimit-Limit", "5"),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "1795000001.337"),
                ("X-RateLimit-Reset-After", "1.337"),
                ("X-RateLimit-Bucket", "abcd1234"),
                ("X-RateLimit-Scope", "user"),
            ],
            body: r#"{"message":"You are being rate limited.","retry_after":1.337,"global":false}"#,
            refusal: true,
            wait_ms: Some(2_000),
            source: Some(Signal::RetryAfter),
        },
        Case {
            what: "Discord, X-RateLimit-Reset-After without Retry-After",
            status: 429,
            headers: &[("X-RateLimit-Reset-After", "1.337")],
            body: "",
            refusal: true,
            wait_ms: Some(1_337),
            source: Some(Signal::ResetAfter),
        },
        Case {
            what: "Discord, the body alone",
            status: 429,
            headers: &[],
            body: r#"{"message":"You are being rate limited.","retry_after":1.337,"global":false}"#,
            refusal: true,
            wait_ms: Some(1_337),
            source: Some(Signal::Body),
        },
        // core.telegram.org/bots/api#responseparameters: retry_after in the
        // body's parameters.
        Case {
            what: "Telegram",
            status: 429,
            headers: &[("Content-Type", "application/json")],
            body: r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 5","parameters":{"retry_after":5}}"#,
            refusal: true,
            wait_ms: Some(5_000),
            source: Some(Signal::Body),
        },
        // shopify.dev/docs/api/usage/limits: "Retry-After: 2.0" on a 429.
        Case {
            what: "Shopify",
            status: 429,
            headers: &[("Retry-After", "2.0")],
            body: r#"{"errors":"Exceeded 2 calls per second for api client. Reduce request rates to resume uninterrupted service."}"#,
            refusal: true,
            wait_ms: Some(2_000),
            source: Some(Signal::RetryAfter),
        },
    ]);
}

#[test]
fn http_dates_epochs_and_the_ietf_and_openai_fields() {
    check(&[
        // RFC 9110 §10.2.3: Retry-After as an HTTP-date, measured against the
        // answer's Date (here the receiver's clock runs 5 s behind ours).
        Case {
            what: "Retry-After HTTP-date against Date",
            status: 503,
            headers: &[
                ("Date", "Wed, 18 Nov 2026 11:06:35 GMT"),
                ("Retry-After", "Wed, 18 Nov 2026 11:08:10 GMT"),
            ],
            body: "",
            refusal: true,
            wait_ms: Some(95_000),
            source: Some(Signal::RetryAfterDate),
        },
        Case {
            what: "Retry-After HTTP-date without Date",
            status: 429,
            headers: &[("Retry-After", "Wed, 18 Nov 2026 11:08:10 GMT")],
            body: "",
            refusal: true,
            wait_ms: Some(90_000),
            source: Some(Signal::RetryAfterDate),
        },
        // docs.sendgrid.com/api-reference/how-to-use-the-sendgrid-v3-api/rate-limits:
        // X-RateLimit-Reset in Unix epoch seconds, no Retry-After.
        Case {
            what: "SendGrid",
            status: 429,
            headers: &[
                ("X-RateLimit-Limit", "150"),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "1795000030"),
            ],
            body: r#"{"errors":[{"field":null,"message":"too many requests"}]}"#,
            refusal: true,
            wait_ms: Some(30_000),
            source: Some(Signal::Reset),
        },
        // A small X-RateLimit-Reset is seconds from now.
        Case {
            what: "X-RateLimit-Reset as a delta",
            status: 429,
            headers: &[("X-RateLimit-Reset", "60")],
            body: "",
            refusal: true,
            wait_ms: Some(60_000),
            source: Some(Signal::Reset),
        },
        // datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/:
        // RateLimit "default";r=0;t=3 with RateLimit-Policy "default";q=10;w=5.
        Case {
            what: "IETF RateLimit fields",
            status: 429,
            headers: &[
                ("RateLimit-Policy", "\"default\";q=10;w=5"),
                ("RateLimit", "\"default\";r=0;t=3"),
            ],
            body: "",
            refusal: true,
            wait_ms: Some(3_000),
            source: Some(Signal::RateLimit),
        },
        // platform.openai.com/docs/guides/rate-limits ("Rate limits in headers"):
        // durations; the exhausted family's reset is the wait.
        Case {
            what: "OpenAI durations",
            status: 429,
            headers: &[
                ("x-ratelimit-limit-requests", "60"),
                ("x-ratelimit-limit-tokens", "150000"),
                ("x-ratelimit-remaining-requests", "59"),
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-ratelimit-reset-requests", "1s"),
                ("x-ratelimit-reset-tokens", "6m0s"),
            ],
            body: r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#,
            refusal: true,
            wait_ms: Some(360_000),
            source: Some(Signal::ResetDuration),
        },
        // The OpenAI SDKs read retry-after-ms before the durations.
        Case {
            what: "OpenAI retry-after-ms",
            status: 429,
            headers: &[
                ("retry-after-ms", "1500"),
                ("x-ratelimit-reset-requests", "6m0s"),
            ],
            body: "",
            refusal: true,
            wait_ms: Some(1_500),
            source: Some(Signal::RetryAfterMs),
        },
    ]);
}

#[test]
fn the_order_is_retry_after_then_ms_then_ratelimit_then_the_x_fields_then_the_body() {
    let all: &[(&str, &str)] = &[
        ("Retry-After", "1"),
        ("retry-after-ms", "2000"),
        ("RateLimit", "\"default\";r=0;t=3"),
        ("X-RateLimit-Reset-After", "4"),
        ("x-ratelimit-reset-requests", "5s"),
        ("X-RateLimit-Reset", "6"),
    ];
    let body = r#"{"retry_after":7}"#;
    // Each header taken away in turn leaves the next one's wait.
    for skip in 0..=all.len() {
        let headers = &all[skip..];
        let word = answer(429, headers, body);
        assert_eq!(
            word.wait_ms(NOW),
            Some((skip as i64 + 1) * 1_000),
            "{headers:?}"
        );
    }
}

#[test]
fn a_503_is_a_refusal_only_with_a_wait_and_other_statuses_never() {
    assert!(!answer(503, &[], "busy").refusal);
    assert!(answer(503, &[("Retry-After", "5")], "").refusal);
    for status in [200, 400, 404, 500, 502] {
        let word = answer(
            status,
            &[("Retry-After", "5"), ("x-ratelimit-remaining", "0")],
            "",
        );
        assert!(!word.refusal, "{status}");
    }
    // A 429 without any signal is still a refusal, with no wait of its own.
    assert_eq!(
        answer(429, &[], "slow down"),
        Word {
            refusal: true,
            ..Word::default()
        }
    );
}

#[test]
fn a_403_without_a_rate_limit_signal_is_no_refusal() {
    for (headers, body) in [
        (&[][..], ""),
        (
            &[][..],
            r#"{"message":"Must have admin rights to Repository."}"#,
        ),
        (&[("x-ratelimit-remaining", "12")][..], ""),
        (&[("RateLimit", "\"default\";r=4;t=3")][..], ""),
        (&[("Retry-After", "soon")][..], ""),
    ] {
        assert!(!answer(403, headers, body).refusal, "{headers:?} {body}");
    }
    for (headers, body) in [
        (&[("x-ratelimit-remaining", "0")][..], ""),
        (&[("Retry-After", "Wed, 18 Nov 2026 11:08:10 GMT")][..], ""),
        (&[("retry-after-ms", "10")][..], ""),
        (&[("RateLimit", "\"default\";r=0;t=3")][..], ""),
        (&[][..], r#"{"retry_after":1}"#),
        (&[][..], r#"{"message":"API RATE LIMIT exceeded"}"#),
    ] {
        assert!(answer(403, headers, body).refusal, "{headers:?} {body}");
    }
}

#[test]
fn waits_are_capped_and_rounded_up_to_the_millisecond() {
    let long = answer(429, &[("Retry-After", "86400")], "");
    assert_eq!(long.wait_until_ms, Some(NOW + CAP));
    let huge = answer(429, &[("Retry-After", "99999999999999999999999")], "");
    assert_eq!(huge.wait_until_ms, Some(NOW + CAP));
    let fraction = answer(429, &[("Retry-After", "0.0001")], "");
    assert_eq!(fraction.wait_ms(NOW), Some(1));
    assert_eq!(
        answer(429, &[("Retry-After", "0")], "").wait_ms(NOW),
        Some(0)
    );
    // A reset already past (by the receiver's clock) is no wait at all.
    let past = answer(
        429,
        &[("Date", NOW_DATE), ("X-RateLimit-Reset", "1794999000")],
        "",
    );
    assert_eq!(past.wait_ms(NOW), Some(0));
}

#[test]
fn garbage_is_ignored_never_an_error() {
    for value in [
        "-1", "NaN", "inf", "1e3", "1.2.3", "", " ", "2 s", "+5", "0x10",
    ] {
        for name in [
            "Retry-After",
            "retry-after-ms",
            "X-RateLimit-Reset-After",
            "X-RateLimit-Reset",
        ] {
            let word = answer(429, &[(name, value)], "");
            assert_eq!(word.wait_until_ms, None, "{name}: {value:?}");
            assert!(word.refusal, "a 429 stays a refusal");
        }
    }
    for value in ["", "5", "1x", "m", "1.5.5s", "-1s", "1h-2m"] {
        let word = answer(429, &[("x-ratelimit-reset-requests", value)], "");
        assert_eq!(word.wait_until_ms, None, "{value:?}");
    }
    for body in [
        r#"{"retry_after":-1}"#,
        r#"{"retry_after":"5"}"#,
        r#"{"parameters":{"retry_after":null}}"#,
        r#"{"retry_after":1.5"#,
        "[1,2]",
        "\u{0}\u{1}",
    ] {
        assert_eq!(answer(429, &[], body).wait_until_ms, None, "{body}");
    }
    for value in ["\"default\";r=x;t=3", "garbage", ";;;,,,", "\"a\";r=0;t=-3"] {
        assert_eq!(
            answer(429, &[("RateLimit", value)], "").wait_until_ms,
            None,
            "{value}"
        );
    }
}

#[test]
fn durations_read_as_go_writes_them() {
    for (text, ms) in [
        ("1s", 1_000),
        ("6m0s", 360_000),
        ("12ms", 12),
        ("1h2m3.5s", 3_723_500),
        ("0.5s", 500),
        ("250us", 1),
    ] {
        assert_eq!(duration_ms(text), Some(ms), "{text}");
    }
}

#[test]
fn header_names_are_read_in_any_case() {
    for name in ["retry-after", "RETRY-AFTER", "Retry-After", " rEtRy-AfTeR "] {
        assert_eq!(
            answer(429, &[(name, "3")], "").wait_ms(NOW),
            Some(3_000),
            "{name}"
        );
    }
}

#[test]
fn the_announced_budget_is_read_from_any_answer() {
    let ietf = answer(
        200,
        &[
            (
                "RateLimit-Policy",
                "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400",
            ),
            ("RateLimit", "\"burst\";r=40;t=30, \"daily\";r=7;t=3600"),
        ],
        "",
    );
    assert!(!ietf.refusal);
    assert_eq!(ietf.wait_until_ms, None, "nothing exhausted: no wait");
    assert_eq!(
        ietf.announced,
        Some(Budget {
            remaining: Some(7),
            reset_at_ms: Some(NOW + CAP),
            quota: Some(1000),
            window_ms: Some(86_400_000),
            refill: Some(1000),
        }),
        "the tightest policy, its reset capped"
    );
    assert_eq!(ietf.source, Some(Signal::RateLimit));

    let github = answer(
        200,
        &[
            ("date", NOW_DATE),
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "4999"),
            ("x-ratelimit-reset", "1795000600"),
        ],
        "{}",
    );
    assert_eq!(
        github.announced,
        Some(Budget {
            remaining: Some(4_999),
            reset_at_ms: Some(NOW + 600_000),
            quota: Some(5_000),
            window_ms: None,
            refill: Some(5_000),
        })
    );

    let openai = answer(
        200,
        &[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "1s"),
        ],
        "",
    );
    assert_eq!(
        openai.announced,
        Some(Budget {
            remaining: Some(59),
            reset_at_ms: Some(NOW + 1_000),
            quota: Some(60),
            window_ms: None,
            refill: Some(60),
        })
    );
    assert_eq!(openai.source, Some(Signal::ResetDuration));
    assert_eq!(
        answer(200, &[("Content-Type", "text/plain")], "ok").announced,
        None
    );
}

#[test]
fn shopifys_call_limit_is_a_leaky_bucket_budget() {
    // shopify.dev/docs/api/usage/limits ("REST Admin API rate limits": a bucket
    // of 40 that leaks 2 a second; every answer carries
    // X-Shopify-Shop-Api-Call-Limit: used/max).
    let room = answer(200, &[("X-Shopify-Shop-Api-Call-Limit", "32/40")], "{}");
    assert!(!room.refusal);
    assert_eq!(
        room.announced,
        Some(Budget {
            remaining: Some(8),
            reset_at_ms: Some(NOW),
            quota: Some(40),
            window_ms: Some(20_000),
            refill: Some(1),
        })
    );
    assert_eq!(room.source, Some(Signal::CallLimit));
    // Full: the next call fits once one has leaked out (1/2 s at 2 a second).
    let full = answer(200, &[("X-Shopify-Shop-Api-Call-Limit", "40/40")], "{}");
    let budget = full.announced.unwrap();
    assert_eq!(
        (budget.remaining, budget.reset_at_ms, budget.refill),
        (Some(0), Some(NOW + 500), Some(1)),
        "its reset gives one call back"
    );
    // The 429 itself: its Retry-After is the wait; the header still the budget.
    let refused = answer(
        429,
        &[
            ("Retry-After", "2.0"),
            ("X-Shopify-Shop-Api-Call-Limit", "40/40"),
        ],
        "",
    );
    assert_eq!(refused.wait_ms(NOW), Some(2_000));
    assert_eq!(refused.announced.unwrap().quota, Some(40));
    // Garbage says nothing.
    for bad in ["40", "a/40", "3/0", "-1/40", ""] {
        let word = answer(200, &[("X-Shopify-Shop-Api-Call-Limit", bad)], "");
        assert_eq!(word.announced, None, "{bad}");
    }
}

#[test]
fn discords_reset_after_is_the_budgets_reset() {
    // discord.com/developers/docs/topics/rate-limits ("Header Format": every
    // answer carries X-RateLimit-Remaining and X-RateLimit-Reset-After).
    let word = answer(
        200,
        &[
            ("X-RateLimit-Limit", "5"),
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Reset", "1470173023.123"),
            ("X-RateLimit-Reset-After", "1.337"),
        ],
        "",
    );
    let budget = word.announced.unwrap();
    assert_eq!(
        (budget.remaining, budget.reset_at_ms, budget.quota),
        (Some(0), Some(NOW + 1_337), Some(5))
    );
}

#[test]
fn a_date_that_agrees_with_our_clock_is_read_on_ours_at_the_ms() {
    let at = |now: i64, headers: &[(&str, &str)]| {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        read(429, &headers, b"", now, CAP).wait_ms(now)
    };
    // 0.9 s into the Date's second (its header truncates it): the window's end
    // at 11:06:41 is 100 ms away on our clock, not the 1 s between the headers.
    let truncated = [
        ("Date", NOW_DATE),
        ("Retry-After", "Wed, 18 Nov 2026 11:06:41 GMT"),
    ];
    assert_eq!(at(NOW + 900, &truncated), Some(100));
    // GitHub's x-ratelimit-reset (epoch seconds) the same way.
    let reset = [("Date", NOW_DATE), ("X-RateLimit-Reset", "1795000001")];
    assert_eq!(at(NOW + 900, &reset), Some(100));
    // Up to 2 s behind still agrees; further off, the receiver's clock is its
    // own and the wait is measured from its Date.
    assert_eq!(at(NOW + DATE_BEHIND_MS, &truncated), Some(0));
    assert_eq!(at(NOW + DATE_BEHIND_MS + 1, &truncated), Some(1_000));
    assert_eq!(
        at(NOW - 1_000, &truncated),
        Some(2_000),
        "ahead by a second still agrees"
    );
    assert_eq!(
        at(NOW - 1_001, &truncated),
        Some(1_000),
        "further ahead: its own clock"
    );
}
