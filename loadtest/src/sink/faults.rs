//! Fault injection for the sink, read from the hook URL's query string.
//!
//! The faults live in each subject's webhook URL, so a scenario decides how every
//! subject behaves when it seeds the subjects, and the Worker stays unaware of it.
//! Every decision is a pure function of the query, the Idempotency-Key and the
//! delivery number, so a run is reproducible.

use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::time::Duration;

/// The faults requested for one hook URL. `Faults::default()` is a healthy
/// receiver: 200 immediately.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Sleep this long, then answer normally.
    pub latency_ms: u64,
    /// Answer 503 to the first N deliveries of a key, then answer normally.
    pub fail_first: u32,
    /// Always answer this status.
    pub status: Option<u16>,
    /// Sleep this long; meant to outlast the Worker's job timeout.
    pub hang_ms: u64,
    /// Hang (`hang_ms`) only on the first N deliveries of a key, then answer
    /// normally; 0: hang on every delivery.
    pub hang_first: u32,
    /// Probability in 0..=1 of answering 500, decided per (key, delivery).
    pub error_rate: f64,
    /// Answer this 3xx with `Location: /redirected/<subject>` (the sink's redirect
    /// target, which counts whatever reaches it). Wins over every other fault.
    pub redirect: Option<u16>,
    /// Answer with a body of this many MiB, streamed in chunks made as they are
    /// sent (never held): a receiver that talks back far more than asked.
    pub body_mib: u32,
    /// Labels (comma-separated; ASCII letters, digits, `-`, `_`) under each of
    /// which the sink counts requests in flight at once
    /// (`Stats::peak_in_flight_by_group`): what a concurrency limit on the items
    /// sending them allows.
    pub group: Option<String>,
    /// Send `Retry-After: <seconds>` with every answer that is not a 2xx: a
    /// receiver that says when to come back (a pause of its key).
    pub retry_after: Option<u32>,
    /// A receiver that takes at most this many requests a second (a sliding
    /// second over every request carrying the same number) and answers `429`
    /// above it: its rate limit, unknown to the Worker. State of the sink, not
    /// of the query: not decided by [`Faults::decide`].
    pub accept_per_s: u32,
}

/// What the sink does with one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub delay: Duration,
    pub status: u16,
    /// Send a `Location` to the sink's redirect target with the answer.
    pub redirect: bool,
    /// Bytes of the streamed body to answer with (0: the usual small JSON).
    pub body_bytes: u64,
}

