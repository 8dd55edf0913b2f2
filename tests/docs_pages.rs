//! The docs as a reader meets them: the README stays short, every page for a
//! reader says at the top who it is for, and every relative link in the
//! repository's Markdown names a file (and heading) that exists, so moving a
//! section cannot strand the links to it.

use std::collections::BTreeSet;
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

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped,
/// spaces as `-`.
fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            l.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

/// The targets of the page's `](target)` links.
fn links(text: &str) -> Vec<String> {
    let text = prose(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
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
    let mut broken = Vec::new();
    for page in pages() {
        let text = read(&page);
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
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
