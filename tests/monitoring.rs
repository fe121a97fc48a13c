//! The monitoring shipped in `deploy/`, checked without any server:
//!
//! - `promtool check rules` and `promtool test rules` on the alerting rules and
//!   their unit tests, and `promtool check config` on the compose Prometheus;
//! - every alert has a unit test that fires it and one that does not, and
//!   each has `for:`, a severity and both annotations;
//! - the Grafana dashboard: JSON, its data source variable, every panel with
//!   a data source and a PromQL target, every expression valid PromQL (as a
//!   recording rule for `promtool check rules`);
//! - every metric the dashboard, the rules and their tests name is one that
//!   idemgate exports, and every exported metric is on the dashboard;
//! - docs/monitoring.md's metric table lists every metric with its type and
//!   labels, and no page of the docs names a metric idemgate does not export.
//!
//! What idemgate exports is `idemgate::metrics::CATALOG`, where each metric
//! is declared once; nothing here keeps a list of its own.
//!
//! promtool comes with Debian's `prometheus` package (scripts/install-deps.sh);
//! without it these tests fail, they are never skipped. `IDEMGATE_PROMTOOL`
//! names another binary. The e2e counterpart, a real Prometheus scraping a
//! real gateway, is `tests/it/e2e/monitoring.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use idemgate::metrics::{of_series, Kind, CATALOG};
use serde_json::Value;

#[path = "monitoring/docs.rs"]
mod docs;
#[path = "monitoring/variables.rs"]
mod variables;

/// The prefixes of the metrics idemgate exports: its own, and the process
/// metrics under the names every Prometheus client library uses.
const PREFIXES: [&str; 2] = ["idemgate_", "process_"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn deploy(path: &str) -> PathBuf {
    repo().join("deploy").join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Runs promtool; a missing binary fails the test with how to get it.
fn promtool(args: &[&std::ffi::OsStr]) -> Output {
    let binary = std::env::var("IDEMGATE_PROMTOOL").unwrap_or_else(|_| "promtool".into());
    Command::new(&binary)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {binary} ({e}): install Debian's `prometheus` package, which \
                 provides promtool (scripts/install-deps.sh does), or set IDEMGATE_PROMTOOL"
            )
        })
}

/// promtool must succeed; its output is in the panic message otherwise.
fn promtool_ok(args: &[&std::ffi::OsStr]) -> String {
    let output = promtool(args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {:?} failed ({}):\n{text}",
        args,
        output.status
    );
    text
}

/// The alert names of alerts.yml, in order.
fn alert_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("- alert:"))
        .map(|name| name.trim().to_string())
        .collect()
}

/// Each alert's block of lines in alerts.yml (from its `- alert:` line to
/// the next one).
fn alert_blocks(rules: &str) -> BTreeMap<String, Vec<String>> {
    let mut blocks: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in rules.lines() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            let name = name.trim().to_string();
            assert!(!blocks.contains_key(&name), "alert {name} is defined twice");
            blocks.insert(name.clone(), Vec::new());
            current = Some(name);
        } else if let Some(name) = &current {
            if !trimmed.starts_with('#') {
                blocks
                    .get_mut(name)
                    .expect("block")
                    .push(trimmed.to_string());
            }
        }
    }
    blocks
}

/// Every `idemgate_…` or `process_…` name in `text`: a word starting with
/// one of [`PREFIXES`] (so `job="idemgate"` is not one).
fn metric_names(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut names = BTreeSet::new();
    for prefix in PREFIXES {
        let mut at = 0;
        while let Some(found) = text[at..].find(prefix) {
            let start = at + found;
            let mut end = start + prefix.len();
            while end < bytes.len()
                && (bytes[end].is_ascii_lowercase()
                    || bytes[end].is_ascii_digit()
                    || bytes[end] == b'_')
            {
                end += 1;
            }
            let word_start = start == 0
                || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
            if word_start {
                names.insert(text[start..end].to_string());
            }
            at = end;
        }
    }
    names
}

/// The exported metric a series name belongs to, or why it is none.
fn exported(series: &str) -> Result<&'static str, String> {
    if let Some(metric) = of_series(series) {
        return Ok(metric.name);
    }
    match CATALOG.iter().find(|m| m.name == series) {
        Some(metric) if metric.kind == Kind::Histogram => Err(format!(
            "{series} is a histogram: use {series}_bucket, _sum or _count"
        )),
        _ => Err(format!("{series} is not a metric idemgate exports")),
    }
}

