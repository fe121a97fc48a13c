//! Servers a test or the bench owns, as guards: a redis-server and an
//! Apache Kafka broker on spare loopback ports, killed (the redis-server's
//! temporary directory removed) when dropped, so a failed assertion leaves
//! nothing running. Plus what
//! reading a shared Redis takes: SCAN, never KEYS, under a prefix.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::unique;

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

/// Where [`free_port`] walks: from here up to the kernel's ephemeral range.
/// The test services' fixed ports (scripts/test-services.sh) lie below it.
const PICK_FROM: u16 = 20_000;

/// A port for a server a test is about to start, free when checked (bound
/// and released).
///
/// Not the kernel's choice (`bind 127.0.0.1:0`): that comes from the
/// ephemeral range (`net.ipv4.ip_local_port_range`), where every outgoing
/// connection on the machine takes its source port, and between the check
/// and the server's own bind (a broker's storage format and JVM start, a
/// few seconds) one did: the broker failed with "Address already in use".
/// Below that range only a listener's explicit bind takes a port. Each
/// process walks it from a start of its own (its pid and the clock), so
/// that test binaries picking at once start far apart, and hands out no
/// port twice until the walk has gone round.
pub fn free_port() -> u16 {
    pick_ports(1)
}

/// `count` adjacent ports, each free when checked: the first is returned.
fn pick_ports(count: u16) -> u16 {
    static WALK: OnceLock<AtomicU64> = OnceLock::new();
    let walk = WALK.get_or_init(|| {
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.as_nanos() as u64)
            .unwrap_or_default();
        AtomicU64::new(crate::feed::Rng::new(clock ^ u64::from(std::process::id())).next_u64())
    });
    let (from, to) = pick_range();
    pick_on(walk, from, to, count)
}

/// The walk's next `count` adjacent ports in `from..to` that are all free.
fn pick_on(walk: &AtomicU64, from: u16, to: u16, count: u16) -> u16 {
    let span = u64::from(to - from - count + 1);
    for _ in 0..span {
        let first = from + (walk.fetch_add(u64::from(count), Ordering::Relaxed) % span) as u16;
        let free = (first..first + count)
            .all(|port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
        if free {
            return first;
        }
    }
    panic!("no {count} adjacent free ports on 127.0.0.1 in {from}..{to}");
}

/// `PICK_FROM` up to the first ephemeral port, which the kernel says.
fn pick_range() -> (u16, u16) {
    let path = "/proc/sys/net/ipv4/ip_local_port_range";
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let first: u16 = text
        .split_whitespace()
        .next()
        .and_then(|low| low.parse().ok())
        .unwrap_or_else(|| panic!("{path}: no port range in {text:?}"));
    assert!(
        first > PICK_FROM + 1_000,
        "{path} starts the ephemeral range at {first}: too close to {PICK_FROM} to pick test ports below it"
    );
    (PICK_FROM, first)
}

/// How to start a redis-server of one's own.
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    /// The binary; `redis-server` on PATH by default.
    pub binary: Option<PathBuf>,
    /// A module to load (RedisBloom's `redisbloom.so`).
    pub module: Option<PathBuf>,
    /// Where its directory and log go; the temp dir by default (and then
    /// removed on drop).
    pub dir: Option<PathBuf>,
    /// Further arguments (`--requirepass`, `--rename-command`, ...).
    pub args: Vec<String>,
}

/// A redis-server of one's own, so it can be stopped, frozen or measured
/// without touching a shared one. `noeviction`, no persistence but when told
/// (`SHUTDOWN SAVE`, into its own directory); it restarts from that dump on
/// the same port.
pub struct RedisServer {
    pub port: u16,
    options: ServerOptions,
    dir: PathBuf,
    /// Whether `dir` is ours to remove.
    temporary: bool,
    child: Option<Child>,
    frozen: bool,
}

