//! What the soak owns and breaks: a Tansu broker it can restart (on S3
//! storage served by a local moto server, so the log outlives the broker; or
//! in memory, where a restart would lose the log and is not done), a
//! redis-server it can freeze and restart (from its own `SHUTDOWN SAVE`
//! dump), and the gateway replicas as child processes it kills, terminates
//! and starts again. Every process is a guard: dropping it kills it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use idemgate_testkit::process::Logged;
use idemgate_testkit::servers::{free_port, signal, version_line};

/// Where the broker keeps its log.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) enum Storage {
    /// `memory://`: a restart loses every topic and offset.
    Memory,
    /// `s3://tansu/` on a moto server of the soak's own.
    S3,
}

/// The soak's Tansu broker, on a fixed port so it can be restarted where
/// clients expect it.
pub(crate) struct Broker {
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    pub storage: Storage,
    /// The moto server holding the bucket (S3 storage); outlives restarts,
    /// and goes with the broker.
    _moto: Option<Logged>,
    moto_url: Option<String>,
    child: Option<Logged>,
    starts: u32,
    pub brokers: String,
    pub version: String,
}

impl Broker {
    /// Starts Tansu; with `moto` (the `moto_server` binary) on S3 storage.
    pub fn start(binary: &Path, moto: Option<&Path>, dir: &Path) -> Result<Broker> {
        let version = version_line(binary, "--version")?;
        let port = free_port();
        let (moto, moto_url, storage) = match moto {
            Some(moto_bin) => {
                let (server, url) = start_moto(moto_bin, dir)?;
                (Some(server), Some(url), Storage::S3)
            }
            None => (None, None, Storage::Memory),
        };
        let mut broker = Broker {
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            port,
            storage,
            _moto: moto,
            moto_url,
            child: None,
            starts: 0,
            brokers: format!("127.0.0.1:{port}"),
            version,
        };
        broker.spawn()?;
        Ok(broker)
    }

