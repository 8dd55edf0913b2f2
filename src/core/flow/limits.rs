//! Flow control's rules, in one place: which limit keys an item may hold, what a
//! limit is (`PUT /limits/{key}`), which limit governs a key (its own, else the
//! longest partitioned one), and the rate's arithmetic (GCRA in integers). The
//! claim (`sql/claim_selection.sql`) applies the same rules in SQL; the
//! conformance and simulation tests check the two against each other.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::core::error::ApiError;

pub use super::gcra::{Gcra, LEARNED_BASIS, LOOK_AHEAD_MS};

/// At most this many explicit keys per subject or item.
pub const MAX_KEYS: usize = 4;
/// A key's length in characters (ASCII).
pub const MAX_KEY_LEN: usize = 128;
/// A partitioned limit's key ends with this: `tenant:*` governs `tenant:acme`.
pub const PARTITION_SUFFIX: &str = ":*";

/// Candidates a claim reads per batch while limits are defined: items a limit
/// holds back stay at the head of their batch, and a batch's other items wait
/// behind at most this many less one (head-of-line blocking). The lease windows
/// reach this far too (migration 0020's `lease_windows`: OFFSET 127), so every
/// item claimed past a held one is still found in flight, and the selection
/// caps its candidates per batch at it while limits or pauses are kept
/// (`sql/claim_selection.sql`, `per_batch`: the drain's work is counted as
/// claims see it). Without limits nothing is held back, and the claim's own size
/// is enough.
pub const HELD_WINDOW: i64 = 128;

/// Candidates per batch for a claim of `limit` items.
pub fn candidates_per_batch(limit: i64, limits_defined: bool) -> i64 {
    if limits_defined {
        HELD_WINDOW
    } else {
        limit
    }
}

/// How long a drain whose claim came back short with items held by a
/// concurrency (no rate's token to wait for) waits before it claims again,
/// unless one of its own commits gives a slot back first: the group commit's
/// interval, so a drain looks again about as often as slots come back.
pub const HELD_POLL_MS: i64 = 1_000;

/// How long a pause is kept after it ended (`sql/clear_ended_pauses.sql`, run
/// with the tick's reaper): while one is kept, claims may hold items back below
/// claimed ones, so the cursor stops at them; an hour outlives every lease that
/// started under the pause.
pub const PAUSE_KEPT_MS: i64 = 3_600_000;

/// Whether `key` may be held by an item: 1 to 128 ASCII letters, digits and
/// `.` `_` `:` `-` `@`.
pub fn is_key(key: &str) -> bool {
    (1..=MAX_KEY_LEN).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-' | b'@'))
}

/// Whether `key` may name a limit: an item's key, or a partition (`prefix:*`
/// whose prefix is a key).
pub fn is_limit_key(key: &str) -> bool {
    match key.strip_suffix('*') {
        Some(prefix) => prefix.len() > 1 && prefix.ends_with(':') && is_key(prefix),
        None => is_key(key),
    }
}

/// The explicit `limits` of a subject or an item: 0 to 4 distinct keys.
/// Anything else is 400 `invalid_limits`.
pub fn parse_keys(value: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let bad = |m: String| ApiError::bad_request("invalid_limits", m);
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    if value.is_null() {
        return Ok(Vec::new());
    }
    let Some(list) = value.as_array() else {
        return Err(bad("limits must be an array of keys".into()));
    };
    if list.len() > MAX_KEYS {
        return Err(bad(format!(
            "limits holds {} keys; at most {MAX_KEYS}",
            list.len()
        )));
    }
    let mut keys: Vec<String> = Vec::with_capacity(list.len());
    for k in list {
        let Some(k) = k.as_str().filter(|k| is_key(k)) else {
            return Err(bad(format!(
                "limits: {k} is not a key (1 to {MAX_KEY_LEN} ASCII letters, digits and . _ : - @)"
            )));
        };
        if keys.iter().any(|seen| seen == k) {
            return Err(bad(format!("limits: key {k:?} is listed twice")));
        }
        keys.push(k.to_string());
    }
    Ok(keys)
}

