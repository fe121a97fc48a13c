//! The replicas' config: both streams in one group, each replica with its
//! own `transactional.id` under exactly-once.

use serde::Serialize;

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
    pub redis_url: &'a str,
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
kind = "redis"
url = "{redis}"
key_prefix = "{prefix}"

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
mode = "tiered"
ttl = {{ explicit = "1h" }}
tier1_ttl = "{tier1}s"
peak_rate = 20000
fail_mode = "open"
"#,
        brokers = c.brokers,
        group = c.group,
        redis = c.redis_url,
        prefix = c.key_prefix,
        batch = c.batch,
        bank_in = t.input[0],
        bank_clean = t.clean[0],
        bank_audit = t.audit[0],
        tel_in = t.input[1],
        tel_clean = t.clean[1],
        tel_audit = t.audit[1],
        tier1 = c.tier1_ttl_s,
    )
}

/// Whether this build of idemgate takes the guarantee (an exactly-once
/// config parses); the refusal otherwise.
pub(crate) fn supported(guarantee: Guarantee) -> Result<(), String> {
    let topics = Topics::named("probe", 1);
    let common = Common {
        guarantee,
        brokers: "127.0.0.1:9092",
        group: "probe",
        redis_url: "redis://127.0.0.1:6379",
        key_prefix: "probe:",
        topics: &topics,
        tier1_ttl_s: 60,
        batch: 500,
    };
    idemgate::config::Config::parse(&replica_toml(&common, 0))
        .map(|_| ())
        .map_err(|e| e.to_string())
}
