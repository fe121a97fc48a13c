//! Where the CPU goes, measured with `perf` (Linux): a sampling profile of
//! the replica, the Kafka broker (a JVM: its JIT-compiled code shows
//! without symbols) and redis-server over one timed run from its first
//! store round, flat (no call graphs: release builds have no frame
//! pointers), folded per process into the components an operator can act
//! on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use tokio::process::{Child, Command};

pub(crate) struct Recorder {
    child: Child,
    data: PathBuf,
    log: PathBuf,
}

/// Per process: share of its samples by component, and its top symbols.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Profile {
    pub processes: Vec<ProcessProfile>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ProcessProfile {
    pub role: String,
    pub samples: u64,
    /// Component -> percent of this process's samples.
    pub components: Vec<(String, f64)>,
    /// (percent, thread, symbol)
    pub top: Vec<(f64, String, String)>,
}

/// How long perf gets to start before it counts as recording, and how
/// often it is started again when it exits in that time.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);
const ATTEMPTS: usize = 3;

impl Recorder {
    /// Starts `perf record` on `pids`, once it is past its start-up: perf
    /// attaches to every thread of every pid, and a thread that ends while
    /// it does (a replica's start-up makes and ends threads) can make it
    /// exit at once with status 255 and nothing in its log. Such a start
    /// is tried again; one that keeps failing is an error, never an empty
    /// profile.
    pub async fn start(dir: &Path, name: &str, pids: &[u32]) -> Result<Recorder> {
        let data = dir.join(format!("{name}.perf.data"));
        let log = dir.join(format!("{name}.perf.log"));
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        for attempt in 1..=ATTEMPTS {
            let mut child = Command::new("perf")
                .args(["record", "-F", "999", "-o"])
                .arg(&data)
                .args(["-p", &pids.join(",")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .kill_on_drop(true)
                .spawn()
                .context("starting perf record (is perf installed?)")?;
            // Waits on perf, not on a broker or Redis: perf gives no sign
            // that it has attached, so one that is still there after
            // SETTLE counts as recording (`finish` checks it did).
            tokio::time::sleep(SETTLE).await;
            match child.try_wait()? {
                None => return Ok(Recorder { child, data, log }),
                Some(status) => eprintln!(
                    "perf record exited at its start ({status}, attempt {attempt} of {ATTEMPTS}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default().trim()
                ),
            }
        }
        bail!(
            "perf record exited at its start {ATTEMPTS} times (its log: {})",
            log.display()
        )
    }

    /// Stops the recording (SIGINT, as perf expects) and reads it back; a
    /// perf that stopped by itself, or a process without a sample, is an
    /// error.
    pub async fn finish(mut self, roles: &[(u32, String)]) -> Result<Profile> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "perf record stopped during the run ({status}; its log: {})",
                self.log.display()
            );
        }
        let pid = self.child.id().context("perf without a pid")?;
        let status = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .await?;
        if !status.success() {
            bail!("could not stop perf record");
        }
        self.child.wait().await?;
        let mut processes = Vec::new();
        for (pid, role) in roles {
            let output = Command::new("perf")
                .args(["report", "-i"])
                .arg(&self.data)
                .args(["--stdio", "--no-children", "-n", "--sort", "comm,dso,sym"])
                .args(["--pid", &pid.to_string()])
                .stderr(Stdio::null())
                .output()
                .await?;
            processes.push(parse(role, &String::from_utf8_lossy(&output.stdout)));
        }
        if let Some(empty) = processes.iter().find(|p| p.samples == 0) {
            bail!(
                "perf recorded no sample of the {} (its log: {})",
                empty.role,
                self.log.display()
            );
        }
        // Two replicas are one role: keep the first of each.
        let mut seen = std::collections::HashSet::new();
        processes.retain(|p| seen.insert(p.role.clone()));
        Ok(Profile { processes })
    }
}

