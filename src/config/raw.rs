//! The configuration file as written: serde types with documented defaults.
//! Nothing here is trusted until `validate` has turned it into a `Config`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::store::Mode;
use crate::ttl::TtlPolicy;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// librdkafka properties, passed through as they are
    /// (`"bootstrap.servers"`, `"security.protocol"`, ...).
    #[serde(default)]
    pub kafka: BTreeMap<String, String>,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub metrics: RawMetrics,
    #[serde(default)]
    pub batch: RawBatch,
    #[serde(default)]
    pub streams: Vec<RawStream>,
}

/// Where claims live.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// `memory` (in-process, one replica), `redis` (one server, `url`) or
    /// `cluster` (Redis Cluster, `nodes`). Default `memory`.
    #[serde(default = "default_kind")]
    pub kind: String,
    /// `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS.
    pub url: Option<String>,
    /// Seed nodes of a Redis Cluster, as URLs.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Prepended to every key, so deployments can share a server.
    /// Default `idemgate:`.
    #[serde(default = "default_prefix")]
    pub key_prefix: String,
    /// Tier-2 structure: `auto` (RedisBloom where every node has it, plain
    /// bitmaps otherwise), `redisbloom` or `bitmap`. Default `auto`.
    #[serde(default = "default_filter")]
    pub filter: String,
    /// Accept a Redis whose `maxmemory-policy` can evict claims. Default
    /// false: an eviction silently shortens a TTL.
    #[serde(default)]
    pub allow_eviction: bool,
    /// Memory store only: `wall` (default) or `event`, which uses each
    /// record's timestamp as the clock (a nine-hour retry ladder replayed
    /// in seconds).
    #[serde(default = "default_clock")]
    pub clock: String,
}

impl Default for RawStore {
    fn default() -> RawStore {
        RawStore {
            kind: default_kind(),
            url: None,
            nodes: Vec::new(),
            key_prefix: default_prefix(),
            filter: default_filter(),
            allow_eviction: false,
            clock: default_clock(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    /// Address of /metrics, /healthz and /readyz. Default `127.0.0.1:9464`.
    #[serde(default = "default_listen")]
    pub listen: String,
}

impl Default for RawMetrics {
    fn default() -> RawMetrics {
        RawMetrics {
            listen: default_listen(),
        }
    }
}

/// How records are gathered into batches.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBatch {
    /// Most records per batch: one claim round trip per tier each. Default 1000.
    #[serde(default = "default_max_records")]
    pub max_records: usize,
    /// How long a batch waits for more records after its first. Default 20ms.
    #[serde(default = "default_linger", with = "crate::ttl::serde_duration")]
    pub linger: Duration,
}

impl Default for RawBatch {
    fn default() -> RawBatch {
        RawBatch {
            max_records: default_max_records(),
            linger: default_linger(),
        }
    }
}

fn default_max_records() -> usize {
    1000
}
fn default_linger() -> Duration {
    Duration::from_millis(20)
}

/// One deduplicated stream: its topics, its hash, its memory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStream {
    /// Names the stream's key namespace: letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// Raw topics read by this stream.
    pub inputs: Vec<String>,
    /// Where novel (and unverified) records go.
    pub clean: String,
    /// Where duplicates, conflicts and invalid records go, with the reason.
    pub audit: String,
    /// `header`, `fields`, `payload`, `payload-raw`, `bank-txn` or
    /// `spatial-job`.
    pub profile: String,
    /// For `profile = "fields"`: `name:normaliser` pairs, comma separated.
    pub fields: Option<String>,
    /// For `profile = "header"`: the header. Default `x-idempotency-key`.
    pub header: Option<String>,
    /// Larger records are `invalid` (reason `too-large`). Default 1 MiB.
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: usize,
    /// `exact` (payments, edits: no false positives) or `tiered`.
    pub mode: Mode,
    /// How long a hash is remembered. In `exact` mode this is the tier-1
    /// TTL; in `tiered` mode it is the horizon the filter covers.
    pub ttl: TtlPolicy,
    /// Tiered mode: how long a hash stays an exact key (where most
    /// redeliveries land).
    #[serde(default, with = "crate::ttl::serde_duration_opt")]
    pub tier1_ttl: Option<Duration>,
    /// Tiered mode: live filter generations, 2 or more. Default 2.
    #[serde(default = "default_slots")]
    pub filter_slots: u32,
    /// Tiered mode: false-positive rate of one generation. Default 0.001.
    #[serde(default = "default_fp_rate")]
    pub fp_rate: f64,
    /// Tiered mode: expected peak records per second; with the horizon it
    /// sizes each generation.
    pub peak_rate: Option<u64>,
    /// Tiered mode: largest clock difference between replicas that a
    /// rotation tolerates. Default 5s.
    #[serde(default = "default_skew", with = "crate::ttl::serde_duration")]
    pub clock_skew: Duration,
    /// How long a pending claim holds: longer than any batch can take,
    /// shorter than the tier-1 TTL. Default 60s.
    #[serde(default = "default_lease", with = "crate::ttl::serde_duration")]
    pub lease: Duration,
    /// What happens while the store is unreachable: `closed` (pause, the
    /// default, for payments) or `open` (pass records as `unverified`).
    #[serde(default = "default_fail_mode")]
    pub fail_mode: String,
}

fn default_kind() -> String {
    "memory".into()
}
fn default_prefix() -> String {
    "idemgate:".into()
}
fn default_filter() -> String {
    "auto".into()
}
fn default_clock() -> String {
    "wall".into()
}
fn default_listen() -> String {
    "127.0.0.1:9464".into()
}
fn default_max_record_bytes() -> usize {
    1 << 20
}
fn default_slots() -> u32 {
    2
}
fn default_fp_rate() -> f64 {
    0.001
}
fn default_skew() -> Duration {
    Duration::from_secs(5)
}
fn default_lease() -> Duration {
    Duration::from_secs(60)
}
fn default_fail_mode() -> String {
    "closed".into()
}
