//! docs/monitoring.md's "Metrics" table and the prose of every page of the
//! docs against `idemgate::metrics::CATALOG`: every metric listed with its
//! type and labels, nothing unknown named anywhere.

use std::collections::BTreeMap;

use idemgate::metrics::CATALOG;

use super::{exported, metric_names, read, repo, PREFIXES};

/// The page that holds the metric table.
const MONITORING: &str = "docs/monitoring.md";

/// A metric's type and label names, as the catalog or the docs have them.
type Declared = (String, Vec<String>);

/// docs/monitoring.md's "Metrics" table, `| metric | type | labels | meaning |`:
/// each metric a row names (one or several, in backticks) with the row's
/// type and labels (label names only, in backticks; prose goes to
/// `meaning`).
fn documented_metrics() -> BTreeMap<String, Declared> {
    let page = read(&repo().join(MONITORING));
    let (_, section) = page
        .split_once("\n## Metrics\n")
        .expect("docs/monitoring.md has a `## Metrics` section");
    let mut rows = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    assert_eq!(
        rows.next().map(str::trim),
        Some("| metric | type | labels | meaning |"),
        "the metric table's header"
    );
    rows.next();
    let code = |cell: &str| -> Vec<String> {
        cell.split(',')
            .map(str::trim)
            .filter(|word| !word.is_empty())
            .map(|word| {
                word.strip_prefix('`')
                    .and_then(|w| w.strip_suffix('`'))
                    .filter(|w| !w.contains('`') && !w.contains(' '))
                    .unwrap_or_else(|| {
                        panic!("{MONITORING}'s metric table: `{cell}` is not a list of names in backticks")
                    })
                    .to_string()
            })
            .collect()
    };
    let mut metrics = BTreeMap::new();
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 6, "four cells in {row}");
        let (kind, labels) = (cells[2].to_string(), code(cells[3]));
        for name in code(cells[1]) {
            let previous = metrics.insert(name.clone(), (kind.clone(), labels.clone()));
            assert!(previous.is_none(), "{MONITORING} lists {name} twice");
        }
    }
    metrics
}

#[test]
fn the_documented_metric_table_lists_every_metric_of_the_catalog_with_its_type_and_labels() {
    let declared: BTreeMap<String, Declared> = CATALOG
        .iter()
        .map(|m| {
            let labels = m.label_names().map(String::from).collect();
            (m.name.to_string(), (m.kind.as_str().to_string(), labels))
        })
        .collect();
    let documented = documented_metrics();
    let mut problems = Vec::new();
    for (name, want) in &declared {
        match documented.get(name) {
            None => problems.push(format!("{name} {want:?} is missing")),
            Some(got) if got != want => problems.push(format!(
                "{name}: the docs have {got:?}, the catalog {want:?}"
            )),
            Some(_) => {}
        }
    }
    for name in documented.keys().filter(|n| !declared.contains_key(*n)) {
        problems.push(format!("{name} is no metric of the catalog"));
    }
    assert!(
        problems.is_empty(),
        "{MONITORING}'s metric table against idemgate::metrics::CATALOG:\n{}",
        problems.join("\n")
    );
}

/// Prose may name a metric anywhere (a histogram by its own name too):
/// each name README.md or a page of docs/ writes must be one idemgate
/// exports.
#[test]
fn every_metric_the_docs_name_is_exported() {
    let mut problems = Vec::new();
    let mut files = vec![repo().join("README.md")];
    let mut pages: Vec<_> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    assert!(
        pages.iter().any(|p| p.ends_with(MONITORING))
            && pages.iter().any(|p| p.ends_with("design.md")),
        "docs/ holds monitoring.md and design.md: {pages:?}"
    );
    files.extend(pages);
    for path in files {
        let file = path
            .strip_prefix(repo())
            .unwrap_or(&path)
            .display()
            .to_string();
        for name in metric_names(&read(&path)) {
            let bare_prefix = PREFIXES.contains(&name.as_str());
            if !bare_prefix && exported(&name).is_err() && !CATALOG.iter().any(|m| m.name == name) {
                problems.push(format!("{file}: {name} is not a metric idemgate exports"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
