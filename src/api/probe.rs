//! `POST /probe`'s body, and the body of the probe's child call
//! (`POST /internal/probe`): parsed and bounded here; the calls themselves need
//! the runtime (`edge::probe`).
//!
//! Four modes measure what the platform's pages leave open: `self_calls` (how
//! many SELF calls one request can make, sequentially or concurrently, and the
//! refusal's message), `connections` (whether children fetching a slow URL share
//! the caller's 6 connections), `cpu` (whether children that burn CPU run in
//! parallel) and `service` (a `service` item's run, straight from the caller as
//! the drain makes it, or through a SELF child: the two paths timed against each
//! other). A body without `mode` is `self_calls`.

use serde::{Deserialize, Serialize};

use crate::core::batch::requests::parse_json;
use crate::core::error::ApiError;
use crate::core::security::target::{self, TargetPolicy};

/// Upper bounds that keep a probe from becoming a load test by accident.
pub const MAX_CALLS: i64 = 100_000;
pub const MAX_CONCURRENCY: i64 = 1_000;
/// Children of one `connections` or `cpu` probe: under the documented 32
/// invocations per request, so those modes never meet that cap.
pub const MAX_CHILDREN: i64 = 30;
/// A burning child's work: about a second of CPU locally at the top.
pub const MAX_ITERATIONS: i64 = 200_000_000;
/// How long a child waits for the slow URL before giving up.
pub const FETCH_TIMEOUT_MS: u32 = 30_000;

/// What a `POST /probe` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeRequest {
    /// `calls` `GET /health` calls through SELF, `concurrency` in flight.
    SelfCalls { calls: i64, concurrency: i64 },
    /// `children` SELF calls at once, each fetching `url` once.
    Connections { children: i64, url: String },
    /// `children` SELF calls at once, each burning `iterations` of CPU.
    Cpu { children: i64, iterations: i64 },
    /// `calls` runs of a `service` item calling the binding `service`,
    /// `concurrency` in flight, each made `via` one path.
    Service {
        service: String,
        calls: i64,
        concurrency: i64,
        via: Via,
    },
}

/// How a `service` probe reaches the bound Worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The caller runs the item itself, as the drain runs `service` items: one
    /// invocation (the bound Worker's) per call.
    Drain,
    /// A signed `POST /internal/run` through SELF, whose child runs the item:
    /// two invocations (the child, the bound Worker) per call.
    #[serde(rename = "self")]
    SelfChild,
}

/// The body as sent: every field of every mode, checked against the mode after.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    mode: Option<String>,
    calls: Option<i64>,
    concurrency: Option<i64>,
    children: Option<i64>,
    url: Option<String>,
    iterations: Option<i64>,
    service: Option<String>,
    via: Option<String>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_probe", message)
}

fn bounded(
    field: &str,
    value: Option<i64>,
    default: Option<i64>,
    max: i64,
) -> Result<i64, ApiError> {
    let value = value
        .or(default)
        .ok_or_else(|| invalid(format!("{field} is required")))?;
    if (1..=max).contains(&value) {
        Ok(value)
    } else {
        Err(invalid(format!("{field} must be 1 to {max}")))
    }
}

