//! The configuration file as written: serde types with documented defaults.
//! Nothing here is trusted until `validate` has turned it into a `Config`.

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::store::Mode;
use crate::ttl::TtlPolicy;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    /// librdkafka properties, passed through as they are
    /// (`"bootstrap.servers"`, `"security.protocol"`, ...): strings,
    /// integers (`"session.timeout.ms" = 10000`) or booleans; with
    /// `[kafka.consumer]` and `[kafka.producer]` tables for one client
    /// each (`kafka.rs`).
    #[serde(default)]
    pub(crate) kafka: super::kafka::RawKafka,
    #[serde(default)]
    pub(crate) store: RawStore,
    #[serde(default)]
    pub(crate) metrics: RawMetrics,
    #[serde(default)]
    pub(crate) batch: RawBatch,
    /// `at-least-once` (default) or `exactly-once`: outputs and input
    /// offsets in one Kafka transaction per commit interval.
    #[serde(default)]
    pub(crate) guarantee: Guarantee,
    #[serde(default)]
    pub(crate) streams: Vec<RawStream>,
}

/// What a reader of the clean topic can rely on (docs/design.md §7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Guarantee {
    /// Every event once in clean, but a crash may produce the same input's
    /// output twice (the in-flight window); offsets committed by the
    /// consumer.
    #[default]
    AtLeastOnce,
    /// Outputs and input offsets committed in one transaction per commit
    /// interval by a transactional producer: a `read_committed` reader of
    /// clean sees every event once, crashes included.
    ExactlyOnce,
}

/// A librdkafka property's value as TOML writes it; librdkafka takes them
/// all as text.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub(crate) enum KafkaValue {
    Text(String),
    Integer(i64),
    Flag(bool),
}

impl KafkaValue {
    /// As librdkafka reads it: `true`/`false` for flags.
    pub(crate) fn into_text(self) -> String {
        match self {
            KafkaValue::Text(text) => text,
            KafkaValue::Integer(n) => n.to_string(),
            KafkaValue::Flag(flag) => flag.to_string(),
        }
    }
}

impl From<String> for KafkaValue {
    fn from(text: String) -> KafkaValue {
        KafkaValue::Text(text)
    }
}

/// PEM files for a Redis or a PostgreSQL over TLS.
#[derive(Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    /// A CA to trust instead of the system's roots (a private CA).
    pub(crate) ca_file: Option<PathBuf>,
    /// A client certificate, for servers that require one (with `key_file`).
    pub(crate) cert_file: Option<PathBuf>,
    /// The client certificate's private key.
    pub(crate) key_file: Option<PathBuf>,
}

/// Where claims live.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    /// Which store holds the claims. Default `memory`.
    #[serde(default)]
    pub(crate) kind: StoreKind,
    /// `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS;
    /// for `kind = "postgres"`, `postgres://user@host:port/db?sslmode=...`
    /// (or `postgresql://`).
    pub(crate) url: Option<String>,
    /// Seed nodes of a Redis Cluster, as URLs.
    #[serde(default)]
    pub(crate) nodes: Vec<String>,
    /// Prepended to every key, so deployments can share a server.
    /// Default `ig:`; kept short, since every tier-1 key carries it.
    #[serde(default = "default_prefix")]
    pub(crate) key_prefix: String,
    /// Tier-2 structure of a Redis store. Default `auto`.
    #[serde(default)]
    pub(crate) filter: FilterChoice,
    /// Accept a Redis whose `maxmemory-policy` can evict claims. Default
    /// false: an eviction silently shortens a TTL.
    #[serde(default)]
    pub(crate) allow_eviction: bool,
    /// Refuse to start when the server will not tell its
    /// `maxmemory-policy` (managed services refuse `CONFIG`). Default
    /// false: a warning, and the operator vouches for `noeviction`.
    #[serde(default)]
    pub(crate) require_eviction_check: bool,
    /// ACL user, where it is not in the URL.
    pub(crate) username: Option<String>,
    /// Password (of the ACL user, or `requirepass`), where it is not in the
    /// URL: `password = "${REDIS_PASSWORD}"` keeps it out of the file.
    pub(crate) password: Option<String>,
    /// TLS for `rediss://` URLs (and PostgreSQL's `sslmode`): files beyond
    /// the system's trust store.
    #[serde(default)]
    pub(crate) tls: RawTls,
    /// PostgreSQL: the schema every table lives in. Default `idemgate`.
    pub(crate) schema: Option<String>,
    /// PostgreSQL: connections in the pool. Default 4.
    pub(crate) pool_size: Option<NonZeroUsize>,
    /// PostgreSQL: the janitor that deletes expired claims.
    pub(crate) janitor: Option<RawJanitor>,
    /// What time a claim is made at. `event` needs the memory store: Redis
    /// expires keys on its own wall clock. Default `wall`.
    #[serde(default)]
    pub(crate) clock: Clock,
    /// How often the worker reads every stream's store identity at every
    /// place it is kept, so a store that lost a quiet stream's state is
    /// seen without waiting for its next record (docs/design.md §8).
    /// At least 100ms. Default 5s.
    #[serde(
        default = "default_identity_check_interval",
        with = "crate::ttl::serde_duration"
    )]
    pub(crate) identity_check_interval: Duration,
    /// Redis: what new tier-1 claims are written as, `keys` (one key per
    /// claim, what earlier versions write) or `grouped` (fields of small
    /// hashes, about a third of the memory). Claims of both are always
    /// read. Unset, each stream keeps what its store records: grouped for a
    /// stream first started by this version, keys for an older one. Set
    /// `grouped` only once no replica of an earlier version runs: such a
    /// replica reads keys alone, and could admit a copy of an event whose
    /// claim is a field.
    pub(crate) tier1_layout: Option<crate::store::redis::Tier1Layout>,
}

