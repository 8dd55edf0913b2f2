//! The reference pages name everything the Worker reads, answers and logs, as the
//! source has it (not a hand list that could drift):
//!
//! - every setting and secret the settings parsers ask for (`Settings::from_lookup`,
//!   `Secrets::from_lookup`, run with a lookup that records the names) and every
//!   binding the edge takes from its `Env` by name (`env.d1("DB")`, `env.service(…)`,
//!   `env.queue(DRAIN_QUEUE)`…, read from `src/`) has a row in
//!   docs/reference/settings.md, and the page has no row for anything else;
//! - every route of `api::routes::ROUTES` has a docs/api.md heading naming it
//!   (### `GET /subjects?after=…`; a bare `/resume` after `POST /batches/{id}/pause` is
//!   its sibling), and no heading names a route the table lacks;
//! - every log event the code writes has a row in docs/reference/log-events.md, and
//!   only those. The code's names are read from the source: the first argument of
//!   every `log::event(` / `log::error(` call (`edge::log`), `logger.event(` /
//!   `logger.error(` call (an invocation's `edge::log::InvocationLog`) and
//!   `(app.event)(` call (the API's logger). A call whose name is not a string
//!   literal (chosen by a `match`, or formatted) must be one of [`INDIRECT`], which
//!   says the names it can produce; an unknown one fails the test, so a new event
//!   cannot go unlisted.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The calls that pass their event name through a variable or `format!`: the file,
/// the argument's text, and the names it can take. Each name is checked to be spelled
/// in that file (whole, or as the rest after the `format!` string's literal prefix).
const INDIRECT: &[(&str, &str, &[&str])] = &[
    (
        "src/edge/drain.rs",
        "name",
        &[
            "item_retry",
            "item_failed",
            "callback_delivered",
            "callback_retry",
            "callback_failed",
        ],
    ),
    (
        "src/api/batches.rs",
        "event",
        &["batch_created", "batch_exists"],
    ),
    (
        "src/api/control.rs",
        "&format!(\"batch_{}\", past_tense(control))",
        &["batch_paused", "batch_resumed", "batch_cancelled"],
    ),
];

const CALLS: &[&str] = &[
    "log::event(",
    "log::error(",
    "logger.event(",
    "logger.error(",
    "(app.event)(",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The first argument of the call whose `(` ends just before `rest`: up to the first
/// `,` outside parentheses and string literals, trimmed.
fn first_argument(rest: &str) -> &str {
    let (mut depth, mut in_string) = (0usize, false);
    for (i, c) in rest.char_indices() {
        match c {
            '"' => in_string = !in_string,
            _ if in_string => {}
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth > 0 => depth -= 1,
            ',' | ')' if depth == 0 => return rest[..i].trim(),
            _ => {}
        }
    }
    panic!("unterminated call: {rest:.80}")
}

/// Every call in `src/`: (file relative to the repository, its first argument).
fn calls() -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let rel = file
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for call in CALLS {
            for (at, _) in text.match_indices(call) {
                let arg = first_argument(&text[at + call.len()..]);
                found.push((rel.clone(), arg.to_string()));
            }
        }
    }
    found
}