/// The probe a body asks for: strict JSON, then the mode's fields and bounds
/// (400 `invalid_probe`). A `connections` URL follows the webhook target rules; a
/// `service` binding must be one a `service` item may name (`SERVICE_BINDINGS`).
pub fn parse(body: &[u8], policy: &TargetPolicy) -> Result<ProbeRequest, ApiError> {
    let b: Body = parse_json(body)?;
    let mode = b.mode.as_deref().unwrap_or("self_calls");
    let allowed: &[&str] = match mode {
        "self_calls" => &["calls", "concurrency"],
        "connections" => &["children", "url"],
        "cpu" => &["children", "iterations"],
        "service" => &["service", "calls", "concurrency", "via"],
        other => {
            return Err(invalid(format!(
                "mode must be self_calls, connections, cpu or service, got {other:?}"
            )))
        }
    };
    let given = [
        ("calls", b.calls.is_some()),
        ("concurrency", b.concurrency.is_some()),
        ("children", b.children.is_some()),
        ("url", b.url.is_some()),
        ("iterations", b.iterations.is_some()),
        ("service", b.service.is_some()),
        ("via", b.via.is_some()),
    ];
    if let Some((field, _)) = given.iter().find(|(f, set)| *set && !allowed.contains(f)) {
        return Err(invalid(format!("{field} is not a field of mode {mode}")));
    }
    Ok(match mode {
        "self_calls" => ProbeRequest::SelfCalls {
            calls: bounded("calls", b.calls, None, MAX_CALLS)?,
            concurrency: bounded("concurrency", b.concurrency, Some(25), MAX_CONCURRENCY)?,
        },
        "connections" => {
            let raw = b.url.ok_or_else(|| invalid("url is required"))?;
            let url = target::validate(&raw, policy).map_err(|e| invalid(e.to_string()))?;
            ProbeRequest::Connections {
                children: bounded("children", b.children, Some(18), MAX_CHILDREN)?,
                url: url.to_string(),
            }
        }
        "cpu" => ProbeRequest::Cpu {
            children: bounded("children", b.children, Some(8), MAX_CHILDREN)?,
            iterations: bounded("iterations", b.iterations, Some(20_000_000), MAX_ITERATIONS)?,
        },
        _ => {
            let service = b.service.ok_or_else(|| invalid("service is required"))?;
            let payload = serde_json::json!({ "service": service });
            crate::jobs::service::parse_payload(&payload, policy.services).map_err(invalid)?;
            let via = match b.via.as_deref().unwrap_or("drain") {
                "drain" => Via::Drain,
                "self" => Via::SelfChild,
                other => return Err(invalid(format!("via must be drain or self, got {other:?}"))),
            };
            ProbeRequest::Service {
                service,
                calls: bounded("calls", b.calls, None, MAX_CALLS)?,
                concurrency: bounded("concurrency", b.concurrency, Some(25), MAX_CONCURRENCY)?,
                via,
            }
        }
    })
}

/// What the probe asks one child to do (`POST /internal/probe`, signed like a
/// dispatch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProbeTask {
    /// `GET url` once (redirects not followed) and report the status and time.
    Fetch { url: String },
    /// Burn `iterations` of CPU ([`burn`]) and report the time.
    Burn { iterations: i64 },
}

/// A child's task, bounded again: the signature proves who sent it, not that it
/// is small.
pub fn parse_task(body: &[u8]) -> Result<ProbeTask, ApiError> {
    let task: ProbeTask = parse_json(body)?;
    match &task {
        ProbeTask::Burn { iterations } if !(1..=MAX_ITERATIONS).contains(iterations) => {
            Err(invalid(format!("iterations must be 1 to {MAX_ITERATIONS}")))
        }
        ProbeTask::Fetch { url } => target::parse(url)
            .map(|_| task.clone())
            .map_err(|e| invalid(e.to_string())),
        _ => Ok(task),
    }
}

