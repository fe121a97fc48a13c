//! docs/configuration.md against the config structs: every field a config
//! file may hold is in the reference, once, and every field the reference
//! lists is one the structs accept.
//!
//! The field list is asked of serde itself, not copied: every raw struct
//! is `deny_unknown_fields`, so deserializing a table that holds one
//! unknown key fails with serde's "unknown field `…`, expected one of `a`,
//! `b`, …", which the derive writes from the struct's own fields (renames
//! and all). Probing each field of a struct with such a table in turn
//! walks the whole tree: a field whose probe is refused the same way is a
//! struct (recurse into it), a field that accepts the probe is a map of
//! free keys (`[kafka]`: what is below it is not the structs' business), and
//! any other error is a value. A field added to `raw.rs`, or to any struct
//! it holds, is found without this test changing.
//!
//! The reference's side: every table whose header is `| field | default |
//! meaning |` lists fields in its first cell (names in backticks, several
//! separated by commas, dotted for nested ones), relative to the table
//! named in backticks by the heading above it (`` ## `[batch]` ``,
//! `` ## `[[streams]]` ``; a heading naming none is the top level).

use std::collections::{BTreeMap, BTreeSet};

use super::raw::RawConfig;

const PROBE: &str = "__reference_probe__";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Fields of its own (they are probed in turn).
    Struct,
    /// Free keys: a map such as `[kafka]`.
    Map,
    /// A value.
    Value,
}

/// A TOML document that puts `value` at `path` (`streams.ttl` is inside
/// the first element of the `streams` array).
fn document(path: &[String], value: &str) -> String {
    let mut text = value.to_string();
    for (depth, key) in path.iter().enumerate().rev() {
        text = if depth == 0 && key == "streams" {
            format!("{key} = [{text}]")
        } else if depth == 0 {
            format!("{key} = {text}")
        } else {
            format!("{{ {key} = {text} }}")
        };
    }
    if path.is_empty() {
        // The top level itself: the probe is a key of the document.
        return format!("{PROBE} = 1");
    }
    text
}

/// What serde says of a table with only the probe key at `path`.
fn probe(path: &[String]) -> (Shape, Vec<String>) {
    let text = document(path, &format!("{{ {PROBE} = 1 }}"));
    let error = match toml::from_str::<RawConfig>(&text) {
        Ok(_) => return (Shape::Map, Vec::new()),
        Err(error) => error.to_string(),
    };
    let marker = format!("unknown field `{PROBE}`, expected ");
    let Some(at) = error.find(&marker) else {
        return (Shape::Value, Vec::new());
    };
    let expected = error[at + marker.len()..].lines().next().unwrap_or("");
    // "one of `a`, `b`", "`a` or `b`", "`a`": the names are what the
    // backticks hold.
    let fields = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect();
    (Shape::Struct, fields)
}

/// Every path below the top level, with its shape: `batch.max_records`.
fn accepted() -> BTreeMap<String, Shape> {
    let mut found = BTreeMap::new();
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        let (shape, fields) = probe(&path);
        if !path.is_empty() {
            found.insert(path.join("."), shape);
        }
        if shape == Shape::Struct {
            assert!(!fields.is_empty(), "no fields found at {path:?}");
            for field in fields {
                let mut child = path.clone();
                child.push(field);
                todo.push(child);
            }
        }
    }
    found
}

/// Every field docs/configuration.md lists, full path, with how often.
fn documented() -> BTreeMap<String, usize> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    let text = std::fs::read_to_string(path).expect("docs/configuration.md");
    let mut table = String::new();
    let mut in_fields = false;
    let mut found = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') {
            table = line
                .split('`')
                .skip(1)
                .step_by(2)
                .find(|code| code.starts_with('['))
                .map(|code| code.trim_matches(|c| c == '[' || c == ']').to_string())
                .unwrap_or_default();
            continue;
        }
        if !line.starts_with('|') {
            in_fields = false;
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.get(1) == Some(&"field") {
            in_fields = cells.get(2) == Some(&"default") || cells.get(2) == Some(&"example");
            continue;
        }
        if !in_fields || cells[1].starts_with("---") {
            continue;
        }
        for name in cells[1].split(',').map(str::trim) {
            let name = name
                .strip_prefix('`')
                .and_then(|n| n.strip_suffix('`'))
                .unwrap_or_else(|| {
                    panic!("docs/configuration.md: `{name}` is not a field name in backticks")
                });
            // A name that repeats its table (`kafka.consumer` under
            // `[kafka]`) is already a full path.
            let full =
                if table.is_empty() || name == table || name.starts_with(&format!("{table}.")) {
                    name.to_string()
                } else {
                    format!("{table}.{name}")
                };
            *found.entry(full).or_insert(0) += 1;
        }
    }
    found
}

#[test]
fn the_probe_finds_fields_of_nested_structs() {
    // The walk itself: a value, a map, a struct inside a struct and one
    // inside the streams array are each found as what they are.
    let accepted = accepted();
    assert_eq!(accepted.get("batch.max_records"), Some(&Shape::Value));
    assert_eq!(accepted.get("kafka"), Some(&Shape::Map));
    assert_eq!(accepted.get("store.tls"), Some(&Shape::Struct));
    assert_eq!(accepted.get("store.tls.ca_file"), Some(&Shape::Value));
    assert_eq!(accepted.get("streams.ttl"), Some(&Shape::Struct));
    assert_eq!(accepted.get("streams.ttl.horizon"), Some(&Shape::Value));
    assert_eq!(accepted.get("guarantee"), Some(&Shape::Value));
}

#[test]
fn the_configuration_reference_lists_every_field_once_and_nothing_else() {
    let accepted = accepted();
    let documented = documented();
    let mut problems = Vec::new();
    let leaves: BTreeSet<&String> = accepted
        .iter()
        .filter(|(_, shape)| **shape != Shape::Struct)
        .map(|(path, _)| path)
        .collect();
    for leaf in &leaves {
        match documented.get(*leaf) {
            None => problems.push(format!("{leaf} is accepted but not documented")),
            Some(1) => {}
            Some(n) => problems.push(format!("{leaf} is documented {n} times")),
        }
    }
    for path in documented.keys() {
        // A map's own keys (`kafka.consumer`) are free: below a map, any
        // path is the map's business.
        let below_a_map = accepted
            .iter()
            .any(|(map, shape)| *shape == Shape::Map && path.starts_with(&format!("{map}.")));
        if !accepted.contains_key(path) && !below_a_map {
            problems.push(format!(
                "{path} is documented but no config struct accepts it"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/configuration.md against src/config/raw.rs:\n{}",
        problems.join("\n")
    );
}

/// The config README.md shows is one `run` accepts, as written (its
/// password from the environment).
#[test]
fn the_readme_config_example_is_accepted() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let (_, after) = readme
        .split_once("```toml\n")
        .expect("README.md shows a TOML config");
    let (example, _) = after.split_once("```").expect("the TOML block ends");
    let config = super::Config::parse_with_vars(example, |name| {
        (name == "REDIS_PASSWORD").then(|| "s3cret".into())
    })
    .unwrap_or_else(|e| panic!("README.md's config: {e}"));
    assert_eq!(config.streams.len(), 1, "README.md's config has one stream");
}