fn default_identity_check_interval() -> Duration {
    Duration::from_secs(5)
}

/// Where claims live (`store.kind`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StoreKind {
    /// In-process, for one replica: claims die with it. The default.
    #[default]
    Memory,
    /// One Redis server, at `store.url`.
    Redis,
    /// A Redis Cluster, reached through the seed `store.nodes`.
    Cluster,
    /// A PostgreSQL database at `store.url`: exact streams only.
    Postgres,
}

impl StoreKind {
    /// As `store.kind` spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis => "redis",
            StoreKind::Cluster => "cluster",
            StoreKind::Postgres => "postgres",
        }
    }
}

/// The PostgreSQL store's janitor (`[store.janitor]`): how often it
/// deletes expired claims, and how many rows one `DELETE` takes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawJanitor {
    /// Default 1m.
    #[serde(default, with = "crate::ttl::serde_duration_opt")]
    pub(crate) interval: Option<Duration>,
    /// Default 10000.
    pub(crate) batch_rows: Option<NonZeroU32>,
}

/// Which structure holds tier-2 filter generations (`store.filter`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FilterChoice {
    /// RedisBloom where every node has the module, plain bitmaps otherwise.
    /// The default.
    #[default]
    Auto,
    /// RedisBloom's `BF.*` commands; refused at start where a node lacks it.
    RedisBloom,
    /// Plain Redis bitmaps (`BITFIELD`), which every server has.
    Bitmap,
}

/// What time a claim is made at, and so when its TTL runs out
/// (`store.clock`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Clock {
    /// The machine's clock. The default.
    #[default]
    Wall,
    /// Each record's Kafka timestamp (the wall clock for a record without
    /// one), so a nine-hour retry ladder replays in seconds. Memory store
    /// only.
    Event,
}

/// What happens to a stream's records while the store is unreachable
/// (`streams[].fail_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FailMode {
    /// Pause the stream until the store answers: nothing passes unchecked.
    /// The default, for payments.
    #[default]
    Closed,
    /// Pass records to the clean topic marked `unverified`, for feeds where
    /// a lost record costs more than a double.
    Open,
}