fn dashboard() -> Value {
    let path = deploy("grafana/dashboard.json");
    serde_json::from_str(&read(&path))
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a [Value], out: &mut Vec<&'a Value>) {
        for panel in list {
            out.push(panel);
            if let Some(nested) = panel["panels"].as_array() {
                walk(nested, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        dashboard["panels"].as_array().expect("dashboard.panels"),
        &mut out,
    );
    out
}

/// (panel title, refId, expr) of every target of every panel.
fn panel_exprs(dashboard: &Value) -> Vec<(String, String, String)> {
    let mut exprs = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                exprs.push((
                    panel["title"].as_str().unwrap_or_default().to_string(),
                    target["refId"].as_str().unwrap_or_default().to_string(),
                    expr.to_string(),
                ));
            }
        }
    }
    exprs
}

#[test]
fn alert_rules_pass_promtool_check() {
    let path = deploy("prometheus/alerts.yml");
    let out = promtool_ok(&["check".as_ref(), "rules".as_ref(), path.as_os_str()]);
    let count = alert_names(&read(&path)).len();
    assert!(
        out.contains(&format!("SUCCESS: {count} rules found")),
        "promtool found another number of rules than the {count} alerts: {out}"
    );
}

#[test]
fn alert_rules_pass_their_unit_tests() {
    let path = deploy("prometheus/alerts.test.yml");
    let out = promtool_ok(&["test".as_ref(), "rules".as_ref(), path.as_os_str()]);
    assert!(out.contains("SUCCESS"), "promtool test rules: {out}");
}

#[test]
fn prometheus_config_passes_promtool_check_and_scrapes_job_idemgate() {
    let path = deploy("prometheus/prometheus.yml");
    let text = read(&path);
    // rule_files are relative to the config file, so this checks alerts.yml
    // as the compose Prometheus loads it.
    let out = promtool_ok(&["check".as_ref(), "config".as_ref(), path.as_os_str()]);
    assert!(
        out.contains("SUCCESS: 1 rule files found"),
        "the config must load alerts.yml: {out}"
    );
    assert!(
        text.lines().any(|l| l.trim() == "- job_name: idemgate"),
        "the alerts select job=\"idemgate\": the scrape job must have that name"
    );
    // config/compose.toml serves metrics on 9464; the compose service is `idemgate`.
    assert!(
        read(&repo().join("config/compose.toml")).contains("listen = \"0.0.0.0:9464\""),
        "config/compose.toml no longer listens on 9464: update deploy/prometheus/prometheus.yml"
    );
    assert!(
        text.contains("\"idemgate:9464\""),
        "the scrape target must be the compose service idemgate:9464"
    );
}

#[test]
fn every_alert_has_for_severity_and_annotations() {
    let rules = read(&deploy("prometheus/alerts.yml"));
    assert!(
        rules.contains("- name: idemgate"),
        "the rule group must be called idemgate"
    );
    let blocks = alert_blocks(&rules);
    assert!(blocks.len() >= 9, "alerts: {:?}", blocks.keys());
    for (name, lines) in &blocks {
        assert!(
            name.starts_with("Idemgate"),
            "{name}: alert names start with Idemgate"
        );
        let has = |prefix: &str| lines.iter().any(|l| l.starts_with(prefix));
        for key in [
            "expr:",
            "for:",
            "labels:",
            "annotations:",
            "summary:",
            "description:",
        ] {
            assert!(has(key), "alert {name} has no `{key}`");
        }
        assert!(
            has("severity: critical") || has("severity: warning"),
            "alert {name}: severity must be critical or warning"
        );
    }
    for expected in [
        "IdemgateStoreEvictedKeys",
        "IdemgateBreakerOpen",
        "IdemgateFilterNearlyFull",
        "IdemgateOldestWaitHigh",
        "IdemgateConsumerLagGrowing",
        "IdemgateConsumerLagStalled",
        "IdemgateClaimsTakenOver",
        "IdemgateStoreIdentityLost",
        "IdemgateProduceFailures",
        "IdemgateReplicaDown",
        "IdemgateAllReplicasDown",
    ] {
        assert!(blocks.contains_key(expected), "no alert {expected}");
    }
}

