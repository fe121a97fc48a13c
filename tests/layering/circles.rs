//! The circles among modules that name each other, for
//! `tests/layering.rs`.

use std::collections::{BTreeMap, BTreeSet};

/// The groups of more than one module that all reach each other (strongly
/// connected components, Tarjan), each in the order the walk met them.
pub(crate) fn circles(ties: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        ties: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            if let Some(next) = self.ties.get(node) {
                for to in next.keys() {
                    let to = to.as_str();
                    if !self.index.contains_key(to) {
                        self.visit(to);
                        let low = self.low[node].min(self.low[to]);
                        self.low.insert(node, low);
                    } else if self.on_stack.contains(to) {
                        let low = self.low[node].min(self.index[to]);
                        self.low.insert(node, low);
                    }
                }
            }
            if self.low[node] == self.index[node] {
                let mut group = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    group.push(top.to_string());
                    if top == node {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.reverse();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        ties,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in ties.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

#[test]
fn a_circle_between_modules_is_found_and_one_way_ties_are_not() {
    let ties = |pairs: &[(&str, &str)]| {
        let mut ties: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (from, to) in pairs {
            ties.entry(from.to_string())
                .or_default()
                .insert(to.to_string(), String::new());
        }
        ties
    };
    assert!(circles(&ties(&[
        ("ops", "worker"),
        ("worker", "config"),
        ("ops", "config")
    ]))
    .is_empty());
    assert_eq!(
        circles(&ties(&[
            ("config", "worker"),
            ("worker", "ops"),
            ("ops", "config"),
            ("app", "config")
        ])),
        [["config", "worker", "ops"]]
    );
}
