//! What a scenario seeds: one subject per planned entry, each with the faults its
//! hook URL carries and the end state the Worker must bring it to.

use crate::runtime::api::SubjectIn;
use crate::sink::faults::Faults;
use crate::sink::SinkClient;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// How a subject's webhook behaves, and so how its item must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Expect {
    /// 200 at once: completed on attempt 1, one delivery.
    Healthy,
    /// 503 for the first N deliveries: completed on attempt N+1.
    FailFirst(u32),
    /// Always 500 (retryable): failed once attempts run out.
    ServerError,
    /// Always 400 (permanent): failed on attempt 1.
    ClientError,
    /// Sleeps past the job timeout: failed once attempts run out, for a timeout.
    Hang,
    /// Answers a 3xx with a Location: failed on attempt 1 (redirects are not
    /// followed), and nothing reaches the Location.
    Redirect,
    /// Random latency/error mix of the demo: any end state is acceptable.
    Any,
}

impl Expect {
    /// What an item whose webhook has `faults` must end as, given its
    /// Idempotency-Key (the item id as text): the sink decides each delivery
    /// deterministically, so even a random error rate has one right answer.
    /// Latency is assumed to stay under the Worker's job timeout.
    pub fn from_faults(faults: &Faults, key: &str, max_attempts: u32) -> Expect {
        if faults.redirect.is_some() {
            return Expect::Redirect;
        }
        if faults.hang_ms > 0 {
            return Expect::Hang;
        }
        match faults.status {
            Some(s) if s < 300 => Expect::Healthy,
            Some(s) if s < 500 => Expect::ClientError,
            Some(_) => Expect::ServerError,
            None => match (1..=max_attempts).find(|&n| faults.decide(key, n).status == 200) {
                Some(1) => Expect::Healthy,
                Some(n) => Expect::FailFirst(n - 1),
                // fail_first answers 503 rather than 500; only error_rate gets here
                // in practice, and its errors are 500s.
                None => Expect::ServerError,
            },
        }
    }