/// promtool passes a case whose alert name matches no rule, or whose
/// `exp_alerts: []` holds only because nothing was ever going to fire; so
/// every alert needs a case that fires it, every case names a real alert.
#[test]
fn every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not() {
    let alerts: BTreeSet<String> = alert_names(&read(&deploy("prometheus/alerts.yml")))
        .into_iter()
        .collect();
    let tests = read(&deploy("prometheus/alerts.test.yml"));
    let mut fires: BTreeMap<String, usize> = BTreeMap::new();
    let mut quiet: BTreeMap<String, usize> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in tests.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("alertname:") {
            let name = name.trim().to_string();
            assert!(
                alerts.contains(&name),
                "alerts.test.yml tests {name}, which alerts.yml does not define"
            );
            current = Some(name);
        } else if let Some(rest) = line.strip_prefix("exp_alerts:") {
            let name = current
                .take()
                .expect("exp_alerts without an alertname before it");
            match rest.trim() {
                "[]" => *quiet.entry(name).or_default() += 1,
                "" => *fires.entry(name).or_default() += 1,
                other => panic!("write exp_alerts as `[]` or as a list, not {other:?}"),
            }
        }
    }
    for alert in &alerts {
        assert!(
            fires.contains_key(alert),
            "no unit test in alerts.test.yml fires {alert}"
        );
        assert!(
            quiet.contains_key(alert),
            "no unit test in alerts.test.yml expects {alert} quiet"
        );
    }
}

#[test]
fn dashboard_panels_each_have_a_datasource_and_a_promql_target() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "idemgate");
    let schema = dashboard["schemaVersion"].as_u64().expect("schemaVersion");
    assert!((36..=39).contains(&schema), "schemaVersion {schema}");
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    assert!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "no `datasource` variable of Prometheus data sources"
    );
    let datasource = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});
    let mut ids = BTreeSet::new();
    let all = panels(&dashboard);
    assert!(all.len() >= 14, "{} panels", all.len());
    for panel in all {
        let title = panel["title"].as_str().unwrap_or("<untitled>");
        assert!(!title.is_empty(), "a panel without a title");
        let id = panel["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("{title}: no id"));
        assert!(ids.insert(id), "panel id {id} used twice");
        assert!(
            panel["gridPos"]["w"].as_u64().is_some(),
            "{title}: no gridPos"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"], datasource,
            "panel {title}: datasource must be the ${{datasource}} variable"
        );
        let targets = panel["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {title}: no targets"));
        assert!(!targets.is_empty(), "panel {title}: no targets");
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(
                !expr.trim().is_empty(),
                "panel {title}: a target without expr"
            );
            assert_eq!(
                target["datasource"], datasource,
                "panel {title}: target datasource must be the ${{datasource}} variable"
            );
        }
    }
    let titles: Vec<&str> = panels(&dashboard)
        .iter()
        .filter_map(|p| p["title"].as_str())
        .collect();
    let exprs = panel_exprs(&dashboard);
    for needed in [
        "histogram_quantile(0.99, sum by (le, op) (rate(idemgate_store_latency_seconds_bucket{instance=~\"$instance\"}[$__rate_interval])))",
        "histogram_quantile(0.5, sum by (le, op) (rate(idemgate_store_latency_seconds_bucket{instance=~\"$instance\"}[$__rate_interval])))",
        "sum by (decision) (rate(idemgate_records_total{instance=~\"$instance\", stream=~\"$stream\"}[$__rate_interval]))",
    ] {
        assert!(
            exprs.iter().any(|(_, _, e)| e == needed),
            "no panel queries {needed}; panels: {titles:?}"
        );
    }
}