/// The names the code can log, checking the indirect calls against [`INDIRECT`].
fn logged_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut indirect_seen = BTreeSet::new();
    for (file, arg) in calls() {
        if let Some(name) = arg.strip_prefix('"').and_then(|a| a.strip_suffix('"')) {
            names.insert(name.to_string());
            continue;
        }
        let Some(i) = INDIRECT
            .iter()
            .position(|(f, a, _)| *f == file && *a == arg)
        else {
            panic!(
                "{file}: an event name passed as `{arg}`, not a string literal: add the \
                 call to INDIRECT in this test with the names it can produce"
            );
        };
        indirect_seen.insert(i);
    }
    for (i, (file, arg, listed)) in INDIRECT.iter().enumerate() {
        assert!(
            indirect_seen.contains(&i),
            "INDIRECT names a call that is gone: {file} `{arg}`"
        );
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        let prefix = arg
            .split_once("format!(\"")
            .map_or("", |(_, f)| f.split("{}").next().unwrap());
        for name in *listed {
            let rest = name.strip_prefix(prefix).unwrap_or(name);
            assert!(
                text.contains(&format!("\"{rest}\"")),
                "INDIRECT lists {name:?} for {file}, which does not spell it"
            );
            names.insert(name.to_string());
        }
    }
    names
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The first cells of a page's table rows that are one backquoted name
/// (| `NAME` | …): what the page documents.
fn table_names(rel: &str) -> BTreeSet<String> {
    read(rel)
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |"))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// `a` less `b`, for messages.
fn missing(a: &BTreeSet<String>, b: &BTreeSet<String>) -> Vec<String> {
    a.difference(b).cloned().collect()
}

// ---------------------------------------------------------------- log events

#[test]
fn log_events_page_lists_every_log_event_the_code_writes_and_no_other() {
    let logged = logged_names();
    let documented = table_names("docs/reference/log-events.md");
    // The parsers found the lists at all (both sets are in the forties).
    assert!(logged.len() >= 40, "found only {logged:?} in src/");
    let undocumented = missing(&logged, &documented);
    let not_logged = missing(&documented, &logged);
    assert!(
        undocumented.is_empty(),
        "logged but without a row in docs/reference/log-events.md: {undocumented:?}"
    );
    assert!(
        not_logged.is_empty(),
        "a row in docs/reference/log-events.md for an event the code never logs: {not_logged:?}"
    );
}

// ---------------------------------------------------------------- settings

/// The names the settings and secrets parsers ask the Worker's env for. Secrets are
/// answered with valid, distinct values so the parser reads on to the last one.
fn parsed_names() -> BTreeSet<String> {
    let asked = RefCell::new(BTreeSet::new());
    cron_fanout::core::settings::Settings::from_lookup(|name| {
        asked.borrow_mut().insert(name.to_string());
        None
    })
    .expect("the default settings parse");
    cron_fanout::core::secrets::Secrets::from_lookup(|name| {
        asked.borrow_mut().insert(name.to_string());
        Some(format!("{name}-a-valid-secret-value"))
    })
    .expect("the recorded secrets parse");
    asked.into_inner()
}

/// The bindings `src/` takes from an `Env` by a fixed name: `env.<kind>(ARG)` (also
/// split over lines) whose argument is a string literal or an upper-case constant
/// (resolved from its `const NAME: &str = "…"`). Names passed in variables are the
/// parsers' (above) or the user's own (`SERVICE_BINDINGS`, a kind's `ctx.var`).
fn binding_names() -> BTreeSet<String> {
    const KINDS: &[&str] = &[
        "d1",
        "service",
        "queue",
        "var",
        "secret",
        "kv",
        "durable_object",
        "bucket",
    ];
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|f| {
            let t = std::fs::read_to_string(&f).unwrap();
            (f, t)
        })
        .collect();
    let constant = |ident: &str| -> String {
        let decl = format!("const {ident}: &str = \"");
        texts
            .iter()
            .find_map(|(_, t)| {
                let at = t.find(&decl)? + decl.len();
                Some(t[at..at + t[at..].find('"')?].to_string())
            })
            .unwrap_or_else(|| {
                panic!("a binding named by {ident}, whose `const {ident}: &str` is not in src/")
            })
    };
    let mut names = BTreeSet::new();
    for (file, text) in &texts {
        for (at, _) in text.match_indices("env") {
            let before_ok = at == 0
                || !text[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            let rest = text[at + 3..].trim_start();
            let Some(rest) = rest.strip_prefix('.').filter(|_| before_ok) else {
                continue;
            };
            let Some((kind, args)) = rest.split_once('(') else {
                continue;
            };
            if !KINDS.contains(&kind) {
                continue;
            }
            let arg = first_argument(args);
            if let Some(lit) = arg.strip_prefix('"').and_then(|a| a.strip_suffix('"')) {
                names.insert(lit.to_string());
            } else if !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
            {
                names.insert(constant(arg));
            } else {
                assert!(
                    arg.chars().next().is_some_and(|c| c.is_ascii_lowercase()),
                    "{}: env.{kind}({arg}): name the binding with a literal or a constant",
                    file.display()
                );
            }
        }
    }
    names
}

#[test]
fn settings_page_has_a_row_for_every_setting_secret_and_binding_the_worker_reads() {
    let parsed = parsed_names();
    let bindings = binding_names();
    // The readers found them at all: 19 settings and 5 secrets; DB, SELF, DRAIN_QUEUE.
    assert!(parsed.len() >= 24, "the parsers asked only for {parsed:?}");
    for b in ["DB", "SELF", "DRAIN_QUEUE"] {
        assert!(
            bindings.contains(b),
            "no binding {b} found in src/: {bindings:?}"
        );
    }
    let read: BTreeSet<String> = parsed.union(&bindings).cloned().collect();
    let documented = table_names("docs/reference/settings.md");
    let undocumented = missing(&read, &documented);
    let not_read = missing(&documented, &read);
    assert!(
        undocumented.is_empty(),
        "the Worker reads these, but docs/reference/settings.md has no table row for them (first cell `NAME`): {undocumented:?}"
    );
    assert!(
        not_read.is_empty(),
        "docs/reference/settings.md has a row for names the Worker never reads: {not_read:?}"
    );
}

// ---------------------------------------------------------------- routes

const METHODS: [&str; 4] = ["GET", "POST", "PUT", "DELETE"];

/// The routes a page's headings name: each backquoted `METHOD /path` (the
/// query left off), and each bare `/segment` after one, the sibling of the path
/// before it with the same method (`POST /batches/{id}/pause`, `/resume`).
fn routes_in_headings(page: &str) -> BTreeSet<String> {
    let mut routes = BTreeSet::new();
    for line in page.lines().filter(|l| l.starts_with('#')) {
        let mut last: Option<(String, String)> = None;
        for span in line.split('`').skip(1).step_by(2) {
            let span = span.split('?').next().unwrap().trim();
            if let Some((method, path)) = span.split_once(' ') {
                if METHODS.contains(&method) && path.starts_with('/') {
                    last = Some((method.to_string(), path.to_string()));
                }
            } else if let (Some((method, prev)), Some(seg)) = (&last, span.strip_prefix('/')) {
                if !seg.is_empty() && !seg.contains('/') {
                    let parent = &prev[..prev.rfind('/').unwrap()];
                    last = Some((method.clone(), format!("{parent}/{seg}")));
                } else {
                    continue;
                }
            } else {
                continue;
            }
            let (method, path) = last.as_ref().unwrap();
            routes.insert(format!("{method} {path}"));
        }
    }
    routes
}

#[test]
fn api_page_has_a_heading_for_every_route_and_no_other() {
    let table: BTreeSet<String> = cron_fanout::api::routes::ROUTES
        .iter()
        .map(|r| format!("{} {}", r.method.as_str(), r.path))
        .collect();
    let documented = routes_in_headings(&read("docs/api.md"));
    let undocumented = missing(&table, &documented);
    let not_routed = missing(&documented, &table);
    assert!(
        undocumented.is_empty(),
        "routes of src/api/routes.rs without a docs/api.md heading naming them (### `METHOD /path`): {undocumented:?}"
    );
    assert!(
        not_routed.is_empty(),
        "docs/api.md headings name routes src/api/routes.rs does not have: {not_routed:?}"
    );
}

#[test]
fn a_bare_segment_in_a_heading_is_the_sibling_of_the_route_before_it() {
    let page = "# API\n### `POST /batches/{id}/pause`, `/resume`\n\
                `GET /not-a-heading`\n## The page: `GET /` and `GET /a?b=<c>`, `x`\n";
    let want = [
        "GET /",
        "GET /a",
        "POST /batches/{id}/pause",
        "POST /batches/{id}/resume",
    ];
    assert_eq!(
        routes_in_headings(page),
        want.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>()
    );
}

#[test]
fn first_argument_stops_at_the_top_level_comma() {
    assert_eq!(first_argument("\"a_b\", json!({})"), "\"a_b\"");
    assert_eq!(first_argument("\n    name,\n line)"), "name");
    assert_eq!(
        first_argument("&format!(\"x_{}\", f(a, b)), json!({ \"k\": 1 }))"),
        "&format!(\"x_{}\", f(a, b))"
    );
}