/// An item's keys: its subject's (or its own) explicit ones, then those its kind
/// adds, each once, in that order. The kind's keys are not counted against
/// [`MAX_KEYS`] (a kind adds what it calls), but must be keys.
pub fn merge_keys(explicit: &[String], from_kind: &[String]) -> Result<Vec<String>, String> {
    let mut keys = explicit.to_vec();
    for k in from_kind {
        if !is_key(k) {
            return Err(format!("the kind's limit key {k:?} is not a key"));
        }
        if !keys.contains(k) {
            keys.push(k.clone());
        }
    }
    Ok(keys)
}

/// The prefix of a receiver's implicit key: a `webhook`, each channel of a
/// `multi`, a completion callback hold `host:<hostname>` of their URL.
pub const HOST_PREFIX: &str = "host:";
/// The prefix of a `service` item's implicit key: `service:<binding>`.
pub const SERVICE_PREFIX: &str = "service:";

/// The implicit key of a receiver reached at `url`: `host:` and its hostname
/// (lower case, no port, an IPv6 address without its brackets), so every item
/// sent to one host can be limited and paused together (`PUT
/// /limits/host:api.example.com`). `None` when the URL has no host or the
/// hostname is not a key (it is then limited by no implicit key).
pub fn host_key(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    let host = url
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']');
    let key = format!("{HOST_PREFIX}{}", host.to_ascii_lowercase());
    is_key(&key).then_some(key)
}

/// The implicit key of a `service` item calling `binding`.
pub fn service_key(binding: &str) -> Option<String> {
    let key = format!("{SERVICE_PREFIX}{binding}");
    is_key(&key).then_some(key)
}

/// The keys as the queue stores them: a JSON array, or `None` for none (no
/// column value, nothing for the claim to read).
pub fn keys_json(keys: &[String]) -> Option<String> {
    (!keys.is_empty()).then(|| serde_json::to_string(keys).expect("strings serialise"))
}

/// A limit as `PUT /limits/{key}` sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limit {
    /// Item starts per `per_seconds`.
    pub rate: Option<i64>,
    pub per_seconds: i64,
    /// The most that may start at once after an idle spell (default `rate`).
    pub burst: Option<i64>,
    /// The most in flight at once.
    pub concurrency: Option<i64>,
}

impl Limit {
    /// Parse a `PUT /limits/{key}` body; errors are 400 `invalid_limit` naming
    /// the field.
    pub fn parse(body: &Value) -> Result<Limit, ApiError> {
        let bad = |m: String| ApiError::bad_request("invalid_limit", m);
        let Some(obj) = body.as_object() else {
            return Err(bad("the body must be a JSON object".into()));
        };
        if let Some(unknown) = obj
            .keys()
            .find(|k| !["rate", "per_seconds", "burst", "concurrency"].contains(&k.as_str()))
        {
            return Err(bad(format!(
                "unknown field {unknown:?} (fields: rate, per_seconds, burst, concurrency)"
            )));
        }
        let rate = int_field(obj, "rate", 1, 1_000_000).map_err(bad)?;
        let per_seconds = int_field(obj, "per_seconds", 1, 86_400)
            .map_err(bad)?
            .unwrap_or(1);
        let burst = int_field(obj, "burst", 1, 1_000_000).map_err(bad)?;
        let concurrency = int_field(obj, "concurrency", 1, 10_000).map_err(bad)?;
        if rate.is_none() && concurrency.is_none() {
            return Err(bad("a limit needs rate or concurrency (or both)".into()));
        }
        if rate.is_none() && (burst.is_some() || obj.contains_key("per_seconds")) {
            let field = if burst.is_some() {
                "burst"
            } else {
                "per_seconds"
            };
            return Err(bad(format!("{field} needs rate")));
        }
        Ok(Limit {
            rate,
            per_seconds,
            burst: rate.map(|r| burst.unwrap_or(r)),
            concurrency,
        })
    }