    pub fn label(self) -> String {
        match self {
            Expect::Healthy => "healthy".into(),
            Expect::FailFirst(n) => format!("fail_first={n}"),
            Expect::ServerError => "status=500".into(),
            Expect::ClientError => "status=400".into(),
            Expect::Hang => "hang".into(),
            Expect::Redirect => "redirect".into(),
            Expect::Any => "any".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Planned {
    pub id: String,
    pub faults: Faults,
    pub expect: Expect,
}

/// One subject in [`BIG_DATA_EVERY`] carries this many bytes of extra `data`.
pub const BIG_DATA_BYTES: usize = 12 * 1024;
pub const BIG_DATA_EVERY: usize = 100;

impl Planned {
    /// The `data` a webhook subject carries, and its delivery must carry back. Every
    /// one has non-ASCII text; one in [`BIG_DATA_EVERY`] is over 12 KiB, so items
    /// of both sizes cross the dispatch (and the webhook) intact.
    pub fn data(&self, n: usize) -> Value {
        let mut data = json!({"n": n, "expect": self.expect.label(), "note": "naïve ✓ 100%"});
        if n % BIG_DATA_EVERY == BIG_DATA_EVERY / 2 {
            data["pad"] = json!("ü".repeat(BIG_DATA_BYTES / 2));
        }
        data
    }

    /// The subject as `PUT /subjects` takes it, pointing at `sink`.
    pub fn subject(&self, sink: &SinkClient, n: usize) -> SubjectIn {
        SubjectIn {
            id: self.id.clone(),
            kind: "webhook".into(),
            payload: json!({
                "url": sink.hook_url(&self.id, &self.faults),
                "data": self.data(n),
            }),
            active: true,
            group: None,
            timezone: None,
        }
    }
}

/// A `noop` subject: the job does nothing and succeeds, so no sink is involved.
pub fn noop_subject(id: String) -> SubjectIn {
    SubjectIn {
        id,
        kind: "noop".into(),
        payload: json!({}),
        active: true,
        group: None,
        timezone: None,
    }
}

/// `total` subjects `<prefix>-000000`… with `faults`, of which `share` (0..=1)
/// get `odd` instead, spread evenly (claims go in id order).
pub fn uniform(
    prefix: &str,
    total: usize,
    faults: Faults,
    odd: Option<(f64, Faults)>,
) -> Vec<Planned> {
    let every = odd
        .as_ref()
        .filter(|(share, _)| *share > 0.0)
        .map(|(share, _)| (1.0 / share).round().max(1.0) as usize);
    (0..total)
        .map(|i| {
            let odd_one = every.is_some_and(|k| i % k == k / 2);
            let faults = match (&odd, odd_one) {
                (Some((_, f)), true) => f.clone(),
                _ => faults.clone(),
            };
            Planned {
                id: format!("{prefix}-{i:06}"),
                faults,
                // Decided per item once its id is known: `Expect::from_faults`.
                expect: Expect::Any,
            }
        })
        .collect()
}

/// The e2e suite's mix: `total` subjects, of which the given numbers are faulty.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    pub total: usize,
    pub fail_first: usize,
    pub server_error: usize,
    pub client_error: usize,
    pub hang: usize,
}

impl Mix {
    pub const E2E: Mix = Mix {
        total: 500,
        fail_first: 10,
        server_error: 5,
        client_error: 4,
        hang: 1,
    };

    pub fn faulty(&self) -> usize {
        self.fail_first + self.server_error + self.client_error + self.hang
    }
}

/// Subjects `<prefix>-0000`… with the faulty ones spread evenly among the
/// healthy ones (claims go in id order; spreading puts faults in every chunk).
/// `hang_ms` must exceed the Worker's job timeout.
pub fn e2e(prefix: &str, mix: Mix, hang_ms: u64) -> Vec<Planned> {
    let mut faulty: Vec<(Faults, Expect)> = Vec::new();
    let push = |list: &mut Vec<_>, n: usize, f: Faults, e: Expect| {
        list.extend((0..n).map(|_| (f.clone(), e)))
    };
    push(
        &mut faulty,
        mix.fail_first,
        Faults {
            fail_first: 2,
            ..Faults::default()
        },
        Expect::FailFirst(2),
    );
    push(
        &mut faulty,
        mix.server_error,
        Faults {
            status: Some(500),
            ..Faults::default()
        },
        Expect::ServerError,
    );
    push(
        &mut faulty,
        mix.client_error,
        Faults {
            status: Some(400),
            ..Faults::default()
        },
        Expect::ClientError,
    );
    push(
        &mut faulty,
        mix.hang,
        Faults {
            hang_ms,
            ..Faults::default()
        },
        Expect::Hang,
    );
    let total = mix.total.max(faulty.len());
    let stride = if faulty.is_empty() {
        1
    } else {
        total / faulty.len()
    };
    let mut faulty = faulty.into_iter();
    (0..total)
        .map(|i| {
            let (faults, expect) = if i % stride == stride / 2 {
                faulty.next()
            } else {
                None
            }
            .unwrap_or((Faults::default(), Expect::Healthy));
            Planned {
                id: format!("{prefix}-{i:04}"),
                faults,
                expect,
            }
        })
        .collect()
}

/// The same ids, all healthy but slow, so a crash catches items in flight.
pub fn all_slow(plan: &[Planned], latency_ms: u64) -> Vec<Planned> {
    plan.iter()
        .map(|p| Planned {
            id: p.id.clone(),
            faults: Faults {
                latency_ms,
                ..Faults::default()
            },
            expect: Expect::Healthy,
        })
        .collect()
}

/// The demo: `total` subjects answering after 50..500 ms, a few of them with
/// faults. Seeded, so every demo run looks the same.
pub fn demo(total: usize) -> Vec<Planned> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2024);
    (0..total)
        .map(|i| {
            let mut faults = Faults {
                latency_ms: rng.random_range(50..=500),
                ..Faults::default()
            };
            match i % 40 {
                7 => faults.fail_first = 1,
                17 => faults.error_rate = 0.3,
                27 => faults.status = Some(500),
                37 => faults.status = Some(404),
                _ => {}
            }
            Planned {
                id: format!("demo-{i:03}"),
                faults,
                expect: Expect::Any,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(plan: &[Planned], e: Expect) -> usize {
        plan.iter().filter(|p| p.expect == e).count()
    }

    #[test]
    fn e2e_mix_has_every_kind_once_spread() {
        let plan = e2e("t", Mix::E2E, 3000);
        assert_eq!(plan.len(), 500);
        assert_eq!(count(&plan, Expect::FailFirst(2)), 10);
        assert_eq!(count(&plan, Expect::ServerError), 5);
        assert_eq!(count(&plan, Expect::ClientError), 4);
        assert_eq!(count(&plan, Expect::Hang), 1);
        assert_eq!(count(&plan, Expect::Healthy), 480);
        // Spread: the first fault is not at the very start, the last not at the end.
        let positions: Vec<usize> = plan
            .iter()
            .enumerate()
            .filter(|(_, p)| p.expect != Expect::Healthy)
            .map(|(i, _)| i)
            .collect();
        assert!(positions[0] > 0 && *positions.last().unwrap() < 499);
        let ids: std::collections::HashSet<_> = plan.iter().map(|p| &p.id).collect();
        assert_eq!(ids.len(), 500);
        assert_eq!(plan[0].id, "t-0000");
    }

    #[test]
    fn small_mix_still_plants_all_faults() {
        let plan = e2e(
            "t",
            Mix {
                total: 5,
                ..Mix::E2E
            },
            3000,
        );
        assert_eq!(plan.len(), Mix::E2E.faulty());
        assert_eq!(count(&plan, Expect::Healthy), 0);
    }

    #[test]
    fn hook_urls_carry_the_faults() {
        let sink = SinkClient::new("http://127.0.0.1:9");
        let plan = e2e("t", Mix::E2E, 3000);
        let hang = plan.iter().find(|p| p.expect == Expect::Hang).unwrap();
        let s = hang.subject(&sink, 1);
        assert_eq!(
            s.payload["url"],
            format!("http://127.0.0.1:9/hook/{}?hang_ms=3000", hang.id)
        );
        assert_eq!(s.kind, "webhook");
    }

    #[test]
    fn expectations_follow_the_faults() {
        let f = |q: &str| Faults::parse(q).unwrap();
        assert_eq!(Expect::from_faults(&f(""), "1", 3), Expect::Healthy);
        assert_eq!(
            Expect::from_faults(&f("latency_ms=500"), "1", 3),
            Expect::Healthy
        );
        assert_eq!(
            Expect::from_faults(&f("status=500"), "1", 3),
            Expect::ServerError
        );
        assert_eq!(
            Expect::from_faults(&f("status=404"), "1", 3),
            Expect::ClientError
        );
        assert_eq!(Expect::from_faults(&f("hang_ms=9"), "1", 3), Expect::Hang);
        assert_eq!(
            Expect::from_faults(&f("fail_first=2"), "1", 3),
            Expect::FailFirst(2)
        );
        assert_eq!(
            Expect::from_faults(&f("fail_first=3"), "1", 3),
            Expect::ServerError
        );
        // error_rate: the first delivery the sink answers 200 decides.
        let flaky = f("error_rate=0.5");
        for key in 0..200 {
            let key = key.to_string();
            let first_ok = (1..=3).find(|&n| flaky.decide(&key, n).status == 200);
            let want = match first_ok {
                Some(1) => Expect::Healthy,
                Some(n) => Expect::FailFirst(n - 1),
                None => Expect::ServerError,
            };
            assert_eq!(Expect::from_faults(&flaky, &key, 3), want);
        }
    }

    #[test]
    fn uniform_spreads_the_odd_share() {
        let poison = Faults {
            status: Some(500),
            ..Faults::default()
        };
        let plan = uniform("p", 1000, Faults::default(), Some((0.05, poison.clone())));
        let odd: Vec<usize> = (0..1000).filter(|&i| plan[i].faults == poison).collect();
        assert_eq!(odd.len(), 50);
        assert_eq!(odd[0], 10);
        assert_eq!(plan[999].id, "p-000999");
        assert!(uniform("p", 10, Faults::default(), Some((0.0, poison)))
            .iter()
            .all(|p| p.faults == Faults::default()));
        assert_eq!(noop_subject("x".into()).kind, "noop");
    }

    #[test]
    fn demo_is_reproducible() {
        let a: Vec<String> = demo(200).iter().map(|p| p.faults.to_query()).collect();
        let b: Vec<String> = demo(200).iter().map(|p| p.faults.to_query()).collect();
        assert_eq!(a, b);
        assert!(demo(200)
            .iter()
            .all(|p| (50..=500).contains(&p.faults.latency_ms)));
    }
}
