//! The servers a bench run owns: an Apache Kafka broker (one KRaft node,
//! from the jars `scripts/test-services.sh` cached) and a redis-server (with
//! the RedisBloom module when there is one), on spare loopback ports, each
//! killed when dropped (the test kit's guards), and what the bench reads of
//! processes. Owning them keeps the memory figures clean (no other
//! session's keys) and keeps the bench from disturbing the shared test
//! servers; their pids (the broker's is its JVM's) give their CPU time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use idemgate_testkit::servers::{version_line, Kafka, RedisServer, ServerOptions};

/// The bench's redis-server (the test kit's guard) with the versions the
/// report names.
pub(crate) struct Redis {
    pub server: RedisServer,
    pub url: String,
    pub version: String,
    /// The RedisBloom module's version, when it was loaded.
    pub bloom_version: Option<String>,
}

impl Redis {
    pub async fn start(binary: &Path, module: Option<&Path>, dir: &Path) -> Result<Redis> {
        let version = version_line(binary, "--version")?;
        let options = ServerOptions {
            binary: Some(binary.to_path_buf()),
            module: module.map(Path::to_path_buf),
            dir: Some(dir.to_path_buf()),
            args: Vec::new(),
        };
        let server = tokio::task::spawn_blocking(move || RedisServer::start("bench", options))
            .await
            .context("starting redis-server")?;
        let url = server.url();
        let bloom_version = match module {
            Some(_) => Some(module_field(&url, "bf", "ver").await?.with_context(|| {
                format!("redis-server on {url} loaded the module but lists no bf")
            })?),
            None => None,
        };
        Ok(Redis {
            server,
            url,
            version,
            bloom_version,
        })
    }
}

/// The bench's Kafka broker (the test kit's guard) with the version the
/// report names.
pub(crate) struct Broker {
    pub server: Kafka,
    pub brokers: String,
    /// `Apache Kafka <version>`, from the jars' names.
    pub version: String,
    /// What `java -version` says of the JVM it runs on.
    pub java: String,
    /// The JVM's heap flags (`-Xms... -Xmx...`), from its command line.
    pub heap: String,
}

impl Broker {
    /// Formats a fresh log under `dir` and starts the broker; returns once
    /// it serves metadata (up to 90 s: a JVM start on a busy machine).
    pub async fn start(libs: &Path, dir: &Path) -> Result<Broker> {
        let version = kafka_version(libs);
        let (libs, dir) = (libs.to_path_buf(), dir.to_path_buf());
        let server = tokio::task::spawn_blocking(move || Kafka::start(&libs, &dir))
            .await
            .context("starting the Kafka broker")??;
        let heap = std::fs::read(format!("/proc/{}/cmdline", server.pid()))
            .map(|line| {
                String::from_utf8_lossy(&line)
                    .split('\0')
                    .filter(|arg| arg.starts_with("-Xm"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        Ok(Broker {
            brokers: server.brokers.clone(),
            version,
            java: java_version(),
            heap,
            server,
        })
    }
}

/// The harness's own connection: `FLUSHALL` of two million keys and a
/// `SCAN` over them take longer than the client's default 500 ms.
pub(crate) async fn connect(url: &str) -> Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url).with_context(|| url.to_string())?;
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(300)));
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// A field (`ver`, `path`) of a module in `MODULE LIST`.
pub(crate) async fn module_field(url: &str, module: &str, field: &str) -> Result<Option<String>> {
    let mut conn = connect(url).await?;
    let list: redis::Value = redis::cmd("MODULE")
        .arg("LIST")
        .query_async(&mut conn)
        .await?;
    let redis::Value::Array(modules) = list else {
        return Ok(None);
    };
    for entry in modules {
        let pairs: Vec<(String, String)> = match entry {
            redis::Value::Array(flat) => flat
                .chunks(2)
                .map(|c| (text(&c[0]), c.get(1).map(text).unwrap_or_default()))
                .collect(),
            redis::Value::Map(map) => map.iter().map(|(k, v)| (text(k), text(v))).collect(),
            _ => continue,
        };
        if pairs.iter().any(|(k, v)| k == "name" && v == module) {
            return Ok(pairs.into_iter().find(|(k, _)| k == field).map(|(_, v)| v));
        }
    }
    Ok(None)
}

fn text(value: &redis::Value) -> String {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        redis::Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// One `field:value` of `INFO <section>`.
pub(crate) async fn info_field(
    conn: &mut redis::aio::MultiplexedConnection,
    section: &str,
    field: &str,
) -> Result<String> {
    let text: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
        .with_context(|| format!("INFO {section} has no {field}"))
}

/// CPU seconds (user + system) a process has used, from `/proc/<pid>/stat`
/// (in USER_HZ ticks, 100 a second on every Linux).
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// CPU seconds the whole machine has been busy (every core, user, system,
/// interrupts and steal), from `/proc/stat`.
pub(crate) fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<f64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| fields.get(i))
        .sum::<f64>();
    Some(busy / 100.0)
}

/// A memory figure of a process from `/proc/<pid>/status`: `VmRSS`
/// (resident now) or `VmHWM` (peak resident).
pub(crate) fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Values of `target/test-services/env` (written by
/// `scripts/test-services.sh start`), looked up from the current directory
/// and from the source tree the binary was built from.
pub(crate) fn test_services_env(name: &str) -> Option<String> {
    if let Ok(value) = std::env::var(name) {
        if !value.is_empty() {
            return Some(value);
        }
    }
    let candidates = [
        PathBuf::from("target/test-services/env"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-services/env"),
    ];
    for path in candidates {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Some(value) = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
            {
                return Some(value.trim().to_string());
            }
        }
    }
    None
}

/// The folder of Apache Kafka's jars: `flag` (`--kafka-libs`), else
/// IDEMGATE_TEST_KAFKA_LIBS from the environment or from
/// `target/test-services/env`.
pub(crate) fn kafka_libs(flag: Option<&Path>) -> Result<PathBuf> {
    let libs = flag
        .map(Path::to_path_buf)
        .or_else(|| test_services_env("IDEMGATE_TEST_KAFKA_LIBS").map(PathBuf::from))
        .context("no Kafka jars: pass --kafka-libs, or run scripts/test-services.sh start")?;
    if !libs.is_dir() {
        anyhow::bail!(
            "{} is not a folder of Kafka's jars: run scripts/test-services.sh start",
            libs.display()
        );
    }
    Ok(libs)
}

/// `Apache Kafka <version>`, from the broker's jar (`kafka_<scala>-<version>.jar`)
/// in `libs`.
pub(crate) fn kafka_version(libs: &Path) -> String {
    let version = std::fs::read_dir(libs).ok().and_then(|entries| {
        entries.flatten().find_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let jar = name.strip_prefix("kafka_")?.strip_suffix(".jar")?;
            Some(jar.split_once('-')?.1.to_string())
        })
    });
    format!(
        "Apache Kafka {}",
        version.as_deref().unwrap_or("(version unknown)")
    )
}

/// The first line `java -version` prints (on stderr).
pub(crate) fn java_version() -> String {
    std::process::Command::new("java")
        .arg("-version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// `name` on PATH, if it is there.
pub(crate) fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}