impl RedisServer {
    /// Starts it and waits until it answers PING; panics with its log if
    /// it does not.
    pub fn start(name: &str, options: ServerOptions) -> RedisServer {
        let port = free_port();
        let (dir, temporary) = match &options.dir {
            Some(dir) => (dir.join(format!("redis-{port}")), false),
            None => (
                std::env::temp_dir().join(format!("idemgate-redis-{}", unique(name))),
                true,
            ),
        };
        std::fs::create_dir_all(&dir).expect("redis dir");
        let mut redis = RedisServer {
            port,
            options,
            dir,
            temporary,
            child: None,
            frozen: false,
        };
        redis.spawn();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    fn binary(&self) -> &Path {
        self.options
            .binary
            .as_deref()
            .unwrap_or(Path::new("redis-server"))
    }

    fn spawn(&mut self) {
        let mut command = Command::new(self.binary());
        command
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--maxmemory-policy", "noeviction"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--dbfilename", "dump.rdb"])
            .arg("--logfile")
            .arg(self.log());
        if let Some(module) = &self.options.module {
            command.arg("--loadmodule").arg(module);
        }
        command.args(&self.options.args);
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", self.binary().display()));
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
                    std::fs::read_to_string(self.log()).unwrap_or_default()
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

    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        client.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// Up: it answers PING, or refuses it for want of a password.
    fn ping(&self) -> bool {
        match self
            .connection()
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        {
            Ok(_) => true,
            Err(error) => error.code() == Some("NOAUTH"),
        }
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
        while child.try_wait().expect("try_wait").is_none() {
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

    /// Killed and started again on the same port with nothing: a restart
    /// without persistence (or a failover to an empty replica at the same
    /// address). Every key is gone.
    pub fn restart_empty(&mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(self.dir.join("dump.rdb"));
        self.spawn();
    }

    /// `SAVE`, then the dump copied to `to`: a snapshot to come back to.
    pub fn snapshot(&self, to: &Path) {
        let mut connection = self.connection().expect("redis connection");
        let _: () = redis::cmd("SAVE").query(&mut connection).expect("SAVE");
        std::fs::copy(self.dir.join("dump.rdb"), to).expect("copy of the dump");
    }

    /// Killed and started again on the same port from the dump at `from`:
    /// a crash between two RDB snapshots, or a restore from a backup. The
    /// writes since the snapshot are gone; the rest, the stream identity
    /// included, is back.
    pub fn restart_from(&mut self, from: &Path) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
        std::fs::copy(from, self.dir.join("dump.rdb")).expect("dump restored");
        self.spawn();
    }

    /// SIGSTOP: the server keeps its sockets but answers nothing, as when it
    /// hangs or the network drops packets.
    pub fn freeze(&mut self) {
        signal(self.pid(), "STOP");
        self.frozen = true;
    }

    pub fn thaw(&mut self) {
        signal(self.pid(), "CONT");
        self.frozen = false;
    }
}

/// A Redis Cluster of a test's own: three masters without replicas, each
/// a [`RedisServer`], so one node alone can be stopped or set back to an
/// older snapshot without touching the cluster other tests share.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(name: &str) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|i| {
                RedisServer::start(
                    &format!("{name}-node{i}"),
                    ServerOptions {
                        args: vec![
                            "--cluster-enabled".into(),
                            "yes".into(),
                            "--cluster-node-timeout".into(),
                            "5000".into(),
                            // A bus port of its own: port + 10000 may be
                            // another server's.
                            "--cluster-port".into(),
                            free_port().to_string(),
                        ],
                        ..ServerOptions::default()
                    },
                )
            })
            .collect();
        let seeds: Vec<String> = nodes
            .iter()
            .map(|n| n.url().trim_start_matches("redis://").to_string())
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&seeds)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("running redis-cli");
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        cluster
    }

    /// Every node's URL, as a config's seed nodes.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Until every node says `cluster_state:ok` (30 s at most).
    pub fn wait_ok(&self) {
        let until = Instant::now() + Duration::from_secs(30);
        for node in &self.nodes {
            loop {
                let info: Option<String> = node
                    .connection()
                    .ok()
                    .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query(&mut c).ok());
                if info.is_some_and(|i| i.contains("cluster_state:ok")) {
                    break;
                }
                assert!(Instant::now() < until, "cluster not ok within 30 s");
                // The nodes agree on their own time: asked again.
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

impl Drop for RedisServer {
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
        if self.temporary && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// An Apache Kafka broker of one's own: one KRaft node that is broker and
/// controller, on two spare loopback ports, run from the jars
/// `scripts/test-services.sh` cached (`IDEMGATE_TEST_KAFKA_LIBS`). Its log
/// lives under its directory, so [`Kafka::restart`] keeps its data, as a
/// broker restarted on its own disk does. Killed when dropped.
pub struct Kafka {
    child: Option<Child>,
    pub brokers: String,
    dir: PathBuf,
    libs: PathBuf,
    /// How many times it was started (each start's log is its own file).
    starts: u32,
    /// How long the last start took, until it served metadata.
    pub started_in: Duration,
}

impl Kafka {
    /// Formats a fresh log under `dir/kafka` and starts the broker.
    pub fn start(libs: &Path, dir: &Path) -> Result<Kafka> {
        let dir = dir.join("kafka");
        std::fs::create_dir_all(Kafka::data_in(&dir))?;
        let (port, controller) = free_port_pair();
        std::fs::write(
            dir.join("server.properties"),
            crate::tools::server_properties(&Kafka::data_in(&dir), port, controller),
        )?;
        std::fs::write(dir.join("log4j2.properties"), crate::tools::BROKER_LOG4J)?;
        let cluster = crate::tools::run(libs, "kafka.tools.StorageTool", &["random-uuid"])?;
        let properties = dir.join("server.properties");
        crate::tools::run(
            libs,
            "kafka.tools.StorageTool",
            &[
                "format",
                "-t",
                cluster.trim(),
                "-c",
                &properties.to_string_lossy(),
            ],
        )?;
        let mut kafka = Kafka {
            child: None,
            brokers: format!("127.0.0.1:{port}"),
            dir,
            libs: libs.to_path_buf(),
            starts: 0,
            started_in: Duration::ZERO,
        };
        kafka.spawn()?;
        Ok(kafka)
    }

    /// The broker's log folder (`log.dirs`): its topics' data, beside its
    /// own log files in `dir`.
    fn data_in(dir: &Path) -> PathBuf {
        dir.join("log")
    }

    /// Stops the broker and removes its topics' data, keeping its log
    /// files: a deleted topic waits in a `-delete` folder for a minute
    /// before the broker removes it, and a broker stopped sooner leaves it.
    pub fn stop_and_remove_data(mut self) -> Result<()> {
        self.stop()?;
        std::fs::remove_dir_all(Kafka::data_in(&self.dir))?;
        Ok(())
    }

    fn spawn(&mut self) -> Result<()> {
        let began = Instant::now();
        self.starts += 1;
        let log_path = self.dir.join(format!("broker-{}.log", self.starts));
        let log = File::create(&log_path)?;
        let child = Command::new("java")
            .args([
                "-Xms256m",
                "-Xmx1g",
                "-XX:+UseG1GC",
                "-Djava.awt.headless=true",
            ])
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                self.dir.join("log4j2.properties").display()
            ))
            .arg("-cp")
            .arg(format!("{}/*", self.libs.display()))
            .arg("kafka.Kafka")
            .arg(self.dir.join("server.properties"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting java (Apache Kafka)")?;
        self.child = Some(child);
        let admin = crate::kafka::admin(&self.brokers);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "the Kafka broker exited during start-up ({status}); see {}",
                    log_path.display()
                );
            }
            // Serving metadata with itself as a broker: a KRaft node lists
            // itself only once it is unfenced.
            if admin
                .inner()
                .fetch_metadata(None, Duration::from_millis(500))
                .is_ok_and(|m| !m.brokers().is_empty())
            {
                self.started_in = began.elapsed();
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the Kafka broker on {} did not serve metadata within 90s; see {}",
                    self.brokers,
                    log_path.display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGTERM, and waits for the controlled shutdown to finish.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        signal(child.id(), "TERM");
        let until = Instant::now() + Duration::from_secs(60);
        while child.try_wait()?.is_none() {
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the Kafka broker ignored SIGTERM for 60s; killed");
            }
            // Polling the broker's exit: its controlled shutdown takes
            // about a second.
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// SIGKILL, a crash: no controlled shutdown; the next start recovers
    /// its log (what it had acknowledged is in the page cache, so kept).
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Starts it again on the same ports and the same log: what it had
    /// acknowledged is still there.
    pub fn restart(&mut self) -> Result<()> {
        anyhow::ensure!(self.child.is_none(), "restart of a running broker");
        self.spawn()
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Two adjacent free ports (broker, controller), as [`free_port`] picks.
fn free_port_pair() -> (u16, u16) {
    let port = pick_ports(2);
    (port, port + 1)
}

/// The first line `binary flag` prints.
pub fn version_line(binary: &Path, flag: &str) -> Result<String> {
    let output = Command::new(binary)
        .arg(flag)
        .output()
        .with_context(|| format!("running {} {flag}", binary.display()))?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string())
}

/// Every key matching `pattern` (`prefix*`) on one node, by SCAN (never
/// KEYS: a shared server holds other tests' and sessions' keys). Claim keys
/// end in raw hash bytes, hence bytes.
pub fn scan(connection: &mut redis::Connection, pattern: &str) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) =
            scan_step(cursor, pattern).query(connection).expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

/// One SCAN call: the next cursor and a batch of keys.
fn scan_step(cursor: u64, pattern: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(10_000);
    cmd
}

/// `scan` on an async connection (the bench's), with errors returned.
pub async fn scan_async(
    connection: &mut redis::aio::MultiplexedConnection,
    pattern: &str,
) -> Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) =
            scan_step(cursor, pattern).query_async(connection).await?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

/// Whether a key (after its prefix) is a stream's store identity,
/// `<key id>:id{<tag>}` (docs/design.md §8.2): beside the claims of its
/// hash tag, the one key that never expires.
pub fn is_identity_key(rest: &[u8]) -> bool {
    rest.iter()
        .position(|b| *b == b'{')
        .is_some_and(|brace| rest[..brace].ends_with(b":id"))
}

/// Whether a key (after its prefix) is a progress mark, `<key id>:m{<tag>}`
/// (docs/design.md §8.2): beside its tag's identity, never expiring.
pub fn is_marks_key(rest: &[u8]) -> bool {
    rest.iter()
        .position(|b| *b == b'{')
        .is_some_and(|brace| rest[..brace].ends_with(b":m"))
}

/// Whether a key (after its prefix) is a stream's tier-1 layout record,
/// `<key id>:layout`: beside its identity, and like it never expiring.
pub fn is_layout_record(rest: &[u8]) -> bool {
    rest.ends_with(b":layout") && !rest.contains(&b'{')
}

/// Whether a key (after its prefix) must never expire: a store identity
/// or a tier-1 layout record.
pub fn is_persistent_key(rest: &[u8]) -> bool {
    is_identity_key(rest) || is_layout_record(rest) || is_marks_key(rest)
}

/// Whether a key (after its prefix) is a record of finished runs,
/// `<key id>:r{<tag>}...` (docs/design.md §7): on its partition's hash
/// tag, living the stream's watermark TTL.
pub fn is_runs_key(rest: &[u8]) -> bool {
    rest.iter()
        .position(|b| *b == b'{')
        .is_some_and(|brace| rest[..brace].ends_with(b":r"))
}

/// The remaining lifetime (ms) of every key under `prefix`, after
/// asserting each one expires (docs/design.md §4: a key without expiry is
/// a bug). A key that expired between SCAN and PTTL is left out.
/// How long every live tier-1 claim under `prefix` still lives (ms), in
/// either layout (`tier1.rs`), checking on the way that every key under it
/// carries an expiry.
pub fn claim_ttls(url: &str, prefix: &str) -> Vec<i64> {
    key_ttls_where(url, prefix, |_| false);
    let client = redis::Client::open(url).expect("redis url");
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("redis connection");
    let keys = scan(&mut connection, &format!("{prefix}*"));
    crate::tier1::stored_claims(&mut connection, prefix, &keys)
        .into_iter()
        .map(|claim| claim.ttl_ms)
        .collect()
}

/// The PTTL of every key under `prefix` but the store identities, each
/// checked to carry an expiry (the identities to carry none).
pub fn key_ttls(url: &str, prefix: &str) -> Vec<i64> {
    key_ttls_where(url, prefix, |rest| !is_persistent_key(rest))
}

fn key_ttls_where(url: &str, prefix: &str, keep: impl Fn(&[u8]) -> bool) -> Vec<i64> {
    let client = redis::Client::open(url).expect("redis url");
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("redis connection");
    let mut ttls = Vec::new();
    for key in scan(&mut connection, &format!("{prefix}*")) {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query(&mut connection)
            .expect("PTTL");
        let rest = &key[prefix.len()..];
        if is_persistent_key(rest) {
            assert!(
                ttl == -1 || ttl == -2,
                "store identity {} has PTTL {ttl}: it must never expire",
                String::from_utf8_lossy(&key)
            );
            continue;
        }
        assert!(
            ttl > 0 || ttl == -2,
            "key {} has PTTL {ttl}: every claim must expire",
            String::from_utf8_lossy(&key)
        );
        if ttl > 0 && keep(rest) {
            ttls.push(ttl);
        }
    }
    ttls
}

/// Tier-1 claims under `prefix` that are not settled: neither below their
/// partition's delivered watermark nor flagged done (docs/design.md §4.1).
/// After a run has drained, every claim must be settled, or its copies
/// would wait for ever. Reads the store's own layout: a claim key is
/// `<prefix><key id>{<tag>}<hash>`, its 28-byte value starts with the
/// holder (topic tag 24 bits, partition 24 bits, offset 48 bits) and keeps
/// the done flag in the high bit of byte 24; watermarks are the hash
/// `<prefix><key id>:w` with fields `<tag hex>:<partition>`.
pub fn unsettled_claims(url: &str, prefix: &str) -> Vec<String> {
    unsettled_holders(url, prefix)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// An unsettled claim's holder, as `unsettled_holders` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The input topic's tag.
    pub tag: i64,
    pub partition: i32,
    pub offset: i64,
    /// The partition's delivered watermark, if it has one.
    pub watermark: Option<i64>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:06x}/{}/{} (watermark {:?})",
            self.tag, self.partition, self.offset, self.watermark
        )
    }
}

