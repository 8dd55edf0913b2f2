//! The docs as a reader meets them: the README stays short, every page for a
//! reader says at the top who it is for, and every relative link in the
//! repository's Markdown names a file (and heading) that exists, so moving a
//! section cannot strand the links to it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Markdown files a reader follows links through: the README, docs/ (its
/// folders too), and the examples' and packages' READMEs.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut out);
    for dir in ["examples", "packages"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let readme = entry.unwrap().path().join("README.md");
            if readme.exists() {
                out.push(readme);
            }
        }
    }
    out.sort();
    out
}

/// The page's text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A heading's anchor as GitHub makes it: lower case, letters, digits, `_` and `-`
/// kept, spaces made `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (outside code blocks), a repeated one with
/// `-1`, `-2`… as GitHub numbers them.
fn anchors(text: &str) -> BTreeSet<String> {
    let (mut out, mut seen) = (BTreeSet::new(), BTreeMap::new());
    for line in prose(text).lines().filter(|l| l.starts_with('#')) {
        let s = slug(line.trim_start_matches('#'));
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the page's `](target)` links, code blocks included (a link
/// there is still followed by readers of the rendered page's source).
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find([')', ' ', '\n']).unwrap_or(rest.len());
        out.push(rest[..end].to_string());
    }
    out
}

#[test]
fn the_readme_is_at_most_90_lines() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(
        lines <= 90,
        "README.md has {lines} lines: move the detail to docs/"
    );
}

/// The internals stay readable a page at a time: docs/architecture.md is the map
/// of docs/architecture/ (one page per part), docs/benchmarks.md the current
/// figures (the history has pages of its own), each under 400 lines.
#[test]
fn the_architecture_pages_and_the_current_figures_are_under_400_lines() {
    let mut pages = vec![
        root().join("docs/architecture.md"),
        root().join("docs/benchmarks.md"),
    ];
    for entry in std::fs::read_dir(root().join("docs/architecture")).unwrap() {
        pages.push(entry.unwrap().path());
    }
    assert!(pages.len() >= 4, "found only {pages:?}");
    for page in pages {
        let lines = read(&page).lines().count();
        assert!(
            lines < 400,
            "{} has {lines} lines: split it by part, and name the new page on the map",
            page.display()
        );
    }
}

#[test]
fn every_guide_says_at_the_top_who_it_is_for() {
    let mut guides = vec![
        root().join("docs/getting-started.md"),
        root().join("docs/README.md"),
    ];
    for entry in std::fs::read_dir(root().join("docs/guides")).unwrap() {
        guides.push(entry.unwrap().path());
    }
    for page in guides {
        let text = read(&page);
        let first = text
            .split("\n\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{} has no paragraph", page.display()));
        assert!(
            first.starts_with("For "),
            "{}: its first paragraph must say who it is for (\"For …\"), not {first:?}",
            page.display()
        );
    }
}

#[test]
fn every_relative_link_names_a_file_and_heading_that_exist() {
    let pages = pages();
    assert!(pages.len() >= 8, "found only {pages:?}");
    let mut broken = Vec::new();
    for page in pages {
        let text = read(&page);
        for link in links(&text) {
            if link.is_empty() || link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&target)).contains(anchor)
            {
                broken.push(format!("{}: {link} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let page = "# A\n## `GET /limits/{key}`\n```\n# not a heading\n```\n## Round 7: a, b (2026-11-24/25)\n## A\n";
    let want = ["a", "get-limitskey", "round-7-a-b-2026-11-2425", "a-1"];
    assert_eq!(
        anchors(page),
        want.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>()
    );
}