/// Reads `perf report --stdio -n --sort comm,dso,sym` lines:
/// `    12.34%   567  rdk:broker1  idemgate  [.] rd_kafka_...`; shares are
/// of this process's samples (the sample counts), not of the recording's.
fn parse(role: &str, text: &str) -> ProcessProfile {
    let mut rows: Vec<(u64, String, String, String)> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(percent), Some(samples)) = (words.next(), words.next()) else {
            continue;
        };
        let (true, Ok(samples)) = (percent.ends_with('%'), samples.parse::<u64>()) else {
            continue;
        };
        // comm and dso are single words; the symbol follows "[.]" or "[k]".
        let thread = words.next().unwrap_or_default().to_string();
        let dso = words.next().unwrap_or_default().to_string();
        let symbol = ["[.] ", "[k] "]
            .iter()
            .find_map(|marker| line.split_once(marker))
            .map(|(_, s)| s.trim().to_string())
            .unwrap_or_default();
        rows.push((samples, thread, dso, symbol));
    }
    let total: u64 = rows.iter().map(|r| r.0).sum();
    let share = |samples: u64| samples as f64 * 100.0 / total.max(1) as f64;
    let mut components: BTreeMap<String, f64> = BTreeMap::new();
    for (samples, thread, dso, symbol) in &rows {
        *components
            .entry(component(role, thread, dso, symbol))
            .or_default() += share(*samples);
    }
    let mut components: Vec<(String, f64)> = components.into_iter().collect();
    components.sort_by(|a, b| b.1.total_cmp(&a.1));
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    ProcessProfile {
        role: role.to_string(),
        samples: total,
        components,
        top: rows
            .iter()
            .take(15)
            .map(|(samples, thread, _, symbol)| (share(*samples), thread.clone(), shorten(symbol)))
            .collect(),
    }
}

/// Rust symbols are long paths with generics; keep the readable head.
fn shorten(symbol: &str) -> String {
    let mut out: String = symbol.chars().take(90).collect();
    if symbol.chars().count() > 90 {
        out.push('…');
    }
    out
}

/// Folds a sample into what it was doing.
fn component(role: &str, thread: &str, dso: &str, symbol: &str) -> String {
    let kernel = dso.contains("kernel") || dso.starts_with("[k");
    if role != "worker" {
        return if kernel {
            "kernel (network, syscalls)".into()
        } else {
            "user space".into()
        };
    }
    let s = symbol;
    let has = |parts: &[&str]| parts.iter().any(|p| s.contains(p));
    let name = if kernel {
        "kernel (network, syscalls, scheduling)"
    } else if thread.starts_with("rdk:")
        || thread.starts_with("producer poll")
        || has(&["rd_kafka", "rdkafka::", "crc32"])
        || s.starts_with("rd_")
    {
        "librdkafka and its Rust wrapper"
    } else if has(&[
        "fingerprint",
        "canonical",
        "normalise",
        "serde_json",
        "rust_decimal",
        "sha2",
        "time::",
    ]) {
        "fingerprint (JSON parse, canonical form, SHA-256)"
    } else if has(&[
        "BTreeMap",
        "btree",
        "HashMap",
        "hashbrown",
        "core::hash",
        "from_utf8",
    ]) {
        "idemgate loop (records, outputs, claims)"
    } else if has(&[
        "alloc",
        "free",
        "memcpy",
        "memmove",
        "memset",
        "memcmp",
        "drop_in_place",
    ]) || s.starts_with("unlink_chunk")
    {
        "allocation and copies"
    } else if has(&["core::fmt", "alloc::fmt", "hex::", "tracing", "metrics"]) {
        "formatting, logs and metrics"
    } else if has(&["redis::", "combine::"]) {
        "redis client"
    } else if has(&[
        "tokio::",
        "futures_",
        "mio::",
        "parking_lot",
        "clock_gettime",
    ]) {
        "tokio, futures, clocks"
    } else if has(&["idemgate::"]) {
        "idemgate loop (records, outputs, claims)"
    } else {
        "other"
    };
    name.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_fold_into_components() {
        let text = "# Samples: 12K of event 'cpu-clock'\n\
            #\n\
            \x20   4.00%   40  rdk:broker1      idemgate           [.] rd_kafka_transport_io_serve\n\
            \x20   5.00%   50  tokio-runtime-w  [kernel.kallsyms]  [k] tcp_sendmsg\n\
            \x20   1.00%   10  tokio-runtime-w  idemgate           [.] sha2::sha256::soft::compress\n";
        let profile = parse("worker", text);
        assert_eq!(profile.samples, 100);
        assert_eq!(profile.top.len(), 3);
        assert_eq!(profile.top[0].0, 50.0);
        assert_eq!(
            profile.components[1],
            ("librdkafka and its Rust wrapper".to_string(), 40.0)
        );
        assert!(profile
            .components
            .iter()
            .any(|(c, p)| c.starts_with("fingerprint") && *p == 10.0));
    }
}