impl Faults {
    /// Parses `latency_ms=..&fail_first=..&status=..&hang_ms=..&hang_first=..&error_rate=..&redirect=..&body_mib=..`
    /// (any subset, any order). Unknown keys and bad values are errors: a typo
    /// would otherwise silently turn a fault scenario into a healthy one.
    pub fn parse(query: &str) -> Result<Faults, String> {
        let mut faults = Faults::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("fault `{pair}` has no value"))?;
            let bad = |e: &dyn std::fmt::Display| format!("fault {key}={value}: {e}");
            match key {
                "latency_ms" => faults.latency_ms = value.parse().map_err(|e| bad(&e))?,
                "fail_first" => faults.fail_first = value.parse().map_err(|e| bad(&e))?,
                "hang_ms" => faults.hang_ms = value.parse().map_err(|e| bad(&e))?,
                "hang_first" => faults.hang_first = value.parse().map_err(|e| bad(&e))?,
                "body_mib" => faults.body_mib = value.parse().map_err(|e| bad(&e))?,
                "retry_after" => faults.retry_after = Some(value.parse().map_err(|e| bad(&e))?),
                "accept_per_s" => faults.accept_per_s = value.parse().map_err(|e| bad(&e))?,
                "group" => {
                    let fine = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
                    let label = |l: &str| !l.is_empty() && l.chars().all(fine);
                    if !value.split(',').all(label) {
                        return Err(bad(&"letters, digits, - and _ only"));
                    }
                    faults.group = Some(value.to_string());
                }
                "status" => {
                    let code: u16 = value.parse().map_err(|e| bad(&e))?;
                    if !(100..=599).contains(&code) {
                        return Err(bad(&"not an HTTP status"));
                    }
                    faults.status = Some(code);
                }
                "redirect" => {
                    let code: u16 = value.parse().map_err(|e| bad(&e))?;
                    if !(300..=399).contains(&code) {
                        return Err(bad(&"not a redirect status"));
                    }
                    faults.redirect = Some(code);
                }
                "error_rate" => {
                    let p: f64 = value.parse().map_err(|e| bad(&e))?;
                    if !(0.0..=1.0).contains(&p) {
                        return Err(bad(&"must be within 0..1"));
                    }
                    faults.error_rate = p;
                }
                _ => return Err(format!("unknown fault `{key}`")),
            }
        }
        Ok(faults)
    }

    /// The query string that `parse` turns back into `self` (empty when healthy).
    pub fn to_query(&self) -> String {
        let mut q = String::new();
        let mut add = |k: &str, v: &dyn std::fmt::Display| {
            let sep = if q.is_empty() { "" } else { "&" };
            let _ = write!(q, "{sep}{k}={v}");
        };
        if self.latency_ms > 0 {
            add("latency_ms", &self.latency_ms);
        }
        if self.fail_first > 0 {
            add("fail_first", &self.fail_first);
        }
        if let Some(code) = self.status {
            add("status", &code);
        }
        if self.hang_ms > 0 {
            add("hang_ms", &self.hang_ms);
        }
        if self.hang_first > 0 {
            add("hang_first", &self.hang_first);
        }
        if self.error_rate > 0.0 {
            add("error_rate", &self.error_rate);
        }
        if let Some(code) = self.redirect {
            add("redirect", &code);
        }
        if self.body_mib > 0 {
            add("body_mib", &self.body_mib);
        }
        if let Some(group) = &self.group {
            add("group", group);
        }
        if let Some(secs) = self.retry_after {
            add("retry_after", &secs);
        }
        if self.accept_per_s > 0 {
            add("accept_per_s", &self.accept_per_s);
        }
        q
    }

    /// The answer to delivery number `delivery` (1-based) of Idempotency-Key `key`.
    /// A `redirect` wins over a fixed `status`, which wins over `fail_first`, which
    /// wins over `error_rate`.
    pub fn decide(&self, key: &str, delivery: u32) -> Decision {
        let status = if let Some(code) = self.redirect {
            code
        } else if let Some(code) = self.status {
            code
        } else if delivery <= self.fail_first {
            503
        } else if self.error_rate > 0.0 && unit_hash(key, delivery) < self.error_rate {
            500
        } else {
            200
        };
        let hang_ms = if self.hangs(delivery) {
            self.hang_ms
        } else {
            0
        };
        Decision {
            delay: Duration::from_millis(self.latency_ms.saturating_add(hang_ms)),
            status,
            redirect: self.redirect.is_some(),
            body_bytes: u64::from(self.body_mib) << 20,
        }
    }

    /// Whether delivery number `delivery` (1-based) of a key hangs for `hang_ms`.
    pub fn hangs(&self, delivery: u32) -> bool {
        self.hang_ms > 0 && (self.hang_first == 0 || delivery <= self.hang_first)
    }
}

