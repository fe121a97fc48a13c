//! The monitoring of `deploy/` against the real thing: a Prometheus of its
//! own (Debian's `prometheus` binary, `IDEMGATE_TEST_PROMETHEUS` for
//! another) scrapes one gateway every second with the shipped
//! `deploy/prometheus/prometheus.yml` (target, intervals and the rules path
//! rewritten) and evaluates `alerts.yml`. The gateway runs a bank stream
//! (exact) and a telemetry stream (tiered, so the filter gauges exist).
//!
//! Once every input has its output, Prometheus must hold the exact decision
//! counts the outputs carry, every panel expression of
//! `deploy/grafana/dashboard.json` must return at least one series, and
//! `/api/v1/rules` must list every alert as loaded, healthy and not firing.
//! Prometheus is asked over its HTTP API with a few lines of HTTP/1.0 on a
//! `TcpStream` (no HTTP client crate).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use idemgate_testkit::kafka::{Producer, Reader, Topics};
use idemgate_testkit::process::Logged;
use idemgate_testkit::servers::free_port;
use idemgate_testkit::telemetry::Telemetry;
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, unique, BOUND};
use serde_json::Value;

use super::process::{Gate, GateConfig};

const TEST: &str = "monitoring";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A Prometheus server of the test's own, killed on drop; its log tail is
/// printed when the test panics, its directory removed otherwise.
struct Prometheus {
    process: Logged,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    /// Writes `config` into a fresh directory, starts the server on a free
    /// loopback port with its TSDB there, and waits until it is ready.
    fn start(config: &str) -> Prometheus {
        let binary =
            std::env::var("IDEMGATE_TEST_PROMETHEUS").unwrap_or_else(|_| "prometheus".into());
        let dir = std::env::temp_dir().join(format!("idemgate-prometheus-{}", unique(TEST)));
        std::fs::create_dir_all(dir.join("data")).expect("prometheus dir");
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config).expect("writing prometheus.yml");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("address");
        if let Err(e) = Command::new(&binary).arg("--version").output() {
            panic!(
                "cannot run {binary} ({e}): install Debian's `prometheus` package \
                 (scripts/install-deps.sh does) or set IDEMGATE_TEST_PROMETHEUS"
            );
        }
        let mut command = Command::new(&binary);
        command
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"));
        let process = Logged::spawn("prometheus", command, &dir.join("prometheus.log"));
        say(
            TEST,
            format!(
                "prometheus pid {} on {addr}, dir {}",
                process.pid(),
                dir.display()
            ),
        );
        let mut prometheus = Prometheus { process, addr, dir };
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            prometheus.assert_alive();
            if matches!(http_get(addr, "/-/ready"), Ok((200, _))) {
                return prometheus;
            }
            assert!(
                Instant::now() < until,
                "prometheus not ready within 30s; log:\n{}",
                prometheus.process.tail(30)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn assert_alive(&mut self) {
        self.process.assert_alive();
    }

    /// GET `path` of the HTTP API: its `data` when the status is success.
    fn api(&self, path: &str) -> Value {
        let (status, body) =
            http_get(self.addr, path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let json: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET {path}: {status}, not JSON ({e}): {body}"));
        assert!(
            status == 200 && json["status"] == "success",
            "GET {path}: {status} {body}"
        );
        json["data"].clone()
    }

    /// An instant query at now: the result vector.
    fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api(&format!("/api/v1/query?query={}", encode(expr)));
        assert_eq!(data["resultType"], "vector", "{expr}: {data}");
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// `expr`'s series as (value of `label`, value).
    fn by_label(&self, expr: &str, label: &str) -> BTreeMap<String, f64> {
        self.query(expr)
            .iter()
            .map(|series| {
                let key = series["metric"][label].as_str().unwrap_or("").to_string();
                let value = series["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN);
                (key, value)
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // The process guard prints the log tail of a failing test.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One HTTP/1.0 GET (so the answer is never chunked and ends with the
/// connection): the status code and the body.
pub(super) fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("no header end: {text}"),
        )
    })?;
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "a chunked answer to HTTP/1.0: {head}"
    );
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("status line: {head}"),
            )
        })?;
    Ok((status, body.to_string()))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// (panel title, refId, expr) of every dashboard target, Grafana's
