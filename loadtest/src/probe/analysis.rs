//! What `loadtest probe`'s recorded answers say about the platform's limits: pure
//! functions from the answers of `POST /probe` ([`Recorded`]) to one
//! [`Finding`] per limit (documented, measured, verdict), and the markdown table
//! for docs/benchmarks/envelope.md's "verified" column. Host-tested on recorded answers
//! (`loadtest/fixtures/probe/*.json`).

use crate::runtime::api::{ChildrenProbe, Probe};
use serde::{Deserialize, Serialize};

/// The documented cap: "A single request has a maximum of 32 Worker invocations".
pub const DOCUMENTED_INVOCATIONS: u64 = 32;
/// The documented simultaneous open connections per request, shared by children.
pub const DOCUMENTED_CONNECTIONS: f64 = 6.0;
/// Below this, a child's slow fetch or CPU burn is too short to time against the
/// round trip's own noise.
pub const MIN_TASK_MS: f64 = 200.0;

/// Everything one `loadtest probe` run recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recorded {
    /// Against a local `wrangler dev`, where no limit is enforced.
    pub local: bool,
    /// The self-call ladder at concurrency 1, each step a fresh request.
    pub sequential: Vec<Probe>,
    /// The same ladder at the concurrency asked for.
    pub concurrent: Vec<Probe>,
    /// One child fetching the slow URL, then many at once (none without a URL).
    pub connections: Option<Pair>,
    /// One child burning CPU, then many at once.
    pub cpu: Option<Pair>,
}

/// One child alone, then `together.children` at once: the alone run is the yardstick.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pair {
    pub alone: ChildrenProbe,
    pub together: ChildrenProbe,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub limit: String,
    pub documented: String,
    pub measured: String,
    pub verdict: String,
}

const LOCAL: &str = "not verified: wrangler dev enforces no limit";

/// Every finding of a run, in table order.
pub fn findings(r: &Recorded) -> Vec<Finding> {
    let mut out = vec![
        self_calls(&r.sequential, "sequential (1 in flight)", r.local),
        self_calls(
            &r.concurrent,
            &format!(
                "concurrent ({} in flight)",
                r.concurrent.first().map_or(0, |p| p.concurrency)
            ),
            r.local,
        ),
    ];
    out.push(match &r.connections {
        Some(pair) => connections(pair, r.local),
        None => Finding {
            limit: CONNECTIONS_LIMIT.into(),
            documented: CONNECTIONS_DOC.into(),
            measured: "not run: pass --slow-url".into(),
            verdict: "not verified".into(),
        },
    });
    if let Some(pair) = &r.cpu {
        out.push(cpu(pair, r.local));
    }
    out
}

/// The first refusal over a ladder's steps, with the step it happened in.
fn first_refusal(steps: &[Probe]) -> Option<(&Probe, u64, &str)> {
    steps.iter().find_map(|p| {
        p.first_refusal
            .as_ref()
            .map(|r| (p, r.call, r.message.as_str()))
    })
}

/// Calls of `p` that answered an error status (not refusals), as "N× HTTP 500".
fn error_statuses(p: &Probe) -> Vec<String> {
    p.runs
        .iter()
        .filter(|r| r.result == "status")
        .fold(Vec::<(String, u64)>::new(), |mut acc, r| {
            let m = r.message.clone().unwrap_or_default();
            match acc.iter_mut().find(|(k, _)| *k == m) {
                Some((_, n)) => *n += r.count,
                None => acc.push((m, r.count)),
            }
            acc
        })
        .into_iter()
        .map(|(m, n)| format!("{n}× {m}"))
        .collect()
}

/// How many SELF calls one request made before the first refusal.
pub fn self_calls(steps: &[Probe], how: &str, local: bool) -> Finding {
    let documented = format!(
        "{DOCUMENTED_INVOCATIONS} invocations per request, each SELF call counts; further calls throw"
    );
    let limit = format!("SELF calls per request, {how}");
    let statuses: Vec<String> = steps.iter().flat_map(error_statuses).collect();
    let not_refusals = if statuses.is_empty() {
        String::new()
    } else {
        format!(
            "; answered error statuses, not refusals: {}",
            statuses.join(", ")
        )
    };
    let (measured, verdict) = match first_refusal(steps) {
        Some((p, call, message)) => {
            let measured = format!(
                "refused at call #{} of {} ({call} made before it, {} of {} ok): \"{message}\"{not_refusals}",
                call + 1,
                p.calls,
                p.ok,
                p.calls
            );
            // The request itself may or may not be one of the 32.
            let verdict = if call + 1 == DOCUMENTED_INVOCATIONS || call == DOCUMENTED_INVOCATIONS {
                format!("confirmed: the cap is {DOCUMENTED_INVOCATIONS} invocations per request")
            } else {
                format!("differs: refused after {call} calls, not {DOCUMENTED_INVOCATIONS}")
            };
            (measured, verdict)
        }
        None => {
            let most = steps.iter().map(|p| p.calls).max().unwrap_or(0);
            let measured = format!("no refusal in {most} calls{not_refusals}");
            let verdict = if most >= DOCUMENTED_INVOCATIONS {
                format!("not seen: {most} calls made without a refusal")
            } else {
                format!("inconclusive: fewer than {DOCUMENTED_INVOCATIONS} calls tried")
            };
            (measured, verdict)
        }
    };
    Finding {
        limit,
        documented,
        measured,
        verdict: if local { LOCAL.into() } else { verdict },
    }
}