impl Default for RawStore {
    fn default() -> RawStore {
        RawStore {
            kind: StoreKind::default(),
            url: None,
            nodes: Vec::new(),
            key_prefix: default_prefix(),
            filter: FilterChoice::default(),
            allow_eviction: false,
            require_eviction_check: false,
            username: None,
            password: None,
            tls: RawTls::default(),
            schema: None,
            pool_size: None,
            janitor: None,
            clock: Clock::default(),
            identity_check_interval: default_identity_check_interval(),
            tier1_layout: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    /// Address of /metrics, /healthz and /readyz. Default `127.0.0.1:9464`.
    #[serde(default = "default_listen")]
    pub(crate) listen: String,
    /// How long an output partition's last stable offset may stand below
    /// its high watermark before it counts as stalled by a transaction
    /// (`idemgate_output_partitions_stalled`, a WARN line). A live
    /// transaction holds it at most until the coordinator aborts it: the
    /// producer's `transaction.timeout.ms` (librdkafka's default 60 s),
    /// found past by the broker's next check
    /// (`transaction.abort.timed.out.transaction.cleanup.interval.ms`,
    /// 10 s by default). Default: those two plus a 20 s margin (90 s
    /// with librdkafka's defaults). At least 1s.
    #[serde(default, with = "crate::ttl::serde_duration_opt")]
    pub(crate) output_stall_after: Option<Duration>,
}

impl Default for RawMetrics {
    fn default() -> RawMetrics {
        RawMetrics {
            listen: default_listen(),
            output_stall_after: None,
        }
    }
}

/// How records are gathered into batches.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBatch {
    /// Most records per batch: one store round trip each. Default 1000.
    #[serde(default = "default_max_records")]
    pub(crate) max_records: NonZeroUsize,
    /// How long a batch waits for more records after its first. Default 20ms.
    #[serde(default = "default_linger", with = "crate::ttl::serde_duration")]
    pub(crate) linger: Duration,
    /// Most records read and not yet finished (claimed, produced,
    /// published), over every batch in flight. Default 20000.
    #[serde(default = "default_in_flight_records")]
    pub(crate) max_in_flight_records: NonZeroUsize,
    /// Most payload bytes held by records in flight. Default 64 MiB.
    #[serde(default = "default_in_flight_bytes")]
    pub(crate) max_in_flight_bytes: NonZeroUsize,
    /// How many batches the poller reads ahead of the loop. Default 4.
    #[serde(default = "default_read_ahead")]
    pub(crate) read_ahead: NonZeroUsize,
    /// How often finished offsets are committed (at least once: an
    /// OffsetCommit; exactly once: a transaction with the outputs since
    /// the last). `0s` commits after every batch. Default 100ms.
    #[serde(
        default = "default_commit_interval",
        with = "crate::ttl::serde_duration"
    )]
    pub(crate) commit_interval: Duration,
    /// Exactly once: how long a handover (a revoke, a stop) lets the
    /// records read finish before it commits. At most 30s. Default 10s.
    #[serde(
        default = "default_handover_drain",
        with = "crate::ttl::serde_duration"
    )]
    pub(crate) handover_drain: Duration,
    /// Exactly once: how long a transactional call (its offsets, its
    /// commit, an abort) may take before its outcome counts as unknown
    /// and the producer is built again. At least 1s. Default 30s.
    #[serde(
        default = "default_transaction_call_timeout",
        with = "crate::ttl::serde_duration"
    )]
    pub(crate) transaction_call_timeout: Duration,
}

impl Default for RawBatch {
    fn default() -> RawBatch {
        RawBatch {
            max_records: default_max_records(),
            linger: default_linger(),
            max_in_flight_records: default_in_flight_records(),
            max_in_flight_bytes: default_in_flight_bytes(),
            read_ahead: default_read_ahead(),
            commit_interval: default_commit_interval(),
            handover_drain: default_handover_drain(),
            transaction_call_timeout: default_transaction_call_timeout(),
        }
    }
}

fn default_transaction_call_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_handover_drain() -> Duration {
    Duration::from_secs(10)
}

/// The longest `handover_drain`: the drain and the wait for deliveries
/// after it fit in the time a revoke waits for the loop (the worker holds
/// its patience to this at compile time).
pub(crate) const MAX_HANDOVER_DRAIN: Duration = Duration::from_secs(30);

fn default_commit_interval() -> Duration {
    Duration::from_millis(100)
}

fn default_in_flight_records() -> NonZeroUsize {
    const { nonzero_usize(20_000) }
}
fn default_in_flight_bytes() -> NonZeroUsize {
    const { nonzero_usize(64 << 20) }
}
fn default_read_ahead() -> NonZeroUsize {
    const { nonzero_usize(4) }
}
fn default_max_records() -> NonZeroUsize {
    const { nonzero_usize(1000) }
}
fn default_linger() -> Duration {
    Duration::from_millis(20)
}

