//! Processes the end-to-end tests run: the built `idemgate` binary, and a
//! redis-server of the test's own for the outage tests. Both are guards:
//! dropping one kills its process, so a failed assertion leaves nothing
//! running; on a panic the gateway's log tail is printed first.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::kafka::{brokers, Topics};
use crate::support::unique;

/// Sends a signal by name (`TERM`, `KILL`, `STOP`, `CONT`) with kill(1): no
/// new dependency for a syscall.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -{name} {pid} failed: {status}");
}

/// What one gateway process is told, as the TOML file `idemgate run` reads.
pub struct GateConfig {
    pub brokers: String,
    pub group: String,
    pub input: String,
    pub clean: String,
    pub audit: String,
    pub redis_url: String,
    pub key_prefix: String,
    /// `closed` or `open`.
    pub fail_mode: &'static str,
    pub lease: &'static str,
    pub max_records: usize,
    /// Further librdkafka properties for `[kafka]`.
    pub kafka: Vec<(&'static str, String)>,
}

impl GateConfig {
    /// A bank-txn stream in exact mode over `topics`, with its own group and
    /// key prefix.
    pub fn new(test: &str, topics: &Topics, redis_url: String) -> GateConfig {
        GateConfig {
            brokers: brokers(),
            group: unique(&format!("{test}-group")),
            input: topics.input.clone(),
            clean: topics.clean.clone(),
            audit: topics.audit.clone(),
            redis_url,
            key_prefix: format!("{}:", unique(test)),
            fail_mode: "closed",
            lease: "30s",
            max_records: 200,
            // Tansu holds a new group's first JoinGroup for half the session
            // timeout (23s at librdkafka's default 45s; 3s at 6s), and a
            // killed member's partitions move on after the full timeout.
            kafka: vec![
                ("session.timeout.ms", "6000".into()),
                ("heartbeat.interval.ms", "500".into()),
            ],
        }
    }

