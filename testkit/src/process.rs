//! A child process with its log file, as a guard: dropping it kills the
//! process, and if the test is failing, prints the log's tail first (the
//! gateways, Prometheus). Its log is the evidence a failing test needs.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub struct Logged {
    /// Shown in panics and log tails.
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Logged {
    /// Spawns `command` with stdout and stderr in `log` (stdin closed).
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> Logged {
        let out = File::create(log).expect("creating the log");
        let err = out.try_clone().expect("log handle");
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("[{name}] spawning {command:?}: {e}"));
        Logged {
            name: name.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().expect("try_wait")
    }

    /// Panics (with the log tail) if the process has exited.
    pub fn assert_alive(&mut self) {
        let child = self.child.as_mut().expect("running");
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!(
                "[{}] exited unexpectedly ({status}); log tail:\n{}",
                self.name,
                self.tail(40)
            );
        }
    }

    /// Waits up to `bound` for the process to exit (after a signal).
    pub fn wait_exit(&mut self, bound: Duration) -> ExitStatus {
        let until = Instant::now() + bound;
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            if Instant::now() >= until {
                panic!(
                    "[{}] did not exit within {bound:?}; log tail:\n{}",
                    self.name,
                    self.tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no shutdown, nothing flushed.
    pub fn kill(&mut self) {
        self.assert_alive();
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "[{}] log tail ({}):\n{}",
                self.name,
                self.log.display(),
                self.tail(60)
            );
        }
    }
}

/// The sum of every series of metric `name` that a `/metrics` endpoint at
/// `addr` (`host:port`) serves now (0 when it serves none), by a plain
/// HTTP/1.0 GET: no client dependency for one request.
pub fn scrape_metric(addr: &str, name: &str) -> f64 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)
        .unwrap_or_else(|e| panic!("connecting to /metrics at {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    // One write: the gateway answers after its first read.
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("GET /metrics");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("reading /metrics");
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
