//! The receiver's word: what one answer says about its receiver's limits, read
//! purely from its status, its headers (names case-insensitive) and the start of
//! its body (the at most 4 KiB already read), with `now_ms` an argument. It says
//! whether the answer is a refusal ("slow down", not "you are wrong"), until when
//! to wait, and what budget the receiver announces. Garbage is ignored, never an
//! error: a value that does not parse (negative, NaN, a word) is as if absent.
//!
//! The wait is the first of these that gives one, in this order:
//! 1. `Retry-After`: decimal seconds (`120`, `2.0`, `1.337`) or an HTTP-date
//!    (RFC 9110 §10.2.3), measured on our clock when the answer's own `Date`
//!    agrees with it (up to 2 s behind: the header is truncated to the second),
//!    else against that `Date` (the receiver's clock is its own);
//! 2. `retry-after-ms` (milliseconds);
//! 3. IETF `RateLimit`'s `t` (seconds until the quota resets) on a policy with
//!    `r=0` (draft-ietf-httpapi-ratelimit-headers);
//! 4. `X-RateLimit-Reset-After` (decimal seconds, Discord);
//! 5. `x-ratelimit-reset-requests` / `-tokens` as durations (`1s`, `6m0s`,
//!    `12ms`, `1h2m3.5s`; OpenAI): the exhausted one's, else the longer;
//! 6. `X-RateLimit-Reset`: epoch seconds when it looks like one (past 10^9),
//!    measured as a `Retry-After` date is, else seconds from now;
//! 7. the JSON body's `retry_after` (Discord, decimal seconds) or
//!    `parameters.retry_after` (Telegram).
//!
//! Every wait is capped at `now + cap_ms` (the retry cap). A refusal is a `429`
//! always; a `503` with a wait; a `403` only with a rate-limit signal
//! (`X-RateLimit-Remaining: 0`, a `Retry-After` or `retry-after-ms`, a
//! `RateLimit` with `r=0`, a body's `retry_after`, or a JSON `message` saying
//! "rate limit"): a `403` without one is the receiver's "no", a permanent failure.
//!
//! The announced budget (remaining, reset, quota per window) comes from
//! `RateLimit` / `RateLimit-Policy`, else `X-RateLimit-Remaining` / `-Limit` /
//! `-Reset-After` / `-Reset`, else OpenAI's `-requests` family, else Shopify's
//! `X-Shopify-Shop-Api-Call-Limit: used/max`; it is read from any answer, a
//! success included, so a pacer can follow it before the receiver ever refuses.

use serde_json::Value;

/// Where a wait (or, without one, the announced budget) came from: what a learned
/// rate or a pause can say it followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `Retry-After` in seconds.
    RetryAfter,
    /// `Retry-After` as an HTTP-date.
    RetryAfterDate,
    /// `retry-after-ms`.
    RetryAfterMs,
    /// IETF `RateLimit` (`t`, `r`) and `RateLimit-Policy` (`q`, `w`).
    RateLimit,
    /// `X-RateLimit-Reset-After`.
    ResetAfter,
    /// `x-ratelimit-reset-requests` / `x-ratelimit-reset-tokens`.
    ResetDuration,
    /// `X-RateLimit-Reset` (epoch or delta seconds), with `-Remaining` / `-Limit`.
    Reset,
    /// The JSON body's `retry_after` or `parameters.retry_after`.
    Body,
    /// Shopify's `X-Shopify-Shop-Api-Call-Limit: used/max` (a budget, no wait).
    CallLimit,
}

/// What a receiver announces of its budget; each part only when it said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budget {
    /// Requests (or units) left in the current window.
    pub remaining: Option<i64>,
    /// When the window resets (ms, our clock), at most `now + cap`.
    pub reset_at_ms: Option<i64>,
    /// Requests allowed per window.
    pub quota: Option<i64>,
    /// The window's length (ms).
    pub window_ms: Option<i64>,
    /// What its reset gives back: a window's whole quota, a leaky bucket's
    /// calls leaked by then (Shopify: one).
    pub refill: Option<i64>,
}

/// What one answer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Word {
    /// The receiver refused: slow down, the item was not wrong.
    pub refusal: bool,
    /// Until when it asks to wait (ms, our clock), at most `now + cap`.
    pub wait_until_ms: Option<i64>,
    /// The budget it announces, if any.
    pub announced: Option<Budget>,
    /// The signal the wait came from, else the one the budget came from.
    pub source: Option<Signal>,
}

impl Word {
    /// The wait as a delay from `now_ms` (never negative).
    pub fn wait_ms(&self, now_ms: i64) -> Option<i64> {
        self.wait_until_ms.map(|at| (at - now_ms).max(0))
    }
}

