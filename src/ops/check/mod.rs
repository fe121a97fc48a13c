//! `idemgate check`: everything `run` would refuse, found before a replica
//! starts. The config is loaded exactly as `run` loads it (`${VAR}`,
//! environment overrides, every rule), the metrics address is bound and
//! released, and, unless offline, the brokers and the store are asked what
//! `run` depends on. Each finding is `ok`, `warn` (works, but look) or
//! `FAIL` (`run` would refuse or stall), naming the field or the server.

pub(crate) mod kafka;
mod postgres;
mod redis;
pub(crate) mod txn;

use std::fmt::Write;
use std::path::Path;

use crate::config::{Config, StoreConfig};
use crate::ops::plan::text as plan_text;
use crate::ops::plan::{for_stream, ClaimsIn, PlanMode, StreamPlan};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Works, but an operator should know (an output topic the first
    /// record will create, a policy the server will not tell).
    Warn,
    /// `run` would refuse to start, or would start and stall.
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One finding: what was checked (a config field, a topic, a server) and
/// what was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub status: Status,
    pub subject: String,
    pub detail: String,
}

impl Finding {
    pub(crate) fn ok(subject: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding::new(Status::Ok, subject, detail)
    }
    pub(crate) fn warn(subject: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding::new(Status::Warn, subject, detail)
    }
    pub(crate) fn fail(subject: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding::new(Status::Fail, subject, detail)
    }
    fn new(status: Status, subject: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding {
            status,
            subject: subject.into(),
            detail: detail.into(),
        }
    }
}

/// Every finding, and each stream's derived TTLs and memory plan.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    pub findings: Vec<Finding>,
    pub streams: Vec<StreamPlan>,
    /// Whether the brokers and the store were left alone.
    pub offline: bool,
}

impl CheckReport {
    pub fn failures(&self) -> usize {
        self.count(Status::Fail)
    }

    fn count(&self, status: Status) -> usize {
        self.findings.iter().filter(|f| f.status == status).count()
    }

    /// The findings, one a line, then the streams, then the tally.
    pub fn text(&self) -> String {
        let width = self
            .findings
            .iter()
            .map(|f| f.subject.len())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for finding in &self.findings {
            let _ = writeln!(
                out,
                "{:<4}  {:<width$}  {}",
                finding.status.label(),
                finding.subject,
                finding.detail
            );
        }
        for stream in &self.streams {
            out.push('\n');
            out.push_str(&plan_text::stream(stream));
        }
        let _ = writeln!(
            out,
            "\n{} ok, {} warn, {} FAIL{}",
            self.count(Status::Ok),
            self.count(Status::Warn),
            self.failures(),
            if self.offline {
                " (offline: brokers and store not contacted)"
            } else {
                ""
            }
        );
        out
    }
}

/// Checks the config at `path` and, unless `offline`, the servers it
/// names. Never fails itself: every problem is a finding.
pub async fn check(path: &Path, offline: bool) -> CheckReport {
    let mut report = CheckReport {
        offline,
        ..CheckReport::default()
    };
    let config = match Config::load(path) {
        Ok(config) => config,
        Err(error) => {
            report
                .findings
                .push(Finding::fail("config", error.to_string()));
            return report;
        }
    };
    report.findings.extend(offline_findings(path, &config));
    for (index, stream) in config.streams.iter().enumerate() {
        match for_stream(stream, ClaimsIn::of(&config.store), None, PlanMode::Both) {
            Ok(plan) => report.streams.push(plan),
            Err(error) => report.findings.push(Finding::fail(
                format!("streams[{index}]"),
                error.to_string(),
            )),
        }
    }
    if offline {
        return report;
    }
    let for_kafka = config.clone();
    let probed = tokio::task::spawn_blocking(move || {
        let mut findings = kafka::probe(&for_kafka);
        findings.extend(txn::probe(&for_kafka));
        findings
    });
    match probed.await {
        Ok(findings) => report.findings.extend(findings),
        Err(error) => report.findings.push(Finding::fail(
            "kafka",
            format!("the check itself failed: {error}"),
        )),
    }
    report.findings.extend(store(&config).await);
    report
}

/// The store's findings, from the backend's own module.
async fn store(config: &Config) -> Vec<Finding> {
    match &config.store {
        StoreConfig::Memory { .. } => vec![Finding::warn(
            "store",
            "memory: claims live in this one process and die with it (one replica only); nothing to reach",
        )],
        StoreConfig::Redis(options) => redis::probe(config, options).await,
        StoreConfig::Postgres(options) => postgres::probe(config, options).await,
    }
}

/// What needs no server: the config as loaded, and the metrics address.
fn offline_findings(path: &Path, config: &Config) -> Vec<Finding> {
    let store = format!("{} {}", config.store.kind(), config.store.target());
    let store = store.trim_end();
    let streams: Vec<&str> = config
        .streams
        .iter()
        .map(|s| s.spec.name.as_str())
        .collect();
    let mut findings = vec![Finding::ok(
        "config",
        format!(
            "{}: valid; streams {}; store {store}",
            path.display(),
            streams.join(", ")
        ),
    )];
    if let Some(brokers) = config.brokers() {
        findings.push(Finding::ok("kafka.bootstrap.servers", brokers));
    }
    for (index, stream) in config.streams.iter().enumerate() {
        if stream.shadow {
            findings.push(Finding::warn(
                format!("streams[{index}].shadow"),
                format!(
                    "{}: shadow mode: every record goes to {} with its decision, nothing is suppressed",
                    stream.spec.name, stream.clean
                ),
            ));
        }
    }
    findings.push(listen(&config.metrics_listen));
    findings
}

/// Binds the metrics address and lets it go, as `run` would bind it.
pub(crate) fn listen(address: &str) -> Finding {
    const FIELD: &str = "metrics.listen";
    match std::net::TcpListener::bind(address) {
        Ok(listener) => {
            let bound = listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| address.to_string());
            drop(listener);
            Finding::ok(FIELD, format!("{address} binds ({bound}; released)"))
        }
        Err(error) => Finding::fail(FIELD, format!("cannot listen on {address}: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metrics_address_in_use_fails_and_a_free_one_binds() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = taken.local_addr().unwrap().to_string();
        let finding = listen(&address);
        assert_eq!(finding.status, Status::Fail, "{finding:?}");
        assert_eq!(finding.subject, "metrics.listen");
        drop(taken);
        assert_eq!(listen(&address).status, Status::Ok);
        assert_eq!(listen("not-an-address").status, Status::Fail);
    }

    #[test]
    fn the_report_counts_failures_and_says_when_it_stayed_offline() {
        let report = CheckReport {
            findings: vec![
                Finding::ok("config", "valid"),
                Finding::fail("streams[0].inputs", "raw.bank: not on the brokers"),
            ],
            streams: Vec::new(),
            offline: true,
        };
        assert_eq!(report.failures(), 1);
        let text = report.text();
        assert!(text.contains("FAIL  streams[0].inputs  raw.bank"), "{text}");
        assert!(text.contains("1 ok, 0 warn, 1 FAIL (offline"), "{text}");
    }
}