/// One deduplicated stream: its topics, its hash, its memory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStream {
    /// Names the stream's key namespace: letters, digits, `.`, `_`, `-`.
    pub(crate) name: String,
    /// Raw topics read by this stream.
    pub(crate) inputs: Vec<String>,
    /// Where novel (and unverified) records go.
    pub(crate) clean: String,
    /// Where duplicates, conflicts and invalid records go, with the reason.
    pub(crate) audit: String,
    /// `header`, `record-key`, `fields`, `payload`, `payload-raw`,
    /// `bank-txn` or `spatial-job`.
    pub(crate) profile: String,
    /// For `profile = "fields"`: `name:normaliser` pairs, comma separated.
    pub(crate) fields: Option<String>,
    /// For `profile = "header"`: the header. Default `x-idempotency-key`.
    pub(crate) header: Option<String>,
    /// Payload fields (dotted paths) the payload digest leaves out, such as
    /// a webhook's `attempt`: a retry differing only in them is a
    /// `duplicate`, not a `conflict`. Under `payload` they are left out of
    /// the hash too. Not for `payload-raw`. Default none.
    #[serde(default)]
    pub(crate) ignore: Vec<String>,
    /// Larger records are `invalid` (reason `too-large`). Default 900 KiB;
    /// with 64 KiB for key and headers it must fit the producer's
    /// `message.max.bytes`.
    #[serde(default = "default_max_record_bytes")]
    pub(crate) max_record_bytes: NonZeroUsize,
    /// `exact` (payments, edits: no false positives) or `tiered`.
    pub(crate) mode: Mode,
    /// How long a hash is remembered. In `exact` mode this is the tier-1
    /// TTL; in `tiered` mode it is the horizon the filter covers.
    pub(crate) ttl: TtlPolicy,
    /// Tiered mode: how long a hash stays an exact key (where most
    /// redeliveries land).
    #[serde(default, with = "crate::ttl::serde_duration_opt")]
    pub(crate) tier1_ttl: Option<Duration>,
    /// Tiered mode: live filter generations, 2 or more. Default 2.
    #[serde(default = "default_slots")]
    pub(crate) filter_slots: NonZeroU32,
    /// Tiered mode: false-positive rate of one generation. Default 0.001.
    #[serde(default = "default_fp_rate")]
    pub(crate) fp_rate: f64,
    /// Expected peak records per second, above zero. Tiered mode: needed;
    /// with the horizon it sizes each generation. Exact mode: optional,
    /// default none; `idemgate plan --config` and `check` print the
    /// stream's claims, memory and disk at this rate (without it, per
    /// event/s).
    pub(crate) peak_rate: Option<NonZeroU64>,
    /// Tiered mode: largest clock difference between replicas that a
    /// rotation tolerates. Default 5s.
    #[serde(default = "default_skew", with = "crate::ttl::serde_duration")]
    pub(crate) clock_skew: Duration,
    /// The stream's short namespace in the store (1 to 4 letters or
    /// digits). Default: two characters derived from the name; set it where
    /// two streams' derived ids collide, and never change it on a live
    /// stream (its claims would be forgotten).
    pub(crate) key_id: Option<String>,
    /// What happens while the store is unreachable. Default `closed`.
    #[serde(default)]
    pub(crate) fail_mode: FailMode,
    /// Decide, claim and count as usual, but route every record to the
    /// clean topic with its decision headers (duplicates, conflicts and
    /// invalid records included): for trying idemgate on a live feed before
    /// it suppresses anything. Default false.
    #[serde(default)]
    pub(crate) shadow: bool,
}

pub(super) fn default_prefix() -> String {
    "ig:".into()
}
fn default_listen() -> String {
    "127.0.0.1:9464".into()
}
/// 900 KiB: with 64 KiB for key and headers, under librdkafka's default
/// `message.max.bytes` (1,000,000) and Kafka's default broker limit.
fn default_max_record_bytes() -> NonZeroUsize {
    const { nonzero_usize(900 * 1024) }
}
fn default_slots() -> NonZeroU32 {
    const { nonzero_u32(2) }
}
fn default_fp_rate() -> f64 {
    0.001
}
fn default_skew() -> Duration {
    Duration::from_secs(5)
}

// Default counts, checked when the crate compiles (callers use them in a
// `const` block): a zero default fails the build, not a start.
const fn nonzero_usize(n: usize) -> NonZeroUsize {
    match NonZeroUsize::new(n) {
        Some(n) => n,
        None => panic!("a default count is zero"),
    }
}
const fn nonzero_u32(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(n) => n,
        None => panic!("a default count is zero"),
    }
}