/// The first failed child's message, if any child of either run failed.
fn child_failure(pair: &Pair) -> Option<String> {
    [&pair.alone, &pair.together].into_iter().find_map(|p| {
        p.results.iter().find(|c| !c.ok).map(|c| {
            format!(
                "{} of {} children failed, e.g. \"{}\"",
                p.failed,
                p.children,
                c.error.as_deref().unwrap_or("no error message")
            )
        })
    })
}

/// How many children ran at once, from one child's time alone (`alone_ms`) and
/// the makespan of `n` started together: n × alone / makespan.
pub fn at_once(n: u64, alone_ms: f64, makespan_ms: f64) -> f64 {
    n as f64 * alone_ms / makespan_ms.max(1.0)
}

const CONNECTIONS_LIMIT: &str = "connections shared by SELF children";
const CONNECTIONS_DOC: &str =
    "6 simultaneous open connections per request; service-bound Workers share the caller's";

/// Whether children fetching a slow URL at once were held to about 6 at a time.
pub fn connections(pair: &Pair, local: bool) -> Finding {
    let n = pair.together.children;
    let alone = pair.alone.elapsed_ms;
    let makespan = pair.together.elapsed_ms;
    let k = at_once(n, alone, makespan);
    let measured = format!(
        "1 child: {alone:.0} ms; {n} at once: {makespan:.0} ms (≈{k:.1} at once; a cap of 6 predicts {:.0} ms)",
        (n as f64 / DOCUMENTED_CONNECTIONS).ceil() * alone
    );
    let verdict = if let Some(failure) = child_failure(pair) {
        format!("inconclusive: {failure}")
    } else if alone < MIN_TASK_MS {
        format!("inconclusive: the slow URL took {alone:.0} ms, under {MIN_TASK_MS:.0} ms")
    } else if n as f64 <= DOCUMENTED_CONNECTIONS {
        format!("inconclusive: {n} children cannot show a cap of 6")
    } else if k <= DOCUMENTED_CONNECTIONS + 1.5 {
        format!("confirmed: children share the connection cap (≈{k:.0} at once)")
    } else if k >= 0.75 * n as f64 {
        format!("not seen: children do not share a cap (all {n} fetched at once)")
    } else {
        format!("differs: about {k:.0} fetches at once across children, not 6")
    };
    Finding {
        limit: CONNECTIONS_LIMIT.into(),
        documented: CONNECTIONS_DOC.into(),
        measured,
        verdict: if local { LOCAL.into() } else { verdict },
    }
}

/// Whether children burning CPU ran in parallel (their own CPU) or one at a time.
pub fn cpu(pair: &Pair, local: bool) -> Finding {
    let n = pair.together.children;
    let alone = pair.alone.elapsed_ms;
    let makespan = pair.together.elapsed_ms;
    let k = at_once(n, alone, makespan);
    let measured =
        format!("1 child: {alone:.0} ms; {n} at once: {makespan:.0} ms (≈{k:.1} at once)");
    let verdict = if let Some(failure) = child_failure(pair) {
        format!("inconclusive: {failure}")
    } else if alone < MIN_TASK_MS {
        format!(
            "inconclusive: one burn took {alone:.0} ms, under {MIN_TASK_MS:.0} ms: raise --burn-iterations"
        )
    } else if n < 2 {
        "inconclusive: one child cannot show sharing".into()
    } else if k <= 1.5 {
        format!("shared: children's CPU is not their own ({n} ran one at a time)")
    } else if k >= 0.75 * n as f64 {
        format!("own: children's CPU is their own (all {n} ran in parallel)")
    } else {
        format!("partly: about {k:.1} children ran at once")
    };
    let finding = Finding {
        limit: "CPU of a SELF child".into(),
        documented: "not documented (older pages: children share the caller's thread)".into(),
        measured,
        verdict,
    };
    // Locally children are threads of one workerd: the figure says nothing of the platform.
    if local {
        Finding {
            verdict: LOCAL.into(),
            ..finding
        }
    } else {
        finding
    }
}

