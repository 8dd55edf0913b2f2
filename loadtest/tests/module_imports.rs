//! `loadtest/src`'s modules, in their folders, import each other without a
//! circle: a helper two parts share lives in a shared module (`driver::drive`,
//! `driver::steps`, `e2e::suite`, `e2e::ui::browser`), not in one of the parts;
//! a folder uses only the shared folders before it, and no file is over 800 lines.
//! The library's `src` keeps the same rules by its own rooms (the tests at the end).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every `.rs` file under `dir` by its module path (`e2e::control`; a folder's
/// `mod.rs` is the folder's module, `e2e`), with its text.
fn sources(dir: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("loadtest/src is readable") {
            let path = entry.expect("a directory entry").path();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let name = |leaf: &str| [prefix, leaf].join(if prefix.is_empty() { "" } else { "::" });
            if path.is_dir() {
                walk(&path, &name(&stem), out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let module = if stem == "mod" {
                    prefix.to_string()
                } else {
                    name(&stem)
                };
                out.insert(
                    module,
                    std::fs::read_to_string(&path).expect("a source file"),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, "", &mut out);
    out
}

/// Each module of `loadtest/src` and the other modules it names (`crate::a::b`,
/// or `a::b` inside `use crate::{a::b, ...}`), each path taken as the longest
/// module it starts with.
fn imports(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    imports_of(sources(dir), false)
}

/// The same over `sources`; with `relative`, `super::a` paths too (taken from
/// the module's parent), and no comment or test module counted: what a module
/// *uses*, not what its docs or tests name.
fn imports_of(
    sources: BTreeMap<String, String>,
    relative: bool,
) -> BTreeMap<String, BTreeSet<String>> {
    let is_path = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let module_of = |path: &str| {
        let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        (1..=segments.len())
            .rev()
            .map(|n| segments[..n].join("::"))
            .find(|m| sources.contains_key(m))
    };
    sources
        .iter()
        .map(|(name, text)| {
            let text = &if relative {
                code_of(text)
            } else {
                text.clone()
            };
            let mut named = BTreeSet::new();
            let parent = name.rsplit_once("::").map_or("", |(p, _)| p);
            let mut prefixes = vec![("crate::", String::new())];
            if relative {
                prefixes.push(("super::", format!("{parent}::")));
            }
            for (prefix, base) in &prefixes {
                for (at, _) in text.match_indices(prefix) {
                    if *prefix == "super::" && text[..at].ends_with(|c: char| is_path(c)) {
                        continue;
                    }
                    let rest = &text[at + prefix.len()..];
                    if let Some(group) = rest.strip_prefix('{') {
                        let group = &group[..group.find('}').unwrap_or(group.len())];
                        for part in group.split(',') {
                            let path: String =
                                part.trim().chars().take_while(|&c| is_path(c)).collect();
                            named.insert(format!("{base}{path}"));
                        }
                    } else {
                        let path: String = rest.chars().take_while(|&c| is_path(c)).collect();
                        named.insert(format!("{base}{path}"));
                    }
                }
            }
            // A folder's module names its own children without `crate::` (`control::e2e`).
            for child in sources
                .keys()
                .filter_map(|m| m.strip_prefix(&format!("{name}::")))
            {
                let bare = format!("{child}::");
                let named_bare = text
                    .match_indices(&bare)
                    .any(|(at, _)| !text[..at].ends_with(|c: char| is_path(c)));
                if !child.contains("::") && named_bare {
                    named.insert(format!("{name}::{child}"));
                }
            }
            let modules = named
                .iter()
                .filter_map(|p: &String| module_of(p))
                .filter(|m| m != name)
                // A module may use what its folders declare: a room's `mod.rs` is
                // its own floor (only with `relative`, where `super::` is read).
                .filter(|m| !(relative && name.starts_with(&format!("{m}::"))))
                .filter(|m| !(relative && m == "lib"))
                .collect();
            (name.clone(), modules)
        })
        .collect()
}

/// A circle of imports, if there is one (depth-first search).
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut found = path[at..].to_vec();
            found.push(m.to_string());
            return Some(found);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for next in &graph[m] {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_harness_modules_import_each_other_without_a_circle() {
    let graph = imports(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.len() > 40, "read {} modules", graph.len());
    // The reader sees the edges, folders included: the driver imports its parts.
    assert!(graph["e2e"].contains("e2e::control") && graph["e2e"].contains("e2e::ui"));
    assert!(graph["e2e::ui"].contains("e2e::ui::browser"));
    assert_eq!(circle(&graph), None);
}

/// The shared folders, each using only the ones before it; and the parts (the
/// commands), which use the shared folders and never each other.
const SHARED: [&str; 4] = ["sink", "runtime", "driver", "run"];
const PARTS: [&str; 4] = ["e2e", "bench", "probe", "api_listing"];

/// The imports that cross folders against the rule above, as `from -> to`; a
/// folder named in neither list is one too.
fn crossings(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let folder = |m: &str| m.split("::").next().unwrap().to_string();
    let rank = |f: &str| SHARED.iter().position(|s| *s == f);
    let mut wrong = Vec::new();
    for (from, tos) in graph {
        let f = folder(from);
        if ["lib", "main"].contains(&from.as_str()) {
            continue;
        }
        if rank(&f).is_none() && !PARTS.contains(&f.as_str()) {
            wrong.push(format!("{from}: folder {f} is neither shared nor a part"));
        }
        for to in tos {
            let t = folder(to);
            let allowed = t == f
                || match (rank(&f), rank(&t)) {
                    (Some(a), Some(b)) => b < a,
                    (None, Some(_)) => true,
                    _ => false,
                };
            if !allowed {
                wrong.push(format!("{from} -> {to}"));
            }
        }
    }
    wrong
}

#[test]
fn a_folder_uses_only_the_shared_folders_before_it_and_parts_never_each_other() {
    let graph = imports(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert_eq!(crossings(&graph), Vec::<String>::new());
}

#[test]
fn a_part_importing_another_part_or_a_later_shared_folder_is_found() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        (
            "e2e::control",
            vec!["run::control", "bench::limits", "e2e::suite"],
        ),
        ("driver::steps", vec!["runtime::api", "run::scenario"]),
        ("extra::x", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.into(), to.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        crossings(&graph),
        vec![
            "driver::steps -> run::scenario",
            "e2e::control -> bench::limits",
            "extra::x: folder extra is neither shared nor a part",
        ]
    );
}

/// The longest file `loadtest/src` may hold: a longer one holds more than one
/// thing, to be split by what its pieces own.
const MAX_LINES: usize = 800;

#[test]
fn no_file_under_src_is_over_800_lines() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let long: Vec<String> = sources(&dir)
        .into_iter()
        .filter(|(_, text)| text.lines().count() > MAX_LINES)
        .map(|(module, text)| format!("{module}: {} lines", text.lines().count()))
        .collect();
    assert!(sources(&dir).len() > 40);
    assert_eq!(long, Vec::<String>::new());
}

#[test]
fn a_circle_is_found_when_there_is_one() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.into(), to.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        circle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

/// A source without its comments and its test modules (`#[cfg(test)] mod tests
/// { … }` inline, to the end of the file): what it compiles into the library.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn library() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    let mut sources = sources(&src);
    // Test-only modules (`#[cfg(test)] mod tests;` files) are not the library.
    sources.retain(|m, _| !m.split("::").any(|s| s == "tests"));
    imports_of(sources, true)
}

#[test]
fn the_library_modules_import_each_other_without_a_circle() {
    let graph = library();
    assert!(graph.len() > 100, "read {} modules", graph.len());
    // The reader sees relative paths: the drain's machine uses its budget.
    assert!(graph["core::drain"].contains("core::drain::budget"));
    assert!(graph["core::batch::progress"].contains("core::flow::waiting"));
    assert_eq!(circle(&graph), None);
}

/// What `core` may never import: it is pure logic, below the store, the SQL,
/// the HTTP API, the job kinds and the Workers runtime.
const ABOVE_CORE: [&str; 7] = [
    "store",
    "sql",
    "api",
    "jobs",
    "edge",
    "drain_loop",
    "testing",
];

#[test]
fn core_imports_nothing_above_it() {
    let wrong: Vec<String> = library()
        .into_iter()
        .filter(|(from, _)| from == "core" || from.starts_with("core::"))
        .flat_map(|(from, tos)| {
            tos.into_iter()
                .filter(|to| ABOVE_CORE.contains(&to.split("::").next().unwrap()))
                .map(move |to| format!("{from} -> {to}"))
        })
        .collect();
    assert_eq!(wrong, Vec::<String>::new());
}

#[test]
fn each_room_of_core_says_what_it_owns_and_may_not_import() {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src/core");
    let mut rooms = 0;
    for entry in std::fs::read_dir(&core).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let text = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
        let opening: Vec<&str> = text.lines().take_while(|l| l.starts_with("//!")).collect();
        assert!(opening.len() >= 2, "{}: no opening lines", dir.display());
        assert!(
            opening.iter().any(|l| l.contains("import")),
            "{}: its opening does not say what it may import",
            dir.display()
        );
        rooms += 1;
    }
    assert!(rooms >= 5, "{rooms} rooms");
}

#[test]
fn no_library_file_is_over_800_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    let long: Vec<String> = sources(&src)
        .into_iter()
        .filter(|(_, text)| text.lines().count() > MAX_LINES)
        .map(|(module, text)| format!("{module}: {} lines", text.lines().count()))
        .collect();
    assert_eq!(long, Vec::<String>::new());
}

#[test]
fn a_circle_through_super_is_found_and_a_use_of_the_own_folder_is_not_one() {
    let sources: BTreeMap<String, String> = [
        ("a", "pub mod x;\npub mod y;"),
        ("a::x", "use super::y::Thing;\nuse super::Floor;"),
        ("a::y", "use crate::a::x::Other; // super::nothing"),
        ("b", "use super::a::x; // a comment naming crate::c"),
        ("c", ""),
    ]
    .into_iter()
    .map(|(m, t)| (m.to_string(), t.to_string()))
    .collect();
    let graph = imports_of(sources, true);
    assert_eq!(graph["a::x"], ["a::y".to_string()].into());
    assert_eq!(graph["b"], ["a::x".to_string()].into());
    assert_eq!(
        circle(&graph),
        Some(vec!["a::x".into(), "a::y".into(), "a::x".into()])
    );
}