/// A deterministic number in [0, 1) for (key, delivery): the first 8 bytes of
/// SHA-256 over "key:delivery". Stable across platforms and runs, unlike
/// `std`'s randomly seeded hasher.
fn unit_hash(key: &str, delivery: u32) -> f64 {
    let digest = Sha256::digest(format!("{key}:{delivery}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // Keep 53 bits so the quotient is exact in an f64 and strictly below 1.
    (u64::from_be_bytes(first) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_query_is_healthy() {
        let f = Faults::parse("").unwrap();
        assert_eq!(f, Faults::default());
        assert_eq!(
            f.decide("1", 1),
            Decision {
                delay: Duration::ZERO,
                status: 200,
                redirect: false,
                body_bytes: 0,
            }
        );
    }

    #[test]
    fn parses_every_fault_and_round_trips() {
        let f = Faults::parse(
            "latency_ms=20&fail_first=2&status=418&hang_ms=3000&hang_first=1&error_rate=0.25&redirect=302&body_mib=50&group=g-1,all&retry_after=3&accept_per_s=10",
        )
        .unwrap();
        assert_eq!(
            f,
            Faults {
                latency_ms: 20,
                fail_first: 2,
                status: Some(418),
                hang_ms: 3000,
                hang_first: 1,
                error_rate: 0.25,
                redirect: Some(302),
                body_mib: 50,
                group: Some("g-1,all".into()),
                retry_after: Some(3),
                accept_per_s: 10,
            }
        );
        assert_eq!(f.decide("k", 1).body_bytes, 50 << 20);
        assert_eq!(Faults::parse(&f.to_query()).unwrap(), f);
        assert_eq!(Faults::default().to_query(), "");
    }

    #[test]
    fn rejects_bad_input() {
        for q in [
            "latency=5",
            "status=abc",
            "status=99",
            "error_rate=1.5",
            "fail_first",
            "hang_ms=-1",
            "hang_first=x",
            "redirect=200",
            "redirect=400",
            "body_mib=-1",
            "group=",
            "group=a%20b",
            "group=a,,b",
        ] {
            assert!(Faults::parse(q).is_err(), "{q} should be rejected");
        }
    }

    #[test]
    fn a_redirect_wins_and_says_so() {
        let f = Faults::parse("redirect=307&status=500").unwrap();
        let d = f.decide("k", 1);
        assert_eq!((d.status, d.redirect), (307, true));
        assert!(!Faults::parse("status=301").unwrap().decide("k", 1).redirect);
    }

    #[test]
    fn fail_first_then_succeed() {
        let f = Faults::parse("fail_first=2").unwrap();
        let statuses: Vec<u16> = (1..=4).map(|n| f.decide("7", n).status).collect();
        assert_eq!(statuses, [503, 503, 200, 200]);
    }

    #[test]
    fn fixed_status_wins_and_delays_add_up() {
        let f = Faults::parse("status=400&fail_first=5&latency_ms=10&hang_ms=5").unwrap();
        assert_eq!(
            f.decide("k", 9),
            Decision {
                delay: Duration::from_millis(15),
                status: 400,
                redirect: false,
                body_bytes: 0,
            }
        );
    }

    #[test]
    fn hang_first_hangs_the_first_deliveries_only() {
        let f = Faults::parse("hang_ms=3000&hang_first=2&latency_ms=10").unwrap();
        let delays: Vec<u64> = (1..=3)
            .map(|n| f.decide("k", n).delay.as_millis() as u64)
            .collect();
        assert_eq!(delays, [3010, 3010, 10]);
        assert_eq!((f.hangs(2), f.hangs(3)), (true, false));
        let always = Faults::parse("hang_ms=5").unwrap();
        assert!(always.hangs(1) && always.hangs(99));
        assert!(!Faults::default().hangs(1));
    }

    #[test]
    fn error_rate_is_deterministic_and_roughly_right() {
        let f = Faults::parse("error_rate=0.3").unwrap();
        let run = || {
            (0..2000)
                .map(|k| f.decide(&k.to_string(), 1).status)
                .collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run(), "same inputs, same answers");
        let errors = first.iter().filter(|&&s| s == 500).count();
        assert!((500..700).contains(&errors), "{errors} of 2000 at p=0.3");
        assert!(first.iter().all(|&s| s == 200 || s == 500));
        assert_eq!(
            Faults::parse("error_rate=1").unwrap().decide("x", 3).status,
            500
        );
        assert_eq!(
            Faults::parse("error_rate=0").unwrap().decide("x", 3).status,
            200
        );
    }
}