    /// The rate part, when there is one.
    pub fn gcra(&self) -> Option<Gcra> {
        Some(Gcra {
            rate: self.rate?,
            per_seconds: self.per_seconds,
            burst: self.burst?,
        })
    }
}

fn int_field(
    obj: &Map<String, Value>,
    name: &str,
    min: i64,
    max: i64,
) -> Result<Option<i64>, String> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64().filter(|n| (min..=max).contains(n)) {
            Some(n) => Ok(Some(n)),
            None => Err(format!(
                "{name} must be an integer from {min} to {max}, not {v}"
            )),
        },
    }
}

/// The limit that governs an item's key among the defined ones: its own, else
/// the partitioned limit with the longest prefix of it (`tenant:*` for
/// `tenant:acme`), else none (the key holds nothing back).
pub fn governing<'a>(key: &str, defined: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<&'a str> = None;
    for d in defined {
        if d == key {
            return Some(d);
        }
        if let Some(prefix) = d.strip_suffix('*') {
            if d.ends_with(PARTITION_SUFFIX)
                && key.len() > prefix.len()
                && key.starts_with(prefix)
                && best.is_none_or(|b| b.len() < d.len())
            {
                best = Some(d);
            }
        }
    }
    best
}

/// What one governed key of a held item says of its wake: whether it is at its
/// concurrency after the claim (`full`), and the instant it has room again if
/// time gives it room (`at`: a rate's token, a pause's end; `None` for a
/// concurrency alone, which only an item in flight ending frees).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyWake {
    pub full: bool,
    pub at: Option<i64>,
}

