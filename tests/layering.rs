//! The layering of `src/`, read from the source text: which module may
//! name which. Issue 47 found one import circle of 21 files through
//! `config`, `logging`, `ops` and `worker`, closed by five imports, and the
//! shared words (`Millis`, `Coordinates`, `TopicTag`, `Tier`) living in the
//! store; in a circle no part can be read, tested or changed without the
//! rest. What holds now, and fails here when it stops holding:
//!
//! - `worker` never names `ops`: the operator's commands stand above the
//!   worker (they read its commit metadata); what both ask of a consumer
//!   group's coordinator is `group`'s.
//! - `config` names neither `worker` nor `ops`: the config owns its
//!   defaults and limits (`config/kafka.rs`, `MAX_HANDOVER_DRAIN`), and
//!   both read it.
//! - `group` names neither `worker` nor `ops`: both import it.
//! - `clock`, `coordinates` and `tier` name nothing of the crate: every
//!   layer shares their words, so they stand under all of them.
//! - `decision` never names `store`: decisions are pure functions over
//!   plain data (docs/design.md §2), in the words of `coordinates` and
//!   `tier`.
//! - `store` never names `config` (docs/design.md §1: `app` opens the store
//!   a config names).
//! - `worker::flight` names, of the worker, only `record` (docs/design.md
//!   §1: the flight never imports the I/O files).
//! - No two top-level modules name each other, directly or around a
//!   circle, but for the ties `KNOWN_TIES` lists with why (older than this
//!   test; each is to be opened, and leaves the list when it is).
//!
//! A module is named by a `use` (grouped `use crate::{ops, store}` and
//! nested trees included) or by a path in the code (`crate::ops::x()`),
//! absolute or relative (`super::super::ops`, resolved from the file's
//! module and any inline `mod` around it). Comments and string literals
//! are not read. Test code counts too: a test that reaches across a layer
//! ties the layers as an import does.

#[path = "layering/circles.rs"]
mod circles;
#[path = "layering/reader.rs"]
mod reader;

use std::collections::BTreeMap;

use circles::circles;
use reader::{crate_references, module, references, src, Reference};

/// A rule: files under `from` may name nothing under `forbidden`, except
/// what is under one of `allowed`.
struct Rule {
    from: &'static str,
    forbidden: &'static str,
    allowed: &'static [&'static str],
    why: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        from: "worker",
        forbidden: "ops",
        allowed: &[],
        why:
            "the operator's commands stand above the worker; what both ask of a group is `group`'s",
    },
    Rule {
        from: "config",
        forbidden: "worker",
        allowed: &[],
        why: "the config owns its defaults and limits; the worker reads them",
    },
    Rule {
        from: "config",
        forbidden: "ops",
        allowed: &[],
        why: "the config owns its defaults and limits; the commands read them",
    },
    Rule {
        from: "group",
        forbidden: "worker",
        allowed: &[],
        why: "the worker imports `group`",
    },
    Rule {
        from: "group",
        forbidden: "ops",
        allowed: &[],
        why: "the operator's commands import `group`",
    },
    Rule {
        from: "clock",
        forbidden: "",
        allowed: &["clock"],
        why: "a leaf: every layer reads time through it",
    },
    Rule {
        from: "coordinates",
        forbidden: "",
        allowed: &["coordinates"],
        why: "a leaf: every layer names a record's place with it",
    },
    Rule {
        from: "tier",
        forbidden: "",
        allowed: &["tier"],
        why: "a leaf: the store, the decisions and the metrics name a tier with it",
    },
    Rule {
        from: "decision",
        forbidden: "store",
        allowed: &[],
        why: "decisions are pure functions over plain data (docs/design.md §2)",
    },
    Rule {
        from: "store",
        forbidden: "config",
        allowed: &[],
        why: "`app` opens the store a config names (docs/design.md §1)",
    },
    Rule {
        from: "worker::flight",
        forbidden: "worker",
        allowed: &["worker::flight", "worker::record"],
        why: "the flight imports only `worker/record.rs`, never the I/O files (docs/design.md §1)",
    },
];

/// Ties between top-level modules that close a circle today, left out of
/// the circle check until they are opened: (from, to, why). A tie that is
/// gone must leave the list (`every_known_tie_still_stands`).
const KNOWN_TIES: &[(&str, &str, &str)] = &[
    (
        "store",
        "metrics",
        "the PostgreSQL janitor counts what it swept (`metrics::janitor_swept`) and the Redis dry \
         round names a metric in a message, while the metrics name `StoreError` and `StoreStats`",
    ),
    (
        "app",
        "ops",
        "the start-up identity check reads the group's commits through `ops::group`, while \
         `reset` and `rebuild` open the store with `app::open_store`",
    ),
];

