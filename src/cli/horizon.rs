//! `idemgate horizon`: retry horizons from a delivery log on stdin or a
//! recorded topic.

use std::io::Read;

use anyhow::Context;

use super::duration;
use crate::ops::horizon::topic::{read_topic, Locator, TopicSource};
use crate::ops::horizon::{measure, parse_log, report, rfc3339_ms, NumericTimes};

#[derive(clap::Args)]
pub struct HorizonArgs {
    /// Stdin: the unit of a numeric `received_at` (RFC 3339 strings need
    /// none); a number without it is refused.
    #[arg(long, value_enum, conflicts_with = "topic")]
    pub numeric_times: Option<NumericTimes>,
    /// Read a recorded topic on these brokers instead of stdin.
    #[arg(long, requires = "topic")]
    pub brokers: Option<String>,
    /// The recorded topic: every partition, from the beginning (or --from)
    /// until no record has arrived for --quiet.
    #[arg(long, requires = "brokers")]
    pub topic: Option<String>,
    /// JSON field (dotted path) of the delivery id [default: delivery_id].
    #[arg(long, requires = "topic", conflicts_with = "id_header")]
    pub id_field: Option<String>,
    /// Header of the delivery id.
    #[arg(long, requires = "topic")]
    pub id_header: Option<String>,
    /// JSON field (dotted path) of the sender [default: sender].
    #[arg(long, requires = "topic", conflicts_with = "sender_header")]
    pub sender_field: Option<String>,
    /// Header of the sender.
    #[arg(long, requires = "topic")]
    pub sender_header: Option<String>,
    /// Only records timestamped at or after this RFC 3339 time.
    #[arg(long, requires = "topic")]
    pub from: Option<String>,
    /// Only records timestamped before this RFC 3339 time.
    #[arg(long, requires = "topic")]
    pub to: Option<String>,
    /// Reading ends once no record has arrived for this long (at most 10m)
    /// [default: 5s].
    #[arg(long, requires = "topic")]
    pub quiet: Option<String>,
    /// Further librdkafka properties for reading the topic (TLS, SASL).
    #[arg(long = "kafka", value_name = "KEY=VALUE", requires = "topic")]
    pub kafka: Vec<String>,
}

impl HorizonArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let Some(topic) = self.topic else {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the delivery log from stdin")?;
            let attempts = parse_log(&text, self.numeric_times)?;
            print!("{}", report(&measure(&attempts, "stdin")?));
            return Ok(());
        };
        let locate = |field: Option<String>, header: Option<String>, default: &str| match header {
            Some(name) => Locator::Header(name),
            None => Locator::Field(field.unwrap_or_else(|| default.to_string())),
        };
        let time = |flag: &str, text: Option<String>| {
            text.map(|t| rfc3339_ms(&t).with_context(|| format!("--{flag}")))
                .transpose()
        };
        let properties = self
            .kafka
            .iter()
            .map(|pair| {
                pair.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .with_context(|| format!("--kafka {pair}: KEY=VALUE"))
            })
            .collect::<anyhow::Result<_>>()?;
        let source = TopicSource {
            brokers: self.brokers.context("--brokers is needed with --topic")?,
            topic,
            properties,
            id: locate(self.id_field, self.id_header, "delivery_id"),
            sender: locate(self.sender_field, self.sender_header, "sender"),
            from_ms: time("from", self.from)?,
            to_ms: time("to", self.to)?,
            quiet: duration("quiet", self.quiet.as_deref().unwrap_or("5s"))?,
        };
        let recording = read_topic(&source)?;
        eprintln!(
            "read {} records from {} partitions of {} ({} outside --from/--to)",
            recording.records, recording.partitions, source.topic, recording.outside
        );
        print!(
            "{}",
            report(&measure(&recording.attempts, &source.describe())?)
        );
        Ok(())
    }
}
