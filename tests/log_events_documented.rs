//! docs/operations.md lists every structured log event the code writes, and only
//! those. The code's names are read from the source: the first argument of every
//! `log::event(` / `log::error(` call (`edge::log`), `logger.event(` / `logger.error(`
//! call (an invocation's `edge::log::InvocationLog`) and `(app.event)(` call (the
//! API's logger). A call whose name is not a string literal (chosen by a `match`, or
//! formatted) must be one of [`INDIRECT`], which says the names it can produce; an
//! unknown one fails the test, so a new event cannot go unlisted.

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

/// The backquoted names in operations.md's "`wrangler tail` shows the JSON log lines
/// (...)" list.
fn documented_names() -> BTreeSet<String> {
    let docs = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let docs = docs.replace('\n', " ");
    let start = docs
        .find("shows the JSON log lines (")
        .expect("docs/operations.md: the list of log lines");
    let list = &docs[start..];
    let list = &list[list.find('(').unwrap() + 1..list.find(')').unwrap()];
    list.split(',')
        .map(|n| n.trim().trim_matches('`').to_string())
        .collect()
}

#[test]
fn operations_doc_lists_every_log_event_the_code_writes_and_no_other() {
    let logged = logged_names();
    let documented = documented_names();
    // The parsers found the lists at all (both sets are in the twenties).
    assert!(logged.len() >= 20, "found only {logged:?} in src/");
    assert!(
        documented.len() >= 20,
        "found only {documented:?} in the doc"
    );
    let undocumented: Vec<_> = logged.difference(&documented).collect();
    let not_logged: Vec<_> = documented.difference(&logged).collect();
    assert!(
        undocumented.is_empty(),
        "logged but not listed in docs/operations.md: {undocumented:?}"
    );
    assert!(
        not_logged.is_empty(),
        "listed in docs/operations.md but never logged: {not_logged:?}"
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
