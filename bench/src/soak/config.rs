//! The replicas' config: both streams in one group, each replica with its
//! own `transactional.id` under exactly-once. On Redis the telemetry stream
//! is tiered (tier 1 for `--tier1-ttl`, the filter for the hour); on
//! PostgreSQL, which keeps exact claims only, it is exact with that short
//! TTL as its whole horizon.

use serde::Serialize;

use super::store::StoreKind;

/// The delivery guarantee a soak run exercises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) enum Guarantee {
    AtLeastOnce,
    ExactlyOnce,
}

impl Guarantee {
    pub fn parse(text: &str) -> anyhow::Result<Guarantee> {
        match text {
            "at-least-once" => Ok(Guarantee::AtLeastOnce),
            "exactly-once" => Ok(Guarantee::ExactlyOnce),
            other => anyhow::bail!("unknown guarantee {other:?}: at-least-once or exactly-once"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Guarantee::AtLeastOnce => "at-least-once",
            Guarantee::ExactlyOnce => "exactly-once",
        }
    }
}

/// The topics of one run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Topics {
    /// By stream (bank, telemetry): input, clean, audit.
    pub input: [String; 2],
    pub clean: [String; 2],
    pub audit: [String; 2],
    pub partitions: i32,
}

impl Topics {
    pub fn named(run: &str, partitions: i32) -> Topics {
        let name = |stream: &str, role: &str| format!("{run}.{stream}.{role}");
        Topics {
            input: [name("bank", "raw"), name("telemetry", "raw")],
            clean: [name("bank", "clean"), name("telemetry", "clean")],
            audit: [name("bank", "audit"), name("telemetry", "audit")],
            partitions,
        }
    }

    /// Clean and audit of both streams, in the collector's order: bank
    /// clean, bank audit, telemetry clean, telemetry audit.
    pub fn outputs(&self) -> Vec<(String, i32)> {
        (0..2)
            .flat_map(|s| {
                [
                    (self.clean[s].clone(), self.partitions),
                    (self.audit[s].clone(), self.partitions),
                ]
            })
            .collect()
    }

    pub fn inputs(&self) -> Vec<(String, i32)> {
        self.input
            .iter()
            .map(|t| (t.clone(), self.partitions))
            .collect()
    }
}

/// What every replica shares.
pub(crate) struct Common<'a> {
    pub guarantee: Guarantee,
    pub brokers: &'a str,
    pub group: &'a str,
    pub store: StoreKind,
    pub store_url: &'a str,
    /// Redis only: the keys' prefix.
    pub key_prefix: &'a str,
    pub topics: &'a Topics,
    pub tier1_ttl_s: u64,
    pub batch: usize,
}

/// Replica `n`'s TOML.
pub(crate) fn replica_toml(c: &Common<'_>, n: usize) -> String {
    let (guarantee, txn) = match c.guarantee {
        Guarantee::AtLeastOnce => (String::new(), String::new()),
        Guarantee::ExactlyOnce => (
            "guarantee = \"exactly-once\"\n".to_string(),
            format!("\"transactional.id\" = \"soak-{n}\"\n"),
        ),
    };
    let t = c.topics;
    let (store, telemetry) = store_and_telemetry(c);
    // librdkafka's own debug contexts (`cgrp`, `topic`, ...) when asked.
    let debug = std::env::var("SOAK_KAFKA_DEBUG")
        .map(|d| format!("\"debug\" = \"{d}\"\n"))
        .unwrap_or_default();
    format!(
        r#"{guarantee}
[kafka]
"bootstrap.servers" = "{brokers}"
"group.id" = "{group}"
"auto.offset.reset" = "earliest"
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
{txn}{debug}
[store]
{store}
[metrics]
listen = "127.0.0.1:0"

[batch]
max_records = {batch}
linger = "20ms"

[[streams]]
name = "bank"
inputs = ["{bank_in}"]
clean = "{bank_clean}"
audit = "{bank_audit}"
profile = "bank-txn"
mode = "exact"
ttl = {{ explicit = "1h" }}
fail_mode = "closed"

[[streams]]
name = "telemetry"
inputs = ["{tel_in}"]
clean = "{tel_clean}"
audit = "{tel_audit}"
profile = "payload"
{telemetry}fail_mode = "open"
"#,
        brokers = c.brokers,
        group = c.group,
        batch = c.batch,
        bank_in = t.input[0],
        bank_clean = t.clean[0],
        bank_audit = t.audit[0],
        tel_in = t.input[1],
        tel_clean = t.clean[1],
        tel_audit = t.audit[1],
    )
}

/// The `[store]` table and the telemetry stream's mode and TTL.
fn store_and_telemetry(c: &Common<'_>) -> (String, String) {
    let tier1 = c.tier1_ttl_s;
    match c.store {
        StoreKind::Redis => (
            format!(
                "kind = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\n",
                c.store_url, c.key_prefix
            ),
            format!(
                "mode = \"tiered\"\nttl = {{ explicit = \"1h\" }}\ntier1_ttl = \"{tier1}s\"\npeak_rate = 20000\n"
            ),
        ),
        StoreKind::Postgres => (
            format!("kind = \"postgres\"\nurl = \"{}\"\n", c.store_url),
            format!("mode = \"exact\"\nttl = {{ explicit = \"{tier1}s\" }}\n"),
        ),
    }
}

/// Whether this build of idemgate takes the guarantee on the store (the
/// config parses); the refusal otherwise.
pub(crate) fn supported(guarantee: Guarantee, store: StoreKind) -> Result<(), String> {
    let topics = Topics::named("probe", 1);
    let common = Common {
        guarantee,
        brokers: "127.0.0.1:9092",
        group: "probe",
        store,
        store_url: match store {
            StoreKind::Redis => "redis://127.0.0.1:6379",
            StoreKind::Postgres => "postgres://idemgate@127.0.0.1:5432/idemgate?sslmode=disable",
        },
        key_prefix: "probe:",
        topics: &topics,
        tier1_ttl_s: 60,
        batch: 500,
    };
    idemgate::config::Config::parse(&replica_toml(&common, 0))
        .map(|_| ())
        .map_err(|e| e.to_string())
}