/// Read an answer. `headers` are name/value pairs in any case; `body` is what was
/// read of it (cut anywhere: a JSON body that no longer parses says nothing).
pub fn read(
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    now_ms: i64,
    cap_ms: i64,
) -> Word {
    let answer = Answer {
        headers,
        now_ms,
        date_ms: header(headers, "Date").and_then(http_date_ms),
    };
    let body = json_body(body);
    let ietf = answer.ietf();
    let waits: [(Signal, Option<i64>); 7] = [
        (
            Signal::RetryAfter,
            header(headers, "Retry-After").and_then(seconds_ms),
        ),
        (
            Signal::RetryAfterDate,
            header(headers, "Retry-After")
                .and_then(http_date_ms)
                .map(|at| answer.until(at)),
        ),
        (
            Signal::RetryAfterMs,
            header(headers, "retry-after-ms").and_then(millis),
        ),
        (Signal::RateLimit, ietf.and_then(|i| i.exhausted_reset_ms)),
        (
            Signal::ResetAfter,
            header(headers, "X-RateLimit-Reset-After").and_then(seconds_ms),
        ),
        (Signal::ResetDuration, answer.reset_durations()),
        (Signal::Reset, answer.reset_ms()),
    ];
    let cap_ms = cap_ms.max(0);
    let capped = |ms: i64| now_ms.saturating_add(ms.clamp(0, cap_ms));
    let header_wait = waits.into_iter().find_map(|(s, ms)| Some((s, ms?)));
    let body_wait = body.as_ref().and_then(body_retry_after);
    let wait = header_wait.or(body_wait.map(|ms| (Signal::Body, ms)));

    let announced = ietf
        .and_then(|i| i.budget.map(|b| (Signal::RateLimit, b)))
        .or_else(|| answer.x_budget().map(|b| (Signal::Reset, b)))
        .or_else(|| answer.openai_budget().map(|b| (Signal::ResetDuration, b)))
        .or_else(|| answer.shopify_budget().map(|b| (Signal::CallLimit, b)))
        .map(|(s, b)| {
            let reset_at_ms = b
                .reset_at_ms
                .map(|at| at.min(now_ms.saturating_add(cap_ms)));
            (s, Budget { reset_at_ms, ..b })
        });

    let rate_limited = || {
        header(headers, "X-RateLimit-Remaining").and_then(integer) == Some(0)
            || header(headers, "Retry-After")
                .is_some_and(|v| seconds_ms(v).is_some() || http_date_ms(v).is_some())
            || header(headers, "retry-after-ms").and_then(millis).is_some()
            || ietf.is_some_and(|i| i.exhausted_reset_ms.is_some())
            || body_wait.is_some()
            || body.as_ref().is_some_and(says_rate_limit)
    };
    let refusal = match status {
        429 => true,
        503 => wait.is_some(),
        403 => rate_limited(),
        _ => false,
    };
    Word {
        refusal,
        wait_until_ms: wait.map(|(_, ms)| capped(ms)),
        announced: announced.map(|(_, b)| b),
        source: wait.map(|(s, _)| s).or(announced.map(|(s, _)| s)),
    }
}

/// How far behind our clock an answer's `Date` may be and still agree with it:
/// its second's truncation and the answer's way.
pub const DATE_BEHIND_MS: i64 = 2_000;

/// The answer's headers and clocks.
struct Answer<'a> {
    headers: &'a [(String, String)],
    now_ms: i64,
    /// The answer's own `Date`: the receiver's now.
    date_ms: Option<i64>,
}