/// CPU work that cannot be optimised away: an xorshift walk whose end state is
/// returned (and reported, so the compiler must compute it).
pub fn burn(iterations: i64) -> u64 {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..iterations {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: TargetPolicy = TargetPolicy::LOCAL;
    const PROD: TargetPolicy = TargetPolicy::PUBLIC;

    fn parsed(body: &str, policy: &TargetPolicy) -> Result<ProbeRequest, (String, String)> {
        parse(body.as_bytes(), policy).map_err(|e| (e.code().to_string(), e.body().to_string()))
    }

    #[test]
    fn a_body_without_mode_is_self_calls() {
        assert_eq!(
            parsed(r#"{"calls": 10}"#, &PROD),
            Ok(ProbeRequest::SelfCalls {
                calls: 10,
                concurrency: 25
            })
        );
        assert_eq!(
            parsed(
                r#"{"mode": "self_calls", "calls": 40, "concurrency": 1}"#,
                &PROD
            ),
            Ok(ProbeRequest::SelfCalls {
                calls: 40,
                concurrency: 1
            })
        );
    }

    #[test]
    fn connections_and_cpu_take_their_defaults() {
        assert_eq!(
            parsed(
                r#"{"mode": "connections", "url": "https://example.com/delay/2"}"#,
                &PROD
            ),
            Ok(ProbeRequest::Connections {
                children: 18,
                url: "https://example.com/delay/2".into()
            })
        );
        assert_eq!(
            parsed(r#"{"mode": "cpu"}"#, &PROD),
            Ok(ProbeRequest::Cpu {
                children: 8,
                iterations: 20_000_000
            })
        );
        assert_eq!(
            parsed(
                r#"{"mode": "cpu", "children": 30, "iterations": 200000000}"#,
                &PROD
            ),
            Ok(ProbeRequest::Cpu {
                children: 30,
                iterations: 200_000_000
            })
        );
    }

    #[test]
    fn bad_bodies_are_invalid_probe_with_the_rule() {
        for (body, says) in [
            (r#"{"mode": "dns"}"#, "mode must be"),
            (r#"{"mode": "self_calls"}"#, "calls is required"),
            (r#"{"mode": "connections"}"#, "url is required"),
            (
                r#"{"mode": "connections", "url": "https://x.com", "children": 31}"#,
                "children must be 1 to 30",
            ),
            (
                r#"{"mode": "cpu", "children": 0}"#,
                "children must be 1 to 30",
            ),
            (
                r#"{"mode": "cpu", "iterations": 200000001}"#,
                "iterations must be 1 to",
            ),
            (
                r#"{"mode": "cpu", "calls": 5}"#,
                "calls is not a field of mode cpu",
            ),
            (
                r#"{"calls": 5, "url": "https://x.com"}"#,
                "url is not a field of mode self_calls",
            ),
            (
                r#"{"mode": "connections", "url": "ftp://x.com"}"#,
                "http:// or https://",
            ),
        ] {
            let (code, message) = parsed(body, &PROD).unwrap_err();
            assert_eq!(code, "invalid_probe", "{body}");
            assert!(message.contains(says), "{body}: {message}");
        }
    }

    #[test]
    fn a_connections_url_follows_the_webhook_target_rules() {
        let local = r#"{"mode": "connections", "url": "http://127.0.0.1:9000/slow"}"#;
        let (code, message) = parsed(local, &PROD).unwrap_err();
        assert_eq!(code, "invalid_probe");
        assert!(message.contains("ALLOW_PRIVATE_TARGETS"), "{message}");
        assert!(parsed(local, &DEV).is_ok());
    }

    #[test]
    fn a_service_probe_names_a_callable_binding_and_a_path() {
        let services = ["HANDLER".to_string()];
        let policy = TargetPolicy {
            services: &services,
            ..PROD
        };
        assert_eq!(
            parsed(
                r#"{"mode": "service", "service": "HANDLER", "calls": 50}"#,
                &policy
            ),
            Ok(ProbeRequest::Service {
                service: "HANDLER".into(),
                calls: 50,
                concurrency: 25,
                via: Via::Drain
            })
        );
        assert_eq!(
            parsed(
                r#"{"mode": "service", "service": "HANDLER", "calls": 5, "concurrency": 2, "via": "self"}"#,
                &policy
            ),
            Ok(ProbeRequest::Service {
                service: "HANDLER".into(),
                calls: 5,
                concurrency: 2,
                via: Via::SelfChild
            })
        );
        for (body, says) in [
            (r#"{"mode": "service", "calls": 5}"#, "service is required"),
            (
                r#"{"mode": "service", "service": "OTHER", "calls": 5}"#,
                "SERVICE_BINDINGS must list it",
            ),
            (
                r#"{"mode": "service", "service": "HANDLER"}"#,
                "calls is required",
            ),
            (
                r#"{"mode": "service", "service": "HANDLER", "calls": 5, "via": "queue"}"#,
                "via must be drain or self",
            ),
            (
                r#"{"mode": "service", "service": "HANDLER", "calls": 5, "children": 2}"#,
                "children is not a field of mode service",
            ),
            (
                r#"{"calls": 5, "via": "self"}"#,
                "via is not a field of mode self_calls",
            ),
        ] {
            let (code, message) = parsed(body, &policy).unwrap_err();
            assert_eq!(code, "invalid_probe", "{body}");
            assert!(message.contains(says), "{body}: {message}");
        }
        // Without SERVICE_BINDINGS no binding is callable.
        let (_, message) = parsed(
            r#"{"mode": "service", "service": "HANDLER", "calls": 5}"#,
            &PROD,
        )
        .unwrap_err();
        assert!(message.contains("callable: none"), "{message}");
    }

    #[test]
    fn tasks_are_strict_and_bounded() {
        assert_eq!(
            parse_task(br#"{"task": "burn", "iterations": 5}"#),
            Ok(ProbeTask::Burn { iterations: 5 })
        );
        assert_eq!(
            parse_task(br#"{"task": "fetch", "url": "https://example.com/"}"#),
            Ok(ProbeTask::Fetch {
                url: "https://example.com/".into()
            })
        );
        for body in [
            r#"{"task": "burn", "iterations": 0}"#,
            r#"{"task": "burn", "iterations": 200000001}"#,
            r#"{"task": "fetch", "url": "file:///etc/passwd"}"#,
            r#"{"task": "burn", "iterations": 5, "x": 1}"#,
            r#"{"task": "sleep"}"#,
        ] {
            assert!(parse_task(body.as_bytes()).is_err(), "{body}");
        }
    }

    #[test]
    fn burn_depends_on_every_iteration() {
        assert_ne!(burn(1_000), burn(1_001));
        assert_eq!(burn(1_000), burn(1_000));
    }
}
