//! The servers the bench talks to: where the backends are, how their keys
//! are found and removed afterwards, and a scratch `redis-server` of our
//! own for the memory figure.

use std::net::SocketAddr;
use std::process::Command;

use anyhow::{bail, Context};
use idemgate::store::redis::{FilterBackend, RedisTarget};
use idemgate_testkit::servers::scan_async;

/// A Redis backend under test, as named by the environment.
#[derive(Clone, Debug)]
pub struct RedisBackend {
    pub label: &'static str,
    pub target: RedisTarget,
    pub filter: FilterBackend,
}

/// Each variable names one backend; a missing one is returned as the
/// reason that backend goes unmeasured.
pub fn from_env() -> (Vec<RedisBackend>, Vec<(&'static str, String)>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    let specs: [(&str, &str, FilterBackend, bool); 3] = [
        (
            "redis (bitmap)",
            "IDEMGATE_TEST_REDIS_URL",
            FilterBackend::Bitmap,
            false,
        ),
        (
            "redis (bloom)",
            "IDEMGATE_TEST_REDISBLOOM_URL",
            FilterBackend::RedisBloom,
            false,
        ),
        (
            "cluster (bitmap)",
            "IDEMGATE_TEST_REDIS_CLUSTER",
            FilterBackend::Bitmap,
            true,
        ),
    ];
    for (label, var, filter, cluster) in specs {
        match std::env::var(var) {
            Ok(value) if !value.trim().is_empty() => {
                let target = if cluster {
                    RedisTarget::Cluster(value.split(',').map(|s| s.trim().to_string()).collect())
                } else {
                    RedisTarget::Standalone(value.trim().to_string())
                };
                found.push(RedisBackend {
                    label,
                    target,
                    filter,
                });
            }
            _ => missing.push((label, format!("{var} is not set"))),
        }
    }
    (found, missing)
}

/// A connection to one node, for the bench's own bookkeeping commands.
pub async fn node(url: &str) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url).with_context(|| url.to_string())?;
    client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// Every node that holds keys: the server, or each master of the cluster
/// (read from `CLUSTER NODES`, so a seed list naming only some still
/// reaches all).
pub async fn masters(target: &RedisTarget) -> anyhow::Result<Vec<String>> {
    match target {
        RedisTarget::Standalone(url) => Ok(vec![url.clone()]),
        RedisTarget::Cluster(seeds) => {
            let seed = seeds.first().context("empty cluster seed list")?;
            let mut conn = node(seed).await?;
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut conn)
                .await?;
            Ok(nodes
                .lines()
                .filter_map(|line| {
                    let mut fields = line.split_whitespace();
                    let address = fields.nth(1)?.split('@').next()?;
                    let flags = fields.next()?;
                    flags
                        .split(',')
                        .any(|f| f == "master")
                        .then(|| format!("redis://{address}"))
                })
                .collect())
        }
    }
}

/// Keys matching `pattern` on one node (SCAN: the test kit's).
pub async fn keys_under(url: &str, pattern: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut conn = node(url).await?;
    scan_async(&mut conn, pattern).await
}

/// Removes every key under `prefix` on every master: SCAN + UNLINK, so the
/// servers other sessions share keep their keys (no FLUSHALL anywhere).
/// Returns how many keys went.
pub async fn delete_prefix(target: &RedisTarget, prefix: &str) -> anyhow::Result<usize> {
    let mut removed = 0;
    for url in masters(target).await? {
        let keys = keys_under(&url, &format!("{prefix}*")).await?;
        let mut conn = node(&url).await?;
        for chunk in keys.chunks(500) {
            // One key per UNLINK: on a cluster node, keys of different
            // slots cannot share one command.
            let mut pipe = redis::pipe();
            for key in chunk {
                pipe.cmd("UNLINK").arg(key).ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
        }
        removed += keys.len();
    }
    Ok(removed)
}

/// `MEMORY USAGE` of one key, in bytes.
pub async fn memory_usage(url: &str, key: &[u8]) -> anyhow::Result<u64> {
    let mut conn = node(url).await?;
    let usage: Option<u64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut conn)
        .await?;
    usage.with_context(|| format!("no key {}", String::from_utf8_lossy(key)))
}

/// One `field:value` of `INFO <section>`.
pub async fn info_field(url: &str, section: &str, field: &str) -> anyhow::Result<String> {
    let mut conn = node(url).await?;
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
        .with_context(|| format!("INFO {section} has no {field}"))
}

pub async fn used_memory(url: &str) -> anyhow::Result<i64> {
    Ok(info_field(url, "memory", "used_memory").await?.parse()?)
}

/// `host:port` of a `redis://host:port` URL, for the counting proxy.
pub fn socket_of(url: &str) -> anyhow::Result<SocketAddr> {
    let rest = url
        .strip_prefix("redis://")
        .with_context(|| format!("{url}: only plain redis:// URLs are proxied"))?;
    let host_port = rest.split('/').next().unwrap_or(rest);
    if host_port.contains('@') {
        bail!("{url}: URLs with credentials are not proxied");
    }
    use std::net::ToSocketAddrs;
    host_port
        .to_socket_addrs()?
        .next()
        .with_context(|| format!("{url} resolves to nothing"))
}

/// `redis-server --version`, `MODULE LIST`'s `bf` version on a server.
pub fn server_version() -> String {
    Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "redis-server not on PATH".into())
}

pub async fn bloom_version(url: &str) -> anyhow::Result<String> {
    let mut conn = node(url).await?;
    let modules: redis::Value = redis::cmd("MODULE")
        .arg("LIST")
        .query_async(&mut conn)
        .await?;
    // RESP2: an array of flat [name, bf, ver, 20802, ...] arrays.
    let text = format!("{modules:?}");
    let version = match modules {
        redis::Value::Array(list) => list.into_iter().find_map(|module| {
            let redis::Value::Array(flat) = module else {
                return None;
            };
            let pairs: Vec<String> = flat
                .into_iter()
                .map(|v| redis::from_redis_value::<String>(v).unwrap_or_default())
                .collect();
            let is_bf = pairs
                .chunks(2)
                .any(|c| c[0] == "name" && c.get(1).map(String::as_str) == Some("bf"));
            let ver = pairs.chunks(2).find(|c| c[0] == "ver")?.get(1)?.clone();
            is_bf.then_some(ver)
        }),
        _ => None,
    };
    version.with_context(|| format!("no bf module in MODULE LIST: {text}"))
}

/// CPU seconds a server (every master of a cluster) has used since it
/// started, user plus system, from `INFO cpu`.
pub async fn cpu_seconds(target: &RedisTarget) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for url in masters(target).await? {
        for field in ["used_cpu_user", "used_cpu_sys"] {
            total += info_field(&url, "cpu", field).await?.parse::<f64>()?;
        }
    }
    Ok(total)
}

/// CPU seconds this process has used, every thread, user plus system
/// (`/proc/self/stat`, in 10 ms ticks). `None` off Linux.
pub fn own_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may itself hold spaces; utime
    // and stime are fields 14 and 15 of the line, 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux the kernel exposes to user space.
    Some(ticks / 100.0)
}