impl Answer<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        header(self.headers, name)
    }

    /// How long from the receiver's now until its instant `at_ms`. A `Date`
    /// that agrees with our clock (from [`DATE_BEHIND_MS`] behind it to a
    /// second ahead: the header is truncated to whole seconds and the answer
    /// took its way) is the same now, read on our clock, at the ms: against the
    /// truncated `Date` a reset 0.2 s away would read 1.2 s. A `Date` further
    /// off is a receiver's clock of its own, and the wait is measured from it.
    fn until(&self, at_ms: i64) -> i64 {
        let from = match self.date_ms {
            Some(date) if !(self.now_ms - DATE_BEHIND_MS..=self.now_ms + 1_000).contains(&date) => {
                date
            }
            _ => self.now_ms,
        };
        at_ms.saturating_sub(from).max(0)
    }

    /// `X-RateLimit-Reset`: epoch seconds past 10^9, else seconds from now.
    fn reset_ms(&self) -> Option<i64> {
        let secs = decimal(self.header("X-RateLimit-Reset")?)?;
        let ms = secs_to_ms(secs)?;
        Some(if secs > 1e9 { self.until(ms) } else { ms })
    }

    /// OpenAI's `x-ratelimit-reset-requests` / `-tokens`: the exhausted
    /// family's reset, else the longer of the two.
    fn reset_durations(&self) -> Option<i64> {
        let family = |name: &str| {
            let reset = duration_ms(self.header(&format!("x-ratelimit-reset-{name}"))?)?;
            let out = self
                .header(&format!("x-ratelimit-remaining-{name}"))
                .and_then(integer)
                == Some(0);
            Some((out, reset))
        };
        let both = [family("requests"), family("tokens")];
        let exhausted = both
            .iter()
            .flatten()
            .filter(|(out, _)| *out)
            .map(|(_, r)| *r)
            .max();
        exhausted.or_else(|| both.iter().flatten().map(|(_, r)| *r).max())
    }

    /// IETF `RateLimit` and `RateLimit-Policy`.
    fn ietf(&self) -> Option<Ietf> {
        let limits = self.header("RateLimit").map(members).unwrap_or_default();
        let policies = self
            .header("RateLimit-Policy")
            .map(members)
            .unwrap_or_default();
        if limits.is_empty() && policies.is_empty() {
            return None;
        }
        // The tightest policy speaks for the answer: the fewest left.
        let tightest = limits
            .iter()
            .filter_map(|m| Some((m, m.param("r")?)))
            .min_by_key(|(_, r)| *r)
            .map(|(m, _)| m)
            .or(limits.first());
        let exhausted_reset_ms = limits
            .iter()
            .filter(|m| m.param("r") == Some(0))
            .filter_map(|m| m.param("t")?.checked_mul(1_000))
            .max();
        let policy = tightest
            .and_then(|t| policies.iter().find(|p| p.name == t.name))
            .or(policies.first());
        let budget = Budget {
            remaining: tightest.and_then(|m| m.param("r")),
            reset_at_ms: tightest
                .and_then(|m| m.param("t")?.checked_mul(1_000))
                .map(|ms| self.now_ms.saturating_add(ms)),
            quota: policy.and_then(|p| p.param("q")),
            window_ms: policy.and_then(|p| p.param("w")?.checked_mul(1_000)),
            refill: policy.and_then(|p| p.param("q")),
        };
        Some(Ietf {
            exhausted_reset_ms,
            budget: (budget != Budget::default()).then_some(budget),
        })
    }

    /// `X-RateLimit-Remaining` / `-Limit` / `-Reset-After` / `-Reset` (GitHub,
    /// SendGrid, Discord): the relative `-Reset-After` first, as no clock is in it.
    fn x_budget(&self) -> Option<Budget> {
        let reset_after = self.header("X-RateLimit-Reset-After").and_then(seconds_ms);
        let budget = Budget {
            remaining: self.header("X-RateLimit-Remaining").and_then(integer),
            quota: self.header("X-RateLimit-Limit").and_then(integer),
            reset_at_ms: reset_after
                .or_else(|| self.reset_ms())
                .map(|ms| self.now_ms.saturating_add(ms)),
            window_ms: None,
            refill: self.header("X-RateLimit-Limit").and_then(integer),
        };
        (budget.remaining.is_some() || budget.quota.is_some()).then_some(budget)
    }

    /// OpenAI's `x-ratelimit-{remaining,limit,reset}-requests`.
    fn openai_budget(&self) -> Option<Budget> {
        let budget = Budget {
            remaining: self
                .header("x-ratelimit-remaining-requests")
                .and_then(integer),
            quota: self.header("x-ratelimit-limit-requests").and_then(integer),
            reset_at_ms: self
                .header("x-ratelimit-reset-requests")
                .and_then(duration_ms)
                .map(|ms| self.now_ms.saturating_add(ms)),
            window_ms: None,
            refill: self.header("x-ratelimit-limit-requests").and_then(integer),
        };
        (budget.remaining.is_some() || budget.quota.is_some()).then_some(budget)
    }

    /// Shopify's REST `X-Shopify-Shop-Api-Call-Limit: used/max`: a leaky bucket
    /// of `max` calls that leaks `max` per [`SHOPIFY_LEAK_WINDOW_MS`]
    /// (shopify.dev/docs/api/usage/limits: 40 and 2/s, 80 and 4/s, 400 and
    /// 20/s). Full, its reset is when one call has leaked out.
    fn shopify_budget(&self) -> Option<Budget> {
        let (used, max) = self
            .header("X-Shopify-Shop-Api-Call-Limit")?
            .split_once('/')?;
        let (used, max) = (integer(used)?, integer(max)?);
        if max == 0 {
            return None;
        }
        let over = (used - max + 1).max(0);
        Some(Budget {
            remaining: Some((max - used).max(0)),
            reset_at_ms: Some(
                self.now_ms
                    .saturating_add((over.saturating_mul(SHOPIFY_LEAK_WINDOW_MS) + max - 1) / max),
            ),
            quota: Some(max),
            window_ms: Some(SHOPIFY_LEAK_WINDOW_MS),
            refill: Some(over.max(1)),
        })
    }
}

