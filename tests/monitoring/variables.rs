//! The dashboard's `instance` and `stream` variables: defined as Grafana
//! needs them and used by every series every panel selects.

use std::collections::BTreeSet;

use idemgate::metrics::CATALOG;

use super::{dashboard, exported, metric_names, panel_exprs, selects_up};

/// Metrics with a `stream` label, as the catalog declares them.
fn streamed_metrics() -> BTreeSet<String> {
    let streamed: BTreeSet<String> = CATALOG
        .iter()
        .filter(|m| m.label_names().any(|label| label == "stream"))
        .map(|m| m.name.to_string())
        .collect();
    assert!(streamed.len() >= 10, "streamed metrics: {streamed:?}");
    streamed
}

/// Each series selector of `expr` (`up` and every exported metric's
/// series): its name and the matchers between its braces, `None` for a
/// bare name.
fn selectors(expr: &str) -> Vec<(String, Option<String>)> {
    let mut names: Vec<String> = metric_names(expr).into_iter().collect();
    if selects_up(expr) {
        names.push("up".into());
    }
    let mut found = Vec::new();
    for name in names {
        let mut at = 0;
        while let Some(offset) = expr[at..].find(name.as_str()) {
            let start = at + offset;
            let end = start + name.len();
            at = end;
            let before = expr[..start].chars().next_back();
            let after = expr[end..].chars().next();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if word(before) || word(after) {
                continue;
            }
            let matchers = expr[end..]
                .strip_prefix('{')
                .and_then(|rest| rest.split_once('}'))
                .map(|(inside, _)| inside.to_string());
            found.push((name.clone(), matchers));
        }
    }
    found
}

/// Grafana's `instance` and `stream` variables narrow every panel: each
/// series a query selects is matched by `$instance`, by `$stream` where
/// the metric has a stream label, and, for the process metrics every
/// client library exports, by `job="idemgate"` (or a shared Prometheus
/// would mix in other programs' processes).
#[test]
fn every_panel_query_uses_the_instance_and_stream_variables() {
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    for (name, over) in [
        ("instance", "idemgate_build_info"),
        ("stream", "idemgate_records_total"),
    ] {
        let variable = variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no `{name}` variable"));
        assert_eq!(variable["type"], "query", "{name}");
        assert_eq!(variable["datasource"]["uid"], "${datasource}", "{name}");
        assert_eq!(variable["multi"], true, "{name}: several at once");
        assert_eq!(variable["includeAll"], true, "{name}: an All option");
        assert_eq!(variable["allValue"], ".*", "{name}: All as a regex");
        let query = variable["query"]["query"].as_str().unwrap_or_default();
        assert!(
            query.starts_with(&format!("label_values({over}{{job=\"idemgate\""))
                && query.ends_with(&format!(", {name})")),
            "{name}: {query}"
        );
    }
    let streamed = streamed_metrics();
    let mut problems = Vec::new();
    for (panel, ref_id, expr) in panel_exprs(&dashboard) {
        let found = selectors(&expr);
        if found.is_empty() {
            problems.push(format!("{panel} / {ref_id}: no series selected in {expr}"));
        }
        for (name, matchers) in found {
            let matchers = matchers.unwrap_or_default();
            let metric = exported(&name).unwrap_or(name.as_str()).to_string();
            let mut needed = vec!["instance=~\"$instance\""];
            if streamed.contains(&metric) {
                needed.push("stream=~\"$stream\"");
            }
            if metric.starts_with("process_") || name == "up" {
                needed.push("job=\"idemgate\"");
            }
            for matcher in needed {
                if !matchers.split(',').any(|m| m.trim() == matcher) {
                    problems.push(format!(
                        "{panel} / {ref_id}: {name} without {matcher} in {expr}"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn selectors_are_found_with_their_matchers() {
    let found = selectors(
        "sum(rate(idemgate_batch_records_sum{instance=~\"$instance\"}[1m])) / count(up{job=\"idemgate\"}) + idemgate_breaker_open",
    );
    assert_eq!(
        found,
        [
            (
                "idemgate_batch_records_sum".to_string(),
                Some("instance=~\"$instance\"".to_string())
            ),
            ("idemgate_breaker_open".to_string(), None),
            ("up".to_string(), Some("job=\"idemgate\"".to_string())),
        ]
    );
}
