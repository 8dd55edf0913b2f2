//! `loadtest/src`'s modules import each other without a circle: a helper two
//! parts share lives in a shared module (`drive`, `steps`, `suite`, `browser`),
//! not in one of the parts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module of `loadtest/src` and the sibling modules it names (`crate::x`,
/// or `x` inside `use crate::{x, ...}`).
fn imports(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let sources: BTreeMap<String, String> = std::fs::read_dir(dir)
        .expect("loadtest/src is readable")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("a source file"))
        })
        .collect();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    sources
        .iter()
        .map(|(name, text)| {
            let mut named = BTreeSet::new();
            for (at, _) in text.match_indices("crate::") {
                let rest = &text[at + "crate::".len()..];
                if let Some(group) = rest.strip_prefix('{') {
                    let group = &group[..group.find('}').unwrap_or(group.len())];
                    for part in group.split(',') {
                        named.insert(part.trim().split("::").next().unwrap().to_string());
                    }
                } else {
                    named.insert(rest.chars().take_while(|&c| is_ident(c)).collect());
                }
            }
            let siblings = named
                .into_iter()
                .filter(|m| m != name && sources.contains_key(m))
                .collect();
            (name.clone(), siblings)
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
    assert!(graph.len() > 30, "read {} modules", graph.len());
    // The reader sees the edges: the driver imports its parts.
    assert!(graph["e2e"].contains("control") && graph["e2e"].contains("ui"));
    assert_eq!(circle(&graph), None);
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