/// Every panel expression is valid PromQL: each one becomes a recording rule
/// in a temporary rules file for `promtool check rules`.
#[test]
fn dashboard_exprs_are_valid_promql() {
    let exprs = panel_exprs(&dashboard());
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (index, (_, _, expr)) in exprs.iter().enumerate() {
        // The variables at their "All" value, as Grafana sends it.
        let expr = expr
            .replace("$__rate_interval", "1m")
            .replace("$__interval", "1m")
            .replace("$instance", ".*")
            .replace("$stream", ".*");
        assert!(!expr.contains('$'), "an unknown variable in {expr}");
        rules.push_str(&format!(
            "      - record: dashboard:expr_{index}\n        expr: {}\n",
            serde_json::to_string(&expr).expect("json string")
        ));
    }
    let dir = std::env::temp_dir().join(format!("idemgate-monitoring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("dashboard-rules.yml");
    std::fs::write(&path, &rules).expect("writing the rules");
    let out = promtool_ok(&["check".as_ref(), "rules".as_ref(), path.as_os_str()]);
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether PromQL `text` selects `up` (a series Prometheus makes, no
/// idemgate metric).
fn selects_up(text: &str) -> bool {
    text.starts_with("up{") || text.contains("(up{") || text.contains(" up{")
}

/// The PromQL of alerts.yml: each `expr:` value, a folded one's lines
/// joined.
fn rule_exprs(rules: &str) -> Vec<String> {
    let mut exprs = Vec::new();
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        let Some(value) = trimmed.strip_prefix("expr:") else {
            continue;
        };
        let value = value.trim();
        if value == ">-" || value == ">" || value == "|" {
            let indent = line.len() - trimmed.len();
            let mut folded = Vec::new();
            while let Some(next) = lines.peek() {
                let next_trimmed = next.trim_start();
                if next_trimmed.is_empty() || next.len() - next_trimmed.len() > indent {
                    folded.push(next_trimmed.to_string());
                    lines.next();
                } else {
                    break;
                }
            }
            exprs.push(folded.join(" ").trim().to_string());
        } else {
            exprs.push(value.to_string());
        }
    }
    exprs
}

/// The series of alerts.test.yml's `input_series`.
fn test_series(tests: &str) -> Vec<String> {
    tests
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- series:"))
        .map(|s| s.trim().trim_matches('\'').to_string())
        .collect()
}

/// Expressions and test series name series, so a histogram only by its
/// `_bucket`, `_sum` or `_count`: a typo there makes a panel empty or a
/// quiet unit test pass for nothing. Prose (descriptions, comments) may name
/// a histogram by its own name.
#[test]
fn every_metric_named_is_exported_and_every_exported_one_is_on_the_dashboard() {
    let dashboard_text = read(&deploy("grafana/dashboard.json"));
    let rules = read(&deploy("prometheus/alerts.yml"));
    let rule_tests = read(&deploy("prometheus/alerts.test.yml"));
    let dashboard_exprs: Vec<String> = panel_exprs(&dashboard())
        .into_iter()
        .map(|(_, _, e)| e)
        .collect();
    let alert_exprs = rule_exprs(&rules);
    assert_eq!(
        alert_exprs.len(),
        alert_names(&rules).len(),
        "one expr per alert: {alert_exprs:?}"
    );
    let series = test_series(&rule_tests);
    assert!(series.len() >= 20, "input series: {series:?}");

    let mut problems = Vec::new();
    let mut strict = |what: &str, texts: &[String]| -> BTreeSet<&'static str> {
        let mut used = BTreeSet::new();
        for text in texts {
            let names = metric_names(text);
            if names.is_empty() && !selects_up(text) {
                problems.push(format!("{what}: {text} names no idemgate metric"));
            }
            for name in names {
                match exported(&name) {
                    Ok(metric) => {
                        used.insert(metric);
                    }
                    Err(why) => problems.push(format!("{what}: {why} (in {text})")),
                }
            }
        }
        used
    };
    let on_dashboard = strict("dashboard expr", &dashboard_exprs);
    strict("alert expr", &alert_exprs);
    strict("unit test series", &series);
    for (what, text) in [
        ("dashboard.json", &dashboard_text),
        ("alerts.yml", &rules),
        ("alerts.test.yml", &rule_tests),
    ] {
        for name in metric_names(text) {
            if exported(&name).is_err() && !CATALOG.iter().any(|m| m.name == name) {
                problems.push(format!("{what}: {name} is not a metric idemgate exports"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for metric in CATALOG {
        assert!(
            on_dashboard.contains(metric.name),
            "no dashboard panel queries {}",
            metric.name
        );
    }
}

#[test]
fn metric_names_are_found_as_words_only() {
    let names = metric_names(
        "up{job=\"idemgate\"} + rate(idemgate_records_total[5m]) / xidemgate_no + idemgate_batch_records_bucket",
    );
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        names,
        ["idemgate_batch_records_bucket", "idemgate_records_total"]
    );
    assert_eq!(
        exported("idemgate_batch_records_bucket"),
        Ok("idemgate_batch_records")
    );
    assert!(exported("idemgate_batch_records").is_err());
    assert!(exported("idemgate_records_total_sum").is_err());
    assert!(exported("idemgate_nonsense").is_err());
    let folded = "      - alert: A\n        expr: >-\n          sum(x) > 1\n          and\n          y\n        for: 1m\n      - alert: B\n        expr: up == 0\n";
    assert_eq!(rule_exprs(folded), ["sum(x) > 1 and y", "up == 0"]);
}