/// The time Shopify's REST bucket takes to leak its whole size: every plan's
/// bucket leaks a twentieth of itself a second.
pub const SHOPIFY_LEAK_WINDOW_MS: i64 = 20_000;

/// What the IETF fields say.
#[derive(Clone, Copy)]
struct Ietf {
    /// The latest reset of a policy with nothing left (`r=0`), in ms from now.
    exhausted_reset_ms: Option<i64>,
    budget: Option<Budget>,
}

/// One member of a structured-field list: `"default";r=0;t=3`.
struct Member<'a> {
    name: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

impl Member<'_> {
    /// A parameter as a non-negative integer.
    fn param(&self, key: &str) -> Option<i64> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .and_then(|(_, v)| integer(v))
    }
}

/// The members of a structured-field list (RFC 9651), leniently: a member is a
/// name (quoted or a token) and `;key=value` parameters.
fn members(value: &str) -> Vec<Member<'_>> {
    value
        .split(',')
        .filter_map(|member| {
            let mut parts = member.split(';').map(str::trim);
            let name = parts.next()?.trim_matches('"');
            let params = parts.filter_map(|p| p.split_once('=')).collect();
            Some(Member { name, params })
        })
        .collect()
}

/// The first header named `name`, any case, trimmed.
fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

/// A plain non-negative decimal (`2`, `2.0`, `1.337`): digits with at most one
/// point, no sign, exponent, `inf` or `NaN`.
fn decimal(text: &str) -> Option<f64> {
    let text = text.trim();
    let digits = text.bytes().filter(u8::is_ascii_digit).count();
    let points = text.bytes().filter(|&b| b == b'.').count();
    if digits == 0 || points > 1 || digits + points != text.len() {
        return None;
    }
    text.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Seconds (possibly fractional) as whole ms, rounded up: a wait is never cut short.
fn secs_to_ms(secs: f64) -> Option<i64> {
    // To the microsecond first: 1.337 s is 1,337 ms, not 1,338 from float noise.
    let ms = ((secs * 1_000_000.0).round() / 1_000.0).ceil();
    // Past any cap: clamped, not wrapped.
    (ms.is_finite() && ms >= 0.0).then(|| ms.min(i64::MAX as f64 / 2.0) as i64)
}

fn seconds_ms(text: &str) -> Option<i64> {
    secs_to_ms(decimal(text)?)
}

/// Milliseconds (possibly fractional).
fn millis(text: &str) -> Option<i64> {
    secs_to_ms(decimal(text)? / 1_000.0)
}

/// A non-negative integer.
fn integer(text: &str) -> Option<i64> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A Go-style duration (`1s`, `6m0s`, `12ms`, `1h2m3.5s`, `250us`) in ms,
/// rounded up.
fn duration_ms(text: &str) -> Option<i64> {
    let mut rest = text.trim();
    let mut total = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value = decimal(&rest[..number_end])?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let per_ms = match &rest[..unit_end] {
            "h" => 3_600_000.0,
            "m" => 60_000.0,
            "s" => 1_000.0,
            "ms" => 1.0,
            "us" | "µs" => 0.001,
            "ns" => 0.000_001,
            _ => return None,
        };
        total += value * per_ms;
        rest = &rest[unit_end..];
    }
    secs_to_ms(total / 1_000.0)
}

/// An HTTP-date (IMF-fixdate, or RFC 850 and asctime as RFC 9110 requires) as
/// ms since the epoch.
fn http_date_ms(text: &str) -> Option<i64> {
    let at = httpdate::parse_http_date(text.trim()).ok()?;
    let since = at.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(since.as_millis()).ok()
}

/// The body as a JSON object, when it is one whole.
fn json_body(body: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(body).ok()?.trim_start();
    if !text.starts_with('{') {
        return None;
    }
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

/// `retry_after` (Discord) or `parameters.retry_after` (Telegram), in seconds.
fn body_retry_after(body: &Value) -> Option<i64> {
    let secs = body
        .get("retry_after")
        .or_else(|| body.get("parameters")?.get("retry_after"))?
        .as_f64()?;
    (secs >= 0.0).then_some(secs).and_then(secs_to_ms)
}

/// A JSON `message` that says "rate limit" (GitHub's "API rate limit exceeded",
/// "You have exceeded a secondary rate limit"; Discord's "being rate limited").
fn says_rate_limit(body: &Value) -> bool {
    body.get("message")
        .and_then(Value::as_str)
        .is_some_and(|m| m.to_ascii_lowercase().contains("rate limit"))
}

#[cfg(test)]
mod tests;