fn under(path: &[String], prefix: &str) -> bool {
    prefix.is_empty()
        || prefix
            .split("::")
            .enumerate()
            .all(|(k, seg)| path.get(k).is_some_and(|p| p == seg))
}

/// What a rule refuses among `module`'s references.
fn broken<'a>(rule: &Rule, module: &[String], refs: &'a [Reference]) -> Vec<&'a Reference> {
    if !under(module, rule.from) {
        return Vec::new();
    }
    refs.iter()
        .filter(|r| !r.target.is_empty())
        .filter(|r| under(&r.target, rule.forbidden))
        .filter(|r| !rule.allowed.iter().any(|a| under(&r.target, a)))
        .collect()
}

#[test]
fn no_module_names_one_its_layer_stands_above() {
    let mut failures = Vec::new();
    for (file, module, refs) in crate_references() {
        for rule in RULES {
            for r in broken(rule, &module, &refs) {
                failures.push(format!(
                    "{}:{}: {} ({} may not name {}: {})",
                    file.strip_prefix(src()).unwrap().display(),
                    r.line,
                    r.written,
                    rule.from,
                    if rule.forbidden.is_empty() {
                        "the crate"
                    } else {
                        rule.forbidden
                    },
                    rule.why
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "layering broken:\n{}",
        failures.join("\n")
    );
}

/// Top-level module -> the top-level modules it names, with one file and
/// line for each tie.
fn module_ties() -> BTreeMap<String, BTreeMap<String, String>> {
    let mut ties: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (file, module, refs) in crate_references() {
        let Some(from) = module.first() else { continue };
        for r in refs {
            let Some(to) = r.target.first() else { continue };
            if to != from {
                ties.entry(from.clone())
                    .or_default()
                    .entry(to.clone())
                    .or_insert_with(|| {
                        format!("{}:{}", file.strip_prefix(src()).unwrap().display(), r.line)
                    });
            }
        }
    }
    ties
}

#[test]
fn every_known_tie_still_stands() {
    let ties = module_ties();
    for (from, to, why) in KNOWN_TIES {
        assert!(
            ties.get(*from).is_some_and(|t| t.contains_key(*to)),
            "{from} no longer names {to}: take the tie off KNOWN_TIES ({why})"
        );
    }
}

#[test]
fn no_circle_runs_between_top_level_modules() {
    let mut ties = module_ties();
    for (from, to, _) in KNOWN_TIES {
        if let Some(t) = ties.get_mut(*from) {
            t.remove(*to);
        }
    }
    let circles = circles(&ties);
    let described: Vec<String> = circles
        .iter()
        .map(|circle| {
            let mut steps = Vec::new();
            for from in circle {
                for (to, at) in ties.get(from).into_iter().flatten() {
                    if circle.contains(to) {
                        steps.push(format!("  {from} -> {to} ({at})"));
                    }
                }
            }
            format!("{}:\n{}", circle.join(", "), steps.join("\n"))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "modules that name each other:\n{}",
        described.join("\n")
    );
}

#[test]
fn each_rule_refuses_what_issue_47_found() {
    let refused = |module_path: &str, text: &str| -> usize {
        let refs = references(&module(module_path), text);
        RULES
            .iter()
            .filter(|rule| !broken(rule, &module(module_path), &refs).is_empty())
            .count()
    };
    // The five imports that closed the circle, the store's words, and a
    // flight reaching the loop.
    for (module_path, text) in [
        (
            "worker::error",
            "use crate::ops::check::txn::MetadataDropped;",
        ),
        (
            "worker::watch",
            "fn f() { crate::ops::kafka::group_members(); }",
        ),
        ("config", "fn f() { crate::worker::MAX_HANDOVER_DRAIN; }"),
        ("config::rules", "use crate::{store, worker};"),
        ("clock", "use crate::store::Millis;"),
        ("decision", "use crate::store::{Coordinates, Tier};"),
        (
            "worker::flight::round",
            "use super::super::pipeline::Pipeline;",
        ),
    ] {
        assert_eq!(refused(module_path, text), 1, "{module_path}: {text}");
    }
    // What stays allowed.
    for (module_path, text) in [
        ("worker::resolve", "use crate::group::read_back;"),
        ("worker::flight::state", "use super::super::record::Input;"),
        ("ops::check::txn", "use crate::worker::metadata::MAX_LEN;"),
        ("clock", "mod tests { use super::*; }"),
    ] {
        assert_eq!(refused(module_path, text), 0, "{module_path}: {text}");
    }
}