/// When a claimer whose claim held items back claims again (the hold statement,
/// `sql/claim_held.sql`, computes the same): a held item has no instant while
/// one of its keys is full, else the latest of its keys' instants (none when no
/// key of it is timed); the claimer wakes for the earliest item. `None` when no
/// held item has an instant: the claimer's own commit wakes it, else it polls
/// ([`HELD_POLL_MS`]). So a key with tokens beside a full or paused one never
/// wakes it early, and a claim cut short by its own size never wakes it at once.
pub fn claim_wake<I, K>(held: I) -> Option<i64>
where
    I: IntoIterator<Item = K>,
    K: IntoIterator<Item = KeyWake>,
{
    held.into_iter()
        .filter_map(|keys| {
            keys.into_iter()
                .try_fold(None, |at: Option<i64>, key| {
                    (!key.full).then(|| at.max(key.at))
                })
                .flatten()
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_short_ascii_words_with_a_few_separators() {
        for good in [
            "github",
            "tenant:acme",
            "host:api.github.com",
            "a_b-c@d",
            &"k".repeat(128),
        ] {
            assert!(is_key(good), "{good}");
        }
        for bad in ["", "a b", "tenant:*", "é", "a/b", &"k".repeat(129)] {
            assert!(!is_key(bad), "{bad}");
        }
        assert!(is_limit_key("tenant:*"));
        assert!(is_limit_key("github"));
        assert!(!is_limit_key("tenant*"), "a partition ends with :*");
        assert!(!is_limit_key(":*"), "a partition needs a prefix");
    }

    #[test]
    fn a_receivers_implicit_key_is_its_hostname_without_port_or_case() {
        assert_eq!(
            host_key("http://127.0.0.1:9000/hook?x=1").as_deref(),
            Some("host:127.0.0.1")
        );
        assert_eq!(
            host_key("https://API.Example.com/a").as_deref(),
            Some("host:api.example.com")
        );
        assert_eq!(host_key("https://[::1]:8443/").as_deref(), Some("host:::1"));
        assert_eq!(
            host_key("https://bücher.example/").as_deref(),
            Some("host:xn--bcher-kva.example")
        );
        assert_eq!(host_key("not a url"), None);
        assert_eq!(service_key("billing").as_deref(), Some("service:billing"));
    }

    #[test]
    fn explicit_keys_are_zero_to_four_distinct_keys() {
        assert_eq!(parse_keys(None).unwrap(), Vec::<String>::new());
        assert_eq!(
            parse_keys(Some(&json!(null))).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            parse_keys(Some(&json!(["github", "tenant:acme"]))).unwrap(),
            ["github", "tenant:acme"]
        );
        for bad in [
            json!("github"),
            json!(["a", "a"]),
            json!(["a", "b", "c", "d", "e"]),
            json!([1]),
            json!(["no spaces"]),
            json!([""]),
        ] {
            let e = parse_keys(Some(&bad)).unwrap_err();
            assert_eq!(e.code(), "invalid_limits", "{bad}");
        }
    }

    #[test]
    fn a_kinds_keys_come_after_the_explicit_ones_each_once() {
        let explicit = vec!["tenant:acme".to_string(), "github".to_string()];
        let kind = vec!["github".to_string(), "host:x".to_string()];
        assert_eq!(
            merge_keys(&explicit, &kind).unwrap(),
            ["tenant:acme", "github", "host:x"]
        );
        assert!(merge_keys(&[], &["bad key".to_string()]).is_err());
        assert_eq!(keys_json(&[]), None);
        assert_eq!(keys_json(&explicit).unwrap(), r#"["tenant:acme","github"]"#);
    }

    #[test]
    fn a_limit_needs_a_rate_or_a_concurrency_in_range() {
        let l = Limit::parse(&json!({"rate": 30, "per_seconds": 1, "burst": 5, "concurrency": 10}))
            .unwrap();
        assert_eq!(
            l,
            Limit {
                rate: Some(30),
                per_seconds: 1,
                burst: Some(5),
                concurrency: Some(10)
            }
        );
        let l = Limit::parse(&json!({"rate": 20})).unwrap();
        assert_eq!(
            (l.per_seconds, l.burst, l.concurrency),
            (1, Some(20), None),
            "burst defaults to rate"
        );
        assert_eq!(
            Limit::parse(&json!({"concurrency": 3})).unwrap().gcra(),
            None
        );
        for (bad, field) in [
            (json!({}), "rate or concurrency"),
            (json!({"rate": 0}), "rate"),
            (json!({"rate": 1_000_001}), "rate"),
            (json!({"rate": 1, "per_seconds": 86_401}), "per_seconds"),
            (json!({"rate": 1, "burst": 0}), "burst"),
            (json!({"concurrency": 10_001}), "concurrency"),
            (json!({"concurrency": 1.5}), "concurrency"),
            (json!({"concurrency": "3"}), "concurrency"),
            (json!({"concurrency": 3, "burst": 2}), "burst"),
            (json!({"rate": 1, "speed": 2}), "speed"),
            (json!([1]), "object"),
        ] {
            let e = Limit::parse(&bad).unwrap_err();
            assert_eq!(e.code(), "invalid_limit", "{bad}");
            assert!(
                e.public_message().contains(field),
                "{bad}: {}",
                e.public_message()
            );
        }
    }

    #[test]
    fn a_key_is_governed_by_its_own_limit_else_its_longest_partition() {
        let defined = ["tenant:*", "tenant:eu:*", "tenant:big", "github"];
        let g = |k| governing(k, defined.iter().copied());
        assert_eq!(g("github"), Some("github"));
        assert_eq!(g("tenant:acme"), Some("tenant:*"));
        assert_eq!(g("tenant:eu:acme"), Some("tenant:eu:*"));
        assert_eq!(g("tenant:big"), Some("tenant:big"), "its own limit wins");
        assert_eq!(
            g("tenant:"),
            None,
            "a partition needs something after its prefix"
        );
        assert_eq!(g("gitlab"), None);
    }

    #[test]
    fn a_rate_allows_its_burst_then_one_start_per_interval() {
        let r = Gcra {
            rate: 20,
            per_seconds: 1,
            burst: 5,
        };
        let now = 1_000_000;
        assert_eq!(r.room(None, now), 5, "a key never used has its whole burst");
        let tat = r.charge(None, now, 5);
        assert_eq!(r.room(Some(tat), now), 0);
        assert_eq!(
            r.room(Some(tat), now + 49),
            0,
            "20 a second: one every 50 ms"
        );
        assert_eq!(r.room(Some(tat), now + 50), 1);
        assert_eq!(r.room(Some(tat), now + 250), 5, "refills up to the burst");
        assert_eq!(r.room(Some(tat), now + 10_000), 5, "and no further");
        // Rates that do not divide a second stay exact: 7 per 3 s.
        let r = Gcra {
            rate: 7,
            per_seconds: 3,
            burst: 1,
        };
        let tat = r.charge(None, now, 1);
        assert_eq!(r.room(Some(tat), now + 428), 0);
        assert_eq!(r.room(Some(tat), now + 429), 1, "3000 / 7 = 428.57 ms");
    }

    #[test]
    fn a_held_claimer_wakes_when_a_batch_of_starts_fits() {
        let r = Gcra {
            rate: 20,
            per_seconds: 1,
            burst: 5,
        };
        let now = 1_000_000;
        // Claimed ahead (the burst and a second's tokens, 25): a second's worth
        // (20) fits by wake + 1 s.
        let spent = r.charge(None, now, 25);
        assert_eq!(r.wake_batch(40, true), 20);
        assert_eq!(r.wake_at(spent, 40, true), now + 1_000);
        assert_eq!(r.room_ahead(Some(spent), now + 1_000), 20);
        assert_eq!(r.room_ahead(Some(spent), now + 999), 19);
        let tat = r.charge(None, now, 5);
        // Started at the claim: half the burst (2) fits 100 ms later; a claim up
        // to 150 ms late still loses no token (room 5 at 250 ms, the burst).
        assert_eq!(r.wake_batch(40, false), 2);
        assert_eq!(r.wake_at(tat, 40, false), now + 100);
        assert_eq!(r.room(Some(tat), r.wake_at(tat, 40, false)), 2);
        assert_eq!(r.room(Some(tat), now + 249), 4);
        // 1 waiting: at the next token (a second early, claimed ahead).
        assert_eq!(r.wake_at(tat, 1, false), r.next_start(tat));
        assert_eq!(r.wake_at(tat, 1, true), r.next_start(tat) - LOOK_AHEAD_MS);
        let single = Gcra { burst: 1, ..r };
        assert_eq!(single.wake_batch(40, false), 1);
        // A slow rate waits for one start only (no more than a second's worth).
        let hourly = Gcra {
            rate: 5_000,
            per_seconds: 3_600,
            burst: 100,
        };
        assert_eq!(hourly.wake_batch(1_000, true), 1);
        let tat = hourly.charge(None, now, 100);
        assert_eq!(hourly.wake_at(tat, 1_000, false), hourly.next_start(tat));
        assert_eq!(hourly.room(Some(tat), hourly.next_start(tat)), 1);
    }

    #[test]
    fn a_held_claimer_wakes_when_an_item_may_go_not_when_one_of_its_keys_has_room() {
        let now = 1_000;
        let at = |t: i64| KeyWake {
            full: false,
            at: Some(t),
        };
        let full = KeyWake {
            full: true,
            at: Some(now),
        };
        let slots = KeyWake {
            full: false,
            at: None,
        };
        // A rate with tokens (its instant now) on a key at its concurrency, or
        // beside one: nothing to wake for but a slot.
        assert_eq!(claim_wake([[full]]), None);
        assert_eq!(claim_wake([[at(now), full]]), None);
        // Beside a pause: the pause's end.
        assert_eq!(
            claim_wake([[at(now), at(now + 60_000)]]),
            Some(now + 60_000)
        );
        // A concurrency with slots left (the claim was cut by its own size) is
        // no instant: alone it never wakes the claimer at once; beside a rate,
        // the rate's.
        assert_eq!(claim_wake([[slots]]), None);
        assert_eq!(claim_wake([[slots, at(now + 300)]]), Some(now + 300));
        // The earliest of the items, each at the latest of its keys.
        let items = [
            vec![at(now + 500), at(now + 2_000)],
            vec![full, at(now + 100)],
            vec![at(now + 1_500)],
        ];
        assert_eq!(claim_wake(items), Some(now + 1_500));
        assert_eq!(claim_wake(Vec::<Vec<KeyWake>>::new()), None);
    }

    #[test]
    fn a_claim_ahead_takes_the_burst_and_a_seconds_tokens_each_at_its_slot() {
        let r = Gcra {
            rate: 20,
            per_seconds: 1,
            burst: 5,
        };
        let now = 1_000_000;
        assert_eq!(
            r.room_ahead(None, now),
            25,
            "the burst and 20 more within 1 s"
        );
        let starts: Vec<i64> = (1..=25).map(|j| r.start_of(None, now, j)).collect();
        assert_eq!(&starts[..6], &[now, now, now, now, now, now + 50]);
        assert_eq!(starts[24], now + 1_000);
        // Spent: only what comes within the second, from the next token on.
        let tat = r.charge(None, now, 25);
        assert_eq!(r.room_ahead(Some(tat), now), 0);
        assert_eq!(r.room_ahead(Some(tat), now + 50), 1);
        assert_eq!(r.start_of(Some(tat), now + 50, 1), now + 1_050);
        // 7 per 3 s, burst 2: slots 428.57 ms apart, rounded up.
        let r = Gcra {
            rate: 7,
            per_seconds: 3,
            burst: 2,
        };
        let tat = r.charge(None, now, 2);
        assert_eq!(r.room_ahead(Some(tat), now), 2);
        assert_eq!(r.start_of(Some(tat), now, 1), now + 429);
        assert_eq!(r.start_of(Some(tat), now, 2), now + 858);
        // A burst of 1 there would drift: no claim ahead, one at each token.
        let one = Gcra { burst: 1, ..r };
        assert!(!one.claims_ahead() && r.claims_ahead());
        let tat = one.charge(None, now, 1);
        assert_eq!(one.room_ahead(Some(tat), now), 0);
        assert_eq!(one.room_ahead(Some(tat), now + 429), 1);
        assert_eq!(one.wake_at(tat, 5, true), one.next_start(tat));
    }

    /// Over random claim instants and sizes, at once or ahead, the starts in
    /// every interval stay within `burst + rate × t / per_seconds`.
    #[test]
    fn no_interval_sees_more_starts_than_the_bound() {
        use rand::{Rng, SeedableRng};
        for seed in 0..200u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let r = Gcra {
                rate: rng.random_range(1..50),
                per_seconds: rng.random_range(1..5),
                burst: rng.random_range(1..20),
            };
            let (mut now, mut tat, mut starts) = (0i64, None, Vec::new());
            for _ in 0..300 {
                now += rng.random_range(0..400);
                let want = rng.random_range(0..10);
                // Half the claims start at once, half at their slots ahead.
                if rng.random_bool(0.5) {
                    let n = want.min(r.room(tat, now));
                    starts.extend(std::iter::repeat_n(now, n as usize));
                    tat = Some(r.charge(tat, now, n));
                } else {
                    let n = want.min(r.room_ahead(tat, now));
                    starts.extend((1..=n).map(|j| r.start_of(tat, now, j)));
                    tat = Some(r.charge(tat, now, n));
                }
            }
            starts.sort_unstable();
            for (i, &a) in starts.iter().enumerate() {
                for (j, &b) in starts.iter().enumerate().skip(i) {
                    let allowed = r.burst as f64
                        + r.rate as f64 * (b - a) as f64 / (r.per_seconds * 1000) as f64;
                    assert!(
                        (j - i + 1) as f64 <= allowed + 1e-9,
                        "seed {seed}: {} starts in {} ms",
                        j - i + 1,
                        b - a
                    );
                }
            }
        }
    }
}