/// The findings as a markdown table, ready to paste.
pub fn markdown(findings: &[Finding]) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from("| limit | documented | measured | verdict |\n|---|---|---|---|\n");
    for f in findings {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            cell(&f.limit),
            cell(&f.documented),
            cell(&f.measured),
            cell(&f.verdict)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(name: &str) -> Recorded {
        let path = format!("{}/fixtures/probe/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn row<'f>(findings: &'f [Finding], limit: &str) -> &'f Finding {
        findings
            .iter()
            .find(|f| f.limit.starts_with(limit))
            .unwrap_or_else(|| panic!("no row {limit}"))
    }

    #[test]
    fn a_refusal_at_call_32_confirms_the_cap_with_its_exact_message() {
        let f = findings(&recorded("capped"));
        let seq = row(&f, "SELF calls per request, sequential");
        assert_eq!(
            seq.measured,
            "refused at call #32 of 50 (31 made before it, 31 of 50 ok): \"Error: Too many subrequests by single Worker invocation.\""
        );
        assert!(
            seq.verdict.starts_with("confirmed: the cap is 32"),
            "{}",
            seq.verdict
        );
        let conc = row(&f, "SELF calls per request, concurrent (25 in flight)");
        assert!(
            conc.measured.starts_with("refused at call #33 of 50"),
            "{}",
            conc.measured
        );
        assert!(conc.verdict.starts_with("confirmed"), "{}", conc.verdict);
    }

    #[test]
    fn no_refusal_within_the_max_is_not_seen() {
        let f = findings(&recorded("uncapped"));
        let seq = row(&f, "SELF calls per request, sequential");
        assert_eq!(seq.measured, "no refusal in 1000 calls");
        assert_eq!(seq.verdict, "not seen: 1000 calls made without a refusal");
    }

    #[test]
    fn http_500_answers_are_errors_not_refusals() {
        let f = findings(&recorded("server_errors"));
        let seq = row(&f, "SELF calls per request, sequential");
        assert_eq!(
            seq.measured,
            "no refusal in 100 calls; answered error statuses, not refusals: 3× HTTP 500"
        );
        assert!(seq.verdict.starts_with("not seen"), "{}", seq.verdict);
    }

    #[test]
    fn a_refusal_elsewhere_than_32_differs() {
        let f = findings(&recorded("server_errors"));
        let conc = row(&f, "SELF calls per request, concurrent");
        assert_eq!(conc.verdict, "differs: refused after 1000 calls, not 32");
        assert!(
            conc.measured
                .contains("\"Error: Network connection lost.\""),
            "{}",
            conc.measured
        );
    }

    #[test]
    fn children_held_to_six_at_once_share_the_connection_cap() {
        let f = findings(&recorded("capped"));
        let c = row(&f, "connections");
        assert_eq!(
            c.measured,
            "1 child: 1010 ms; 18 at once: 3050 ms (≈6.0 at once; a cap of 6 predicts 3030 ms)"
        );
        assert_eq!(
            c.verdict,
            "confirmed: children share the connection cap (≈6 at once)"
        );
    }

    #[test]
    fn children_all_fetching_at_once_do_not_share() {
        let f = findings(&recorded("uncapped"));
        assert_eq!(
            row(&f, "connections").verdict,
            "not seen: children do not share a cap (all 18 fetched at once)"
        );
    }

    #[test]
    fn children_run_one_at_a_time_share_cpu() {
        let f = findings(&recorded("capped"));
        let c = row(&f, "CPU");
        assert_eq!(
            c.measured,
            "1 child: 400 ms; 8 at once: 3210 ms (≈1.0 at once)"
        );
        assert_eq!(
            c.verdict,
            "shared: children's CPU is not their own (8 ran one at a time)"
        );
    }

    #[test]
    fn children_in_parallel_have_their_own_cpu() {
        let f = findings(&recorded("uncapped"));
        assert_eq!(
            row(&f, "CPU").verdict,
            "own: children's CPU is their own (all 8 ran in parallel)"
        );
    }

    #[test]
    fn failed_children_or_too_short_tasks_are_inconclusive() {
        let f = findings(&recorded("server_errors"));
        let cpu = row(&f, "CPU");
        assert_eq!(
            cpu.verdict,
            "inconclusive: 2 of 8 children failed, e.g. \"Worker exceeded CPU time limit.\""
        );
        let c = row(&f, "connections");
        assert_eq!(
            c.verdict,
            "inconclusive: the slow URL took 40 ms, under 200 ms"
        );
    }

    #[test]
    fn without_a_slow_url_connections_are_not_run() {
        let mut r = recorded("capped");
        r.connections = None;
        assert_eq!(
            row(&findings(&r), "connections").measured,
            "not run: pass --slow-url"
        );
    }

    #[test]
    fn locally_every_verdict_says_nothing_is_enforced() {
        let f = findings(&recorded("local"));
        assert_eq!(f.len(), 4);
        for finding in &f {
            assert_eq!(finding.verdict, LOCAL, "{}", finding.limit);
        }
    }

    #[test]
    fn the_markdown_table_has_a_row_per_finding_and_escapes_pipes() {
        let mut f = findings(&recorded("capped"));
        f[0].measured = "a | b".into();
        let md = markdown(&f);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines[0], "| limit | documented | measured | verdict |");
        assert_eq!(lines.len(), 2 + f.len());
        assert!(lines[2].contains("a \\| b"), "{}", lines[2]);
    }
}