/// interval variables replaced (`$instance` and `$stream` are left to
/// [`narrowed`]).
fn dashboard_exprs() -> Vec<(String, String, String)> {
    let path = repo().join("deploy/grafana/dashboard.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("dashboard.json"))
            .expect("dashboard.json is JSON");
    fn walk(list: &[Value], out: &mut Vec<(String, String, String)>) {
        for panel in list {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push((
                        panel["title"].as_str().unwrap_or_default().to_string(),
                        target["refId"].as_str().unwrap_or_default().to_string(),
                        expr.replace("$__rate_interval", "30s")
                            .replace("$__interval", "30s"),
                    ));
                }
            }
            if let Some(nested) = panel["panels"].as_array() {
                walk(nested, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dashboard["panels"].as_array().expect("panels"), &mut out);
    assert!(out.len() >= 14, "{} dashboard exprs", out.len());
    out
}

/// `expr` with the dashboard's `$instance` and `$stream` as Grafana
/// writes a selection into a query (a regex; "All" is `.*`).
fn narrowed(expr: &str, instance: &str, stream: &str) -> String {
    expr.replace("$instance", instance)
        .replace("$stream", stream)
}

/// The alert names of alerts.yml.
fn alert_names(rules: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(rules)
        .expect("alerts.yml")
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("- alert:"))
        .map(|name| name.trim().to_string())
        .collect()
}

/// The shipped compose config, pointed at this gateway: every rewrite must
/// apply exactly once, or the shipped file changed under the test.
fn prometheus_config(metrics: &str, rules: &Path) -> String {
    let shipped = std::fs::read_to_string(repo().join("deploy/prometheus/prometheus.yml"))
        .expect("prometheus.yml");
    let mut config = shipped;
    for (from, to) in [
        ("scrape_interval: 15s", "scrape_interval: 1s".to_string()),
        (
            "evaluation_interval: 15s",
            "evaluation_interval: 1s".to_string(),
        ),
        ("\"idemgate:9464\"", format!("\"{metrics}\"")),
        ("- alerts.yml", format!("- {}", rules.display())),
    ] {
        assert_eq!(
            config.matches(from).count(),
            1,
            "deploy/prometheus/prometheus.yml should hold `{from}` once"
        );
        config = config.replace(from, &to);
    }
    config
}

/// Waits (bounded) until `done` returns `None`; panics with its last
/// complaint otherwise.
fn wait_for(what: &str, bound: Duration, mut done: impl FnMut() -> Option<String>) {
    let until = Instant::now() + bound;
    loop {
        let Some(complaint) = done() else {
            return;
        };
        assert!(
            Instant::now() < until,
            "{what} within {bound:?}: {complaint}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Decision counts of the outputs on `topics`' clean and audit topics.
fn decisions(reader: &Reader, topics: &Topics) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    for out in &reader.records {
        if out.topic == topics.clean || out.topic == topics.audit {
            *counts.entry(out.decision().to_string()).or_insert(0.0) += 1.0;
        }
    }
    counts
}

#[test]
fn prometheus_scrapes_the_gateway_and_every_panel_and_alert_works() {
    let began = Instant::now();
    let brokers = kafka_brokers();
    let bank_topics = Topics::create(&brokers, TEST, 3, 2);
    let telemetry_topics = Topics::create(&brokers, "monitoring-telemetry", 2, 2);

    let mut bank = Bank::new(TEST, 12);
    bank.conflict_rate = 0.05;
    let bank_plan: Vec<Planned> = bank.phase(120, 0, 4);
    let mut telemetry = Telemetry::new(TEST, 4);
    let telemetry_plan: Vec<Planned> = telemetry.round(12, 0.3);
    let producer = Producer::new(&brokers);
    producer.send(&bank_topics.input, &bank_plan, 50, Duration::ZERO);
    producer.send(&telemetry_topics.input, &telemetry_plan, 50, Duration::ZERO);
    say(
        TEST,
        format!(
            "{} bank and {} telemetry inputs produced at {:?}",
            bank_plan.len(),
            telemetry_plan.len(),
            began.elapsed()
        ),
    );

    let metrics = format!("127.0.0.1:{}", free_port());
    let mut config = GateConfig::new(TEST, &bank_topics, env("IDEMGATE_TEST_REDIS_URL"));
    config.metrics_listen = metrics.clone();
    config.more_streams = format!(
        "\n[[streams]]\nname = \"telemetry\"\ninputs = [\"{}\"]\nclean = \"{}\"\naudit = \"{}\"\nprofile = \"payload\"\nmode = \"tiered\"\nttl = {{ explicit = \"1h\" }}\ntier1_ttl = \"10m\"\npeak_rate = 100\nfp_rate = 0.001\nfail_mode = \"closed\"\n",
        telemetry_topics.input, telemetry_topics.clean, telemetry_topics.audit
    );
    let mut gate = Gate::start(TEST, &config);

    let rules = repo().join("deploy/prometheus/alerts.yml");
    let mut prometheus = Prometheus::start(&prometheus_config(&metrics, &rules));

    let mut outputs = bank_topics.outputs();
    outputs.extend(telemetry_topics.outputs());
    let mut reader = Reader::new(&brokers, &outputs);
    reader.read_every_input(
        bank_plan.len() + telemetry_plan.len(),
        BOUND,
        "of both streams",
        || gate.assert_alive(),
    );
    say(
        TEST,
        format!("every input decided at {:?}", began.elapsed()),
    );

    // What Prometheus scraped must be what reached Kafka, decision by
    // decision; every other decision is there at zero.
    let mut expected: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    expected.insert("bank".into(), decisions(&reader, &bank_topics));
    expected.insert("telemetry".into(), decisions(&reader, &telemetry_topics));
    wait_for(
        "prometheus to hold the outputs' decision counts",
        BOUND,
        || {
            gate.assert_alive();
            prometheus.assert_alive();
            let mut complaints = Vec::new();
            for (stream, want) in &expected {
                let got = prometheus.by_label(
                &format!(
                    "sum by (decision) (idemgate_records_total{{job=\"idemgate\",stream=\"{stream}\"}})"
                ),
                "decision",
            );
                let nonzero: BTreeMap<String, f64> =
                    got.into_iter().filter(|(_, v)| *v != 0.0).collect();
                if &nonzero != want {
                    complaints.push(format!("{stream}: scraped {nonzero:?}, outputs {want:?}"));
                }
            }
            (!complaints.is_empty()).then(|| complaints.join("; "))
        },
    );
    // Several scrapes, every one of them up since the gateway served.
    wait_for("several successful scrapes", BOUND, || {
        let ups = prometheus.by_label("sum_over_time(up{job=\"idemgate\"}[5m])", "instance");
        match ups.get(metrics.as_str()) {
            Some(up) if *up >= 5.0 => None,
            other => Some(format!(
                "successful scrapes of {metrics}: {other:?} ({ups:?})"
            )),
        }
    });
    say(TEST, format!("counts scraped at {:?}", began.elapsed()));

    // What /metrics serves is the catalog (which docs/monitoring.md's table
    // is held to), type for type, including the series nothing has
    // incremented (they start at zero).
    let (status, text) =
        http_get(metrics.parse().expect("metrics address"), "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "/metrics answered {status}");
    let served: BTreeMap<String, String> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            Some((words.next()?.to_string(), words.next()?.to_string()))
        })
        .collect();
    let declared: BTreeMap<String, String> = idemgate::metrics::CATALOG
        .iter()
        .map(|m| (m.name.to_string(), m.kind.as_str().to_string()))
        .collect();
    assert_eq!(
        served, declared,
        "/metrics and idemgate::metrics::CATALOG differ"
    );

    // Every panel's query answers with at least one series, with the
    // dashboard's variables at "All" and at this gateway with both its
    // streams picked, as Grafana writes each into the query.
    let mut empty = Vec::new();
    let exprs = dashboard_exprs();
    let both = "(bank|telemetry)";
    for (instance, stream) in [(".*", ".*"), (metrics.as_str(), both)] {
        for (panel, ref_id, expr) in &exprs {
            let expr = narrowed(expr, instance, stream);
            let result = prometheus.query(&expr);
            say(
                TEST,
                format!("{panel} / {ref_id}: {} series  {expr}", result.len()),
            );
            if result.is_empty() {
                empty.push(format!("{panel} / {ref_id}: {expr}"));
            }
        }
    }
    // The process metrics are this gateway's: it started during the test,
    // holds some memory and some file descriptors under its limit.
    let process = |name: &str| -> f64 {
        let got = prometheus.by_label(&format!("{name}{{job=\"idemgate\"}}"), "instance");
        *got.get(metrics.as_str())
            .unwrap_or_else(|| panic!("{name} of {metrics}: {got:?}"))
    };
    let wall = |at: std::time::SystemTime| {
        at.duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64()
    };
    let started = process("process_start_time_seconds");
    let now = wall(std::time::SystemTime::now());
    assert!(
        started >= now - began.elapsed().as_secs_f64() - 2.0 && started <= now,
        "process_start_time_seconds {started}, test began {}s before {now}",
        began.elapsed().as_secs()
    );
    assert!(process("process_resident_memory_bytes") > 1e6);
    assert!(process("process_virtual_memory_bytes") >= process("process_resident_memory_bytes"));
    let (open, max) = (process("process_open_fds"), process("process_max_fds"));
    assert!(open >= 3.0 && open < max, "open fds {open}, limit {max}");
    assert!(process("process_threads") >= 2.0);
    assert!(process("process_cpu_seconds_total") >= 0.0);

    // And the variables narrow: another instance leaves every panel empty
    // (but for a count's explicit zero), another stream every panel over
    // a stream's series.
    for (panel, ref_id, expr) in &exprs {
        let elsewhere = narrowed(expr, "10.9.9.9:9464", both);
        let other_stream = narrowed(expr, metrics.as_str(), "nope");
        for (what, narrowed, expect_empty) in [
            ("another instance", elsewhere, !expr.contains("vector(0)")),
            ("another stream", other_stream, expr.contains("$stream")),
        ] {
            let result = prometheus.query(&narrowed);
            if expect_empty {
                assert!(
                    result.is_empty(),
                    "{panel} / {ref_id} with {what}: {} series from {narrowed}",
                    result.len()
                );
            }
        }
    }

    // Every alert of alerts.yml loaded, evaluated without error, and quiet
    // on a healthy gateway.
    let alerts = alert_names(&rules);
    let mut rules_seen: BTreeMap<String, (String, String, String)> = BTreeMap::new();
    wait_for(
        "every alerting rule evaluated",
        Duration::from_secs(30),
        || {
            rules_seen.clear();
            let data = prometheus.api("/api/v1/rules?type=alert");
            for group in data["groups"].as_array().into_iter().flatten() {
                for rule in group["rules"].as_array().into_iter().flatten() {
                    rules_seen.insert(
                        rule["name"].as_str().unwrap_or_default().to_string(),
                        (
                            group["name"].as_str().unwrap_or_default().to_string(),
                            rule["health"].as_str().unwrap_or_default().to_string(),
                            rule["state"].as_str().unwrap_or_default().to_string(),
                        ),
                    );
                }
            }
            let unknown: Vec<&String> = rules_seen
                .iter()
                .filter(|(_, (_, health, _))| health == "unknown")
                .map(|(name, _)| name)
                .collect();
            (!unknown.is_empty()).then(|| format!("not yet evaluated: {unknown:?}"))
        },
    );
    let loaded: BTreeSet<String> = rules_seen.keys().cloned().collect();
    assert_eq!(loaded, alerts, "/api/v1/rules against alerts.yml");
    for (name, (group, health, state)) in &rules_seen {
        assert_eq!(group, "idemgate", "{name} in group {group}");
        assert_eq!(health, "ok", "{name}: health {health}");
        assert_ne!(state, "firing", "{name} fires on a healthy gateway");
    }

    if !empty.is_empty() {
        let names = prometheus.api("/api/v1/label/__name__/values");
        let ours: Vec<&str> = names
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|name| name.starts_with("idemgate_") || name.starts_with("process_"))
            .collect();
        panic!(
            "{} of {} dashboard exprs returned no series:\n{}\nthe metrics Prometheus has scraped: {}",
            empty.len(),
            exprs.len(),
            empty.join("\n"),
            ours.join(" ")
        );
    }
    let status = gate.terminate(Duration::from_secs(20));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(TEST, format!("took {:?}", began.elapsed()));
}