/// `unsettled_claims`, each claim's holder as a value.
pub fn unsettled_holders(url: &str, prefix: &str) -> Vec<Holder> {
    let client = redis::Client::open(url).expect("redis url");
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("redis connection");
    let mut watermarks: std::collections::HashMap<Vec<u8>, std::collections::HashMap<String, i64>> =
        std::collections::HashMap::new();
    let mut unsettled = Vec::new();
    let keys = scan(&mut connection, &format!("{prefix}*"));
    for claim in crate::tier1::stored_claims(&mut connection, prefix, &keys) {
        let (key_id, value) = (claim.key_id, claim.value);
        let int =
            |r: std::ops::Range<usize>| value[r].iter().fold(0i64, |n, b| (n << 8) | i64::from(*b));
        let (tag, partition, offset) = (int(0..3), int(3..6), int(6..12));
        let done = value[24] & 0x80 != 0;
        let marks = watermarks.entry(key_id.clone()).or_insert_with(|| {
            let mut w = key_id.clone();
            w.splice(0..0, prefix.bytes());
            w.extend_from_slice(b":w");
            redis::cmd("HGETALL")
                .arg(&w)
                .query(&mut connection)
                .expect("HGETALL watermarks")
        });
        let below = marks.get(&format!("{tag:06x}:{partition}")).copied();
        if !done && below.is_none_or(|w| offset >= w) {
            unsettled.push(Holder {
                tag,
                partition: partition as i32,
                offset,
                watermark: below,
            });
        }
    }
    unsettled
}

