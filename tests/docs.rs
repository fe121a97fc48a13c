//! The documentation's links: every relative markdown link in README.md,
//! CHANGELOG.md, BENCHMARKS.md and docs/*.md points to a file of the
//! repository, and where it names an anchor (`operating.md#upgrading`,
//! `#logs`) the target has a heading of that name, as GitHub derives it.
//! A page moved or a heading renamed fails here, not in a reader's browser.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every page whose links are checked.
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = ["README.md", "CHANGELOG.md", "BENCHMARKS.md"]
        .iter()
        .map(|name| repo().join(name))
        .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The page's text outside fenced code blocks, and with inline code spans
/// blanked: a link written in code is an example, not a link.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            }
            out.push(if in_code { ' ' } else { c });
        }
        out.push('\n');
    }
    out
}

/// Targets of the inline links `[text](target)` of a page's prose.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut found = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            found.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    found
}

/// A heading's anchor as GitHub makes it: lower case, every character but
/// letters, digits, `-`, `_` and spaces dropped, spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (a repeated one gets `-1`, `-2`, ...).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let base = slug(line.trim_start_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while !found.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    found
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug(" 12. Known limits"), "12-known-limits");
    assert_eq!(slug(" `[store]`"), "store");
    assert_eq!(
        slug(" The store user's rights (Redis)"),
        "the-store-users-rights-redis"
    );
    let page = "# A\n## B c\n```\n# not a heading\n```\n## B c\n";
    let want: BTreeSet<String> = ["a", "b-c", "b-c-1"].map(String::from).into();
    assert_eq!(anchors(page), want);
}

#[test]
fn links_in_code_are_not_links() {
    let page = "see [a](a.md) and `[b](b.md)`\n```\n[c](c.md)\n```\n[d](d.md#e)\n";
    assert_eq!(links(page), ["a.md", "d.md#e"]);
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        let name = page
            .strip_prefix(repo())
            .unwrap_or(&page)
            .display()
            .to_string();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match link.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a page's folder").join(path)
            };
            checked += 1;
            if !target.exists() {
                problems.push(format!("{name}: {link}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                if !target.is_file() || !anchors(&read(&target)).contains(anchor) {
                    problems.push(format!("{name}: {link}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the parser right?"
    );
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}
