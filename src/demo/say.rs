//! What the demo says around its table: first what runs, last what to try
//! next. Pure: the text from the demo's config.

use crate::config::Config;
use crate::store::Mode;

/// The demo's first line: the replicas, the cluster, the store and each
/// stream with its topics, as the embedded config has them.
pub(super) fn intro(config: &Config, replicas: usize, brokers: u32) -> String {
    let streams: Vec<String> = config
        .streams
        .iter()
        .map(|s| {
            let mode = match s.spec.mode {
                Mode::Exact => "exact",
                Mode::Tiered => "tiered",
            };
            format!(
                "{} ({mode}: {} -> {} + {})",
                s.spec.name,
                s.inputs.join(", "),
                s.clean,
                s.audit
            )
        })
        .collect();
    format!(
        "idemgate demo: {replicas} replicas in one consumer group, on librdkafka's in-process \
         mock cluster ({brokers} brokers, nothing outside this process), with the memory store \
         on event time; streams {}",
        streams.join(", ")
    )
}

/// The demo's last lines: where to go from here.
pub(crate) const NEXT: &str = "\
next:
  run it on your own Kafka:   docs/getting-started.md
  check a config of yours:    idemgate check --config <file>   (the brokers and the store too; --offline: the file only)
  the docs:                   README.md, docs/";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intro_names_the_replicas_the_cluster_the_store_and_every_stream() {
        let config = Config::parse_with_vars(super::super::CONFIG, |name| {
            (name == crate::config::ENV_BROKERS).then(|| "mock:9092".to_string())
        })
        .unwrap();
        let intro = intro(&config, 2, 3);
        assert!(!intro.contains('\n'), "one line: {intro}");
        for part in [
            "2 replicas",
            "librdkafka's in-process mock cluster (3 brokers",
            "memory store",
            "bank (exact: raw.bank -> clean.bank + audit.bank)",
            "telemetry (tiered: raw.telemetry -> clean.telemetry + audit.telemetry)",
        ] {
            assert!(intro.contains(part), "{part:?} not in: {intro}");
        }
    }
}