/// `unsettled_claims` over several nodes: the masters of a Redis Cluster,
/// each holding its own slots (SCAN, GET and HGETALL only ever touch keys
/// the node itself holds). Every node's claims are judged against every
/// node's watermark hashes, wherever the cluster keeps them. Returns the
/// claim keys found and the unsettled ones.
pub fn unsettled_claims_on(urls: &[String], prefix: &str) -> (usize, Vec<String>) {
    type Holder = (Vec<u8>, String, i64, bool);
    let mut watermarks: std::collections::HashMap<Vec<u8>, std::collections::HashMap<String, i64>> =
        std::collections::HashMap::new();
    let mut claims: Vec<Holder> = Vec::new();
    for url in urls {
        let client = redis::Client::open(url.as_str()).expect("redis url");
        let mut connection = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("redis connection");
        let keys = scan(&mut connection, &format!("{prefix}*"));
        for key in &keys {
            let rest = &key[prefix.len()..];
            if let Some(key_id) = rest.strip_suffix(b":w").filter(|_| !rest.contains(&b'{')) {
                let marks: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
                    .arg(key)
                    .query(&mut connection)
                    .expect("HGETALL watermarks");
                watermarks.entry(key_id.to_vec()).or_default().extend(marks);
            }
        }
        for claim in crate::tier1::stored_claims(&mut connection, prefix, &keys) {
            let value = claim.value;
            let int = |r: std::ops::Range<usize>| {
                value[r].iter().fold(0i64, |n, b| (n << 8) | i64::from(*b))
            };
            let field = format!("{:06x}:{}", int(0..3), int(3..6));
            claims.push((claim.key_id, field, int(6..12), value[24] & 0x80 != 0));
        }
    }
    let unsettled = claims
        .iter()
        .filter_map(|(key_id, field, offset, done)| {
            let below = watermarks.get(key_id).and_then(|m| m.get(field)).copied();
            (!done && below.is_none_or(|w| *offset >= w))
                .then(|| format!("{field}/{offset} (watermark {below:?})"))
        })
        .collect();
    (claims.len(), unsettled)
}