    pub fn toml(&self) -> String {
        let mut kafka = format!(
            "\"bootstrap.servers\" = \"{}\"\n\"group.id\" = \"{}\"\n\"auto.offset.reset\" = \"earliest\"\n",
            self.brokers, self.group
        );
        for (key, value) in &self.kafka {
            kafka.push_str(&format!("\"{key}\" = \"{value}\"\n"));
        }
        format!(
            r#"[kafka]
{kafka}
[store]
kind = "redis"
url = "{url}"
key_prefix = "{prefix}"

[metrics]
listen = "127.0.0.1:0"

[batch]
max_records = {max_records}
linger = "20ms"

[[streams]]
name = "bank"
inputs = ["{input}"]
clean = "{clean}"
audit = "{audit}"
profile = "bank-txn"
mode = "exact"
ttl = {{ explicit = "1h" }}
lease = "{lease}"
fail_mode = "{fail_mode}"
"#,
            url = self.redis_url,
            prefix = self.key_prefix,
            max_records = self.max_records,
            input = self.input,
            clean = self.clean,
            audit = self.audit,
            lease = self.lease,
            fail_mode = self.fail_mode,
        )
    }
}

/// One `idemgate run` process, its config file and its log (stdout and
/// stderr, `RUST_LOG=info`).
pub struct Gate {
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
    config: PathBuf,
}

impl Gate {
    pub fn start(name: &str, config: &GateConfig) -> Gate {
        let stem = unique(name);
        let dir = std::env::temp_dir();
        let config_path = dir.join(format!("idemgate-e2e-{stem}.toml"));
        let log = dir.join(format!("idemgate-e2e-{stem}.log"));
        std::fs::write(&config_path, config.toml()).expect("writing the config");
        let out = File::create(&log).expect("creating the log");
        let err = out.try_clone().expect("log handle");
        let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .env(
                "RUST_LOG",
                std::env::var("IDEMGATE_E2E_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("NO_COLOR", "1")
            // The config file says everything; overrides from the test
            // runner's environment would silently point elsewhere.
            .env_remove("IDEMGATE_KAFKA_BROKERS")
            .env_remove("IDEMGATE_REDIS_URL")
            .env_remove("IDEMGATE_REDIS_NODES")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawning idemgate");
        println!(
            "[{name}] idemgate pid {} config {} log {}",
            child.id(),
            config_path.display(),
            log.display()
        );
        Gate {
            name: name.to_string(),
            child: Some(child),
            log,
            config: config_path,
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

    /// Panics (with the log tail) if the process has exited.
    pub fn assert_alive(&mut self) {
        let child = self.child.as_mut().expect("running");
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!(
                "[{}] idemgate exited unexpectedly ({status}); log tail:\n{}",
                self.name,
                self.tail(40)
            );
        }
    }

    /// The partition count of the last `assigned` line in the log, if any.
    pub fn assigned(&self) -> Option<usize> {
        self.log_text()
            .lines()
            .filter_map(|line| line.split(": assigned partitions=").nth(1))
            .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
            .next_back()
    }

    /// Waits (bounded) until the log's last assignment gives this process
    /// at least one partition.
    pub fn wait_assigned(&mut self, bound: Duration) {
        let until = Instant::now() + bound;
        while self.assigned().unwrap_or(0) == 0 {
            self.assert_alive();
            assert!(
                Instant::now() < until,
                "[{}] no partitions assigned within {bound:?}; log tail:\n{}",
                self.name,
                self.tail(40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then waits up to `bound` for the exit.
    pub fn terminate(&mut self, bound: Duration) -> ExitStatus {
        self.assert_alive();
        signal(self.pid(), "TERM");
        let until = Instant::now() + bound;
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            if Instant::now() >= until {
                panic!(
                    "[{}] idemgate did not exit within {bound:?} of SIGTERM; log tail:\n{}",
                    self.name,
                    self.tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL as soon as the log grows: the gateway logs suppressed
    /// records right after their delivery and before it finalizes claims
    /// and commits offsets, so this aims the kill at the window whose work
    /// must be replayed. Falls back to a plain kill after `bound`.
    pub fn kill_after_next_log_line(&mut self, bound: Duration) -> bool {
        let size = || std::fs::metadata(&self.log).map_or(0, |m| m.len());
        let before = size();
        let until = Instant::now() + bound;
        let mut grew = false;
        while Instant::now() < until {
            if size() > before {
                grew = true;
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        self.kill();
        grew
    }

    /// SIGKILL: no shutdown, no final commit, claims left as they were.
    pub fn kill(&mut self) {
        self.assert_alive();
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "[{}] idemgate log tail ({}):\n{}",
                self.name,
                self.log.display(),
                self.tail(60)
            );
        } else if std::env::var_os("IDEMGATE_E2E_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_file(&self.config);
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// A redis-server of the test's own, on a free port, so it can be stopped
/// without touching the shared one. It persists only when told to
/// (`SHUTDOWN SAVE`), into its own directory, and restarts from that dump on
/// the same port.
pub struct OwnRedis {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    frozen: bool,
}

impl OwnRedis {
    pub fn start(name: &str) -> OwnRedis {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("idemgate-e2e-redis-{}", unique(name)));
        std::fs::create_dir_all(&dir).expect("redis dir");
        let mut redis = OwnRedis {
            port,
            dir,
            child: None,
            frozen: false,
        };
        redis.spawn();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("redis.log"))
            .expect("redis log");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--dbfilename", "dump.rdb"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("spawning redis-server (is it on PATH?)");
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if self.ping() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().expect("try_wait"))
            {
                panic!(
                    "redis-server on {} exited at start ({status}): {}",
                    self.port,
                    std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < until,
                "redis-server on {} did not answer within 20s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        client.get_connection_with_timeout(Duration::from_secs(2))
    }

    fn ping(&self) -> bool {
        self.connection()
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// `SHUTDOWN SAVE`: the server writes its dump and exits, as in a
    /// planned restart; clients see refused connections until `restart`.
    pub fn shutdown_save(&mut self) {
        let mut connection = self.connection().expect("redis connection");
        // The server closes the connection instead of answering.
        let _ = redis::cmd("SHUTDOWN")
            .arg("SAVE")
            .query::<()>(&mut connection);
        let mut child = self.child.take().expect("running");
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if child.try_wait().expect("try_wait").is_some() {
                break;
            }
            assert!(
                Instant::now() < until,
                "redis-server did not exit on SHUTDOWN SAVE"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            self.dir.join("dump.rdb").exists(),
            "SHUTDOWN SAVE left no dump.rdb"
        );
    }

    /// Starts the server again on the same port; it loads the dump.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart of a running redis-server");
        self.spawn();
    }

    /// SIGSTOP: the server keeps its sockets but answers nothing, as when it
    /// hangs or the network drops packets.
    pub fn freeze(&mut self) {
        signal(self.child.as_ref().expect("running").id(), "STOP");
        self.frozen = true;
    }

    pub fn thaw(&mut self) {
        signal(self.child.as_ref().expect("running").id(), "CONT");
        self.frozen = false;
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.frozen {
                let _ = Command::new("kill")
                    .arg("-CONT")
                    .arg(child.id().to_string())
                    .status();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Every key under `prefix`, by SCAN (never KEYS on a shared server).
/// Claim keys end in raw hash bytes, hence bytes.
fn scan(connection: &mut redis::Connection, prefix: &str) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query(connection)
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

/// The remaining lifetime (ms) of every key under `prefix`, after
/// asserting each one expires (DESIGN.md §4: a key without expiry is a
/// bug). A key that expired between SCAN and PTTL is left out.
pub fn key_ttls(url: &str, prefix: &str) -> Vec<i64> {
    let client = redis::Client::open(url).expect("redis url");
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("redis connection");
    let mut ttls = Vec::new();
    for key in scan(&mut connection, prefix) {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query(&mut connection)
            .expect("PTTL");
        assert!(
            ttl > 0 || ttl == -2,
            "key {} has PTTL {ttl}: every claim must expire",
            String::from_utf8_lossy(&key)
        );
        if ttl > 0 {
            ttls.push(ttl);
        }
    }
    ttls
}

/// A port nothing listens on right now (the OS's pick, released).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// A line for the test's output, flushed at once (tests run in parallel).
pub fn say(test: &str, line: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "[{test}] {line}");
    let _ = out.flush();
}