    fn spawn(&mut self) -> Result<()> {
        self.starts += 1;
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let work = self.dir.join("tansu");
        std::fs::create_dir_all(&work)?;
        let mut command = Command::new(&self.binary);
        command
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .env_remove("SCHEMA_REGISTRY")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .current_dir(&work);
        match &self.moto_url {
            Some(endpoint) => {
                command
                    .args(["--storage-engine", "s3://tansu/"])
                    .env("AWS_ENDPOINT", endpoint)
                    .env("AWS_ALLOW_HTTP", "true")
                    .env("AWS_ACCESS_KEY_ID", "soak")
                    .env("AWS_SECRET_ACCESS_KEY", "soak")
                    .env("AWS_DEFAULT_REGION", "us-east-1");
            }
            None => {
                command.args(["--storage-engine", "memory://tansu/"]);
            }
        }
        let log = self.dir.join(format!("tansu-{}.log", self.starts));
        let mut child = Logged::spawn("tansu", command, &log);
        let admin = idemgate_testkit::kafka::admin(&self.brokers);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            child.assert_alive();
            if admin
                .inner()
                .fetch_metadata(None, Duration::from_millis(500))
                .is_ok()
            {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("tansu on {} did not answer within 30s", self.brokers);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then (after 10 s) SIGKILL; starts it again on the same
    /// port and storage. Returns how long clients had no broker.
    pub fn restart(&mut self) -> Result<Duration> {
        if self.storage == Storage::Memory {
            bail!("a memory-storage broker would lose its log on restart");
        }
        let started = Instant::now();
        let mut child = self.child.take().context("broker not running")?;
        signal(child.pid(), "TERM");
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if Instant::now() > until {
                child.kill();
                break;
            }
            if std::fs::metadata(format!("/proc/{}", child.pid())).is_err()
                || is_zombie(child.pid())
            {
                child.wait_exit(Duration::from_secs(5));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.spawn()?;
        Ok(started.elapsed())
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// Starts `moto_server` on a spare port and makes the bucket `tansu`.
fn start_moto(binary: &Path, dir: &Path) -> Result<(Logged, String)> {
    let port = free_port();
    let mut command = Command::new(binary);
    command.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
    let mut server = Logged::spawn("moto", command, &dir.join("moto.log"));
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        server.assert_alive();
        if let Ok(status) = http(port, "PUT /tansu") {
            if status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.0 200") {
                return Ok((server, url));
            }
            bail!("moto refused to create the bucket: {status}");
        }
        if Instant::now() > deadline {
            bail!("moto_server on {port} did not answer within 30s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One bodiless HTTP request; the status line.
fn http(port: u16, request_line: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let request =
        format!("{request_line} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    Ok(text.lines().next().unwrap_or_default().to_string())
}

/// The gateway replicas: `idemgate-bench soak-replica --config F`, which is
/// `idemgate run` (the same `Config::load` and `app::run` until SIGTERM).
pub(crate) struct Replicas {
    exe: PathBuf,
    dir: PathBuf,
    configs: Vec<PathBuf>,
    procs: Vec<Option<Logged>>,
    starts: Vec<u32>,
    /// Exits the soak did not cause, each with its log tail; each replica
    /// was started again.
    pub unexpected_exits: Vec<String>,
}

impl Replicas {
    pub fn start(exe: &Path, dir: &Path, configs: Vec<String>) -> Result<Replicas> {
        let mut paths = Vec::new();
        for (n, text) in configs.iter().enumerate() {
            let path = dir.join(format!("replica-{n}.toml"));
            std::fs::write(&path, text)?;
            paths.push(path);
        }
        let mut replicas = Replicas {
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            procs: paths.iter().map(|_| None).collect(),
            starts: vec![0; paths.len()],
            configs: paths,
            unexpected_exits: Vec::new(),
        };
        for n in 0..replicas.configs.len() {
            replicas.spawn(n);
        }
        Ok(replicas)
    }

    pub fn spawn(&mut self, n: usize) {
        self.starts[n] += 1;
        let mut command = Command::new(&self.exe);
        command
            .arg("soak-replica")
            .arg("--config")
            .arg(&self.configs[n])
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1");
        let log = self.dir.join(format!("replica-{n}.{}.log", self.starts[n]));
        self.procs[n] = Some(Logged::spawn(&format!("replica {n}"), command, &log));
    }

    /// Partitions the running replicas hold, by their logs: each one's last
    /// assignment, unless a revoke came after it.
    pub fn assigned(&self) -> usize {
        self.procs
            .iter()
            .flatten()
            .map(|process| {
                let text = process.log_text();
                let last = text
                    .lines()
                    .rev()
                    .find(|l| l.contains("poller: assigned") || l.contains("poller: revoked"));
                last.and_then(|l| l.split("assigned partitions=").nth(1))
                    .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// SIGKILL: nothing flushed, nothing committed.
    pub fn kill(&mut self, n: usize) {
        if let Some(mut process) = self.procs[n].take() {
            process.kill();
        }
    }

    /// SIGTERM and the wait for the exit (the replica finishes its batch,
    /// commits and leaves the group); how long it took and how it ended.
    pub fn terminate(&mut self, n: usize, bound: Duration) -> (Duration, String) {
        let started = Instant::now();
        match self.procs[n].take() {
            Some(mut process) => {
                signal(process.pid(), "TERM");
                let status = process.wait_exit(bound);
                (started.elapsed(), status.to_string())
            }
            None => (Duration::ZERO, "not running".into()),
        }
    }

    /// Starts again every replica that exited on its own, noting each.
    pub fn watch(&mut self, at: f64) {
        for n in 0..self.procs.len() {
            let exited = match self.procs[n].as_mut() {
                Some(process) => !alive(process),
                None => false,
            };
            if exited {
                let process = self.procs[n].take().expect("checked");
                self.unexpected_exits.push(format!(
                    "replica {n} exited on its own at +{at:.1}s; log {}:\n{}",
                    process.log.display(),
                    process.tail(8)
                ));
                self.spawn(n);
            }
        }
    }

    /// SIGTERM to all, waiting for each.
    pub fn stop_all(&mut self, bound: Duration) -> Vec<String> {
        (0..self.procs.len())
            .map(|n| {
                let (took, status) = self.terminate(n, bound);
                format!("replica {n}: {status} after {:.1}s", took.as_secs_f64())
            })
            .collect()
    }
}

/// Whether the process still runs (a zombie has exited).
fn alive(process: &mut Logged) -> bool {
    let pid = process.pid();
    !is_zombie(pid)
}