/// Deletes every tier-1 claim under `prefix` on one server (claim keys
/// and grouped hashes; watermarks and filter generations stay), as if they
/// had all expired. Returns how many claims went.
pub fn delete_claims(url: &str, prefix: &str) -> usize {
    let client = redis::Client::open(url).expect("redis url");
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("redis connection");
    let keys: Vec<Vec<u8>> = scan(&mut connection, &format!("{prefix}*"))
        .into_iter()
        .filter(|key| {
            let rest = &key[prefix.len()..];
            crate::tier1::is_claim_key(rest) || crate::tier1::is_group_key(rest)
        })
        .collect();
    let claims = crate::tier1::stored_claims(&mut connection, prefix, &keys).len();
    for key in &keys {
        let _: i64 = redis::cmd("DEL")
            .arg(key)
            .query(&mut connection)
            .expect("DEL");
    }
    claims
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picked_ports_lie_below_the_ephemeral_range_and_are_not_handed_out_twice() {
        let (from, to) = pick_range();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let port = free_port();
            assert!((from..to).contains(&port), "{port} outside {from}..{to}");
            assert!(seen.insert(port), "{port} handed out twice");
        }
        let (broker, controller) = free_port_pair();
        assert_eq!(controller, broker + 1);
        assert!(controller < to, "{controller} is an ephemeral port");
    }

    #[test]
    fn a_port_in_use_is_passed_over() {
        let held = std::net::TcpListener::bind(("127.0.0.1", free_port())).expect("bind");
        let port = held.local_addr().unwrap().port();
        // A walk standing on the held port, and one on the port before it
        // asking for two (a walk is taken modulo the ports it can start
        // on: adding their count steps back one without going below zero).
        let (from, to) = pick_range();
        let walk = AtomicU64::new(u64::from(port - from));
        let picked = pick_on(&walk, from, to, 1);
        assert_ne!(picked, port, "the held port was picked");
        drop(std::net::TcpListener::bind(("127.0.0.1", picked)).expect("the picked port binds"));
        let pair_starts = u64::from(to - from - 1);
        let walk = AtomicU64::new(u64::from(port - from) + pair_starts - 1);
        let pair = pick_on(&walk, from, to, 2);
        assert!(
            pair + 1 < port || pair > port,
            "a pair over the held port: {pair}"
        );
    }
}
