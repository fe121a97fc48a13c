//! Whether the brokers keep the metadata of a transactional offset commit
//! (docs/design.md §7). Exactly once settles the claims a replica left
//! below its committed offset (it stopped between a commit and its
//! settlements) from that metadata alone; a broker that drops it strands
//! them, and their copies pass once the claims expire.
//!
//! Two readers of one rule, `verdict`: `check` commits a probe transaction
//! on a group of its own (`probe`, blocking), and the worker reads back
//! its own first transactional commit (`worker/transaction.rs`).

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::check::Finding;
use super::kafka::REQUEST_TIMEOUT;
use crate::config::{Config, Guarantee};

/// How long the probe's transactional requests may take.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);

/// What a broker that dropped the metadata is told.
pub(crate) const DROPPED: &str = "the brokers dropped the metadata of a transactional offset commit: exactly once settles the claims a stopped replica left below its committed offset from that metadata alone, so on these brokers such claims stay unsettled and their copies pass once the claims expire (docs/design.md §7); run at least once on them, or use brokers that keep it (Apache Kafka does)";

/// A partition read back at the offset written without the metadata
/// written: the brokers dropped it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{DROPPED} ({partition} at offset {offset}: wrote {written:?}, read back {read:?})")]
pub(crate) struct MetadataDropped {
    partition: String,
    offset: i64,
    written: String,
    read: String,
}

/// A step of the probe (or of reading a commit back) that failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    #[error("a consumer for the probe group: {0}")]
    Consumer(KafkaError),
    #[error("a transactional producer: {0}")]
    Producer(KafkaError),
    #[error("{0}")]
    Partition(KafkaError),
    #[error("no consumer group metadata for the probe group")]
    NoGroupMetadata,
    #[error("init_transactions: {0}")]
    InitTransactions(KafkaError),
    #[error("begin_transaction: {0}")]
    BeginTransaction(KafkaError),
    #[error("send_offsets_to_transaction: {0}")]
    SendOffsets(KafkaError),
    #[error("commit_transaction: {0}")]
    CommitTransaction(KafkaError),
    #[error("reading the committed offsets back: {0}")]
    ReadBack(KafkaError),
}

impl ProbeError {
    /// The brokers' ACLs refused the probe (its group, its transactional
    /// id or the topic), not the transaction itself.
    fn is_authorization(&self) -> bool {
        use rdkafka::types::RDKafkaErrorCode as Code;
        let code = match self {
            ProbeError::InitTransactions(e)
            | ProbeError::BeginTransaction(e)
            | ProbeError::SendOffsets(e)
            | ProbeError::CommitTransaction(e)
            | ProbeError::ReadBack(e) => e.rdkafka_error_code(),
            _ => None,
        };
        matches!(
            code,
            Some(
                Code::TransactionalIdAuthorizationFailed
                    | Code::GroupAuthorizationFailed
                    | Code::TopicAuthorizationFailed
                    | Code::ClusterAuthorizationFailed
            )
        )
    }
}

/// A partition's commit as written and as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadBack {
    pub(crate) partition: String,
    pub(crate) offset: i64,
    pub(crate) written: String,
    /// The offset and metadata the group coordinator answers now.
    pub(crate) read: Option<(i64, String)>,
}

/// The rule: a partition read back at the offset written must carry the
/// metadata written. One read back at another offset (a newer commit came
/// between) says nothing; `None` where no partition said anything.
pub(crate) fn verdict(read_back: &[ReadBack]) -> Option<Result<(), MetadataDropped>> {
    let mut kept = None;
    for r in read_back {
        match &r.read {
            Some((offset, metadata)) if *offset == r.offset => {
                if *metadata != r.written {
                    return Some(Err(MetadataDropped {
                        partition: r.partition.clone(),
                        offset: r.offset,
                        written: r.written.clone(),
                        read: metadata.clone(),
                    }));
                }
                kept = Some(Ok(()));
            }
            _ => {}
        }
    }
    kept
}

/// Reads `list`'s partitions back from `group`'s coordinator and judges
/// them against what `list` wrote.
pub(crate) fn read_back<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    list: &TopicPartitionList,
) -> Result<Vec<ReadBack>, ProbeError> {
    let mut ask = TopicPartitionList::new();
    for element in list.elements() {
        ask.add_partition(element.topic(), element.partition());
    }
    let answered = consumer
        .committed_offsets(ask, REQUEST_TIMEOUT)
        .map_err(ProbeError::ReadBack)?;
    Ok(list
        .elements()
        .iter()
        .map(|element| {
            let read = answered
                .find_partition(element.topic(), element.partition())
                .and_then(|a| match a.offset() {
                    Offset::Offset(offset) => Some((offset, a.metadata().to_string())),
                    _ => None,
                });
            ReadBack {
                partition: format!("{}/{}", element.topic(), element.partition()),
                offset: match element.offset() {
                    Offset::Offset(offset) => offset,
                    _ => -1,
                },
                written: element.metadata().to_string(),
                read,
            }
        })
        .collect())
}

/// `check`, for an exactly-once config: a transaction of its own commits
/// an offset with metadata for a group of its own (on partition 0 of the
/// first input topic), reads it back, and deletes the group.
pub(crate) fn probe(config: &Config) -> Option<Finding> {
    if config.guarantee != Guarantee::ExactlyOnce {
        return None;
    }
    const SUBJECT: &str = "transactions";
    let topic = config.streams.first()?.inputs.first()?.clone();
    let suffix = format!(
        "{:016x}",
        std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            std::process::id()
        )
    );
    // Named after the replicas' own group and transactional id, so the
    // prefixed ACLs a deployment grants its replicas cover the probe too.
    let (mut consumer_config, mut producer_config) = crate::config::client_configs(config);
    let group = format!(
        "{}-check-{suffix}",
        consumer_config.get("group.id").unwrap_or("idemgate")
    );
    let transactional_id = format!(
        "{}-check-{suffix}",
        producer_config
            .get("transactional.id")
            .unwrap_or("idemgate")
    );
    consumer_config.set("group.id", &group);
    producer_config.set("transactional.id", &transactional_id);
    let result = (|| -> Result<Vec<ReadBack>, ProbeError> {
        let consumer: BaseConsumer = consumer_config.create().map_err(ProbeError::Consumer)?;
        let producer: BaseProducer = producer_config.create().map_err(ProbeError::Producer)?;
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&topic, 0, Offset::Offset(0))
            .map_err(ProbeError::Partition)?;
        // As long as the longest metadata a replica writes: brokers whose
        // `offset.metadata.max.bytes` is lower refuse it here.
        let mut written = format!("idemgate-check {suffix} ");
        let pad = crate::worker::metadata::MAX_LEN.saturating_sub(written.len());
        written.extend(std::iter::repeat_n('.', pad));
        if let Some(mut element) = list.find_partition(&topic, 0) {
            element.set_metadata(written.as_str());
        }
        let metadata = consumer
            .group_metadata()
            .ok_or(ProbeError::NoGroupMetadata)?;
        producer
            .init_transactions(TXN_TIMEOUT)
            .map_err(ProbeError::InitTransactions)?;
        producer
            .begin_transaction()
            .map_err(ProbeError::BeginTransaction)?;
        producer
            .send_offsets_to_transaction(&list, &metadata, TXN_TIMEOUT)
            .map_err(ProbeError::SendOffsets)?;
        producer
            .commit_transaction(TXN_TIMEOUT)
            .map_err(ProbeError::CommitTransaction)?;
        read_back(&consumer, &list)
    })();
    delete_group(config, &group);
    Some(match result {
        Err(why) if why.is_authorization() => Finding::warn(
            SUBJECT,
            format!("a probe transaction was not authorized ({why}): the probe needs the replicas' rights on group {group} and transactional id {transactional_id} (prefixed ACLs on the group.id and transactional.id cover them); whether the brokers keep transactional offset metadata is not known, each replica reads back its first commit"),
        ),
        Err(why) => Finding::fail(
            SUBJECT,
            format!("a probe transaction on group {group} failed: {why}: exactly once needs transactions on these brokers, and offset metadata of {} bytes (offset.metadata.max.bytes, Kafka's default 4096)", crate::worker::metadata::MAX_LEN),
        ),
        Ok(read) => match verdict(&read) {
            Some(Ok(())) => Finding::ok(
                SUBJECT,
                format!("a probe transaction's offset metadata read back as written (group {group}, deleted): exactly once can settle a stopped replica's claims"),
            ),
            Some(Err(why)) => Finding::fail(SUBJECT, why.to_string()),
            None => Finding::fail(
                SUBJECT,
                format!("a probe transaction's offset was not read back (group {group}): {read:?}"),
            ),
        },
    })
}

/// The probe group goes again; a group left behind is harmless (no
/// member, offsets that expire with `offsets.retention.minutes`).
fn delete_group(config: &Config, group: &str) {
    let (consumer_config, _) = crate::config::client_configs(config);
    let admin: Result<rdkafka::admin::AdminClient<super::kafka::QuietContext>, _> =
        consumer_config.create_with_context(super::kafka::QuietContext);
    if let Ok(admin) = admin {
        let options = rdkafka::admin::AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
        let _ = futures::executor::block_on(admin.delete_groups(&[group], &options));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn back(offset: i64, written: &str, read: Option<(i64, &str)>) -> ReadBack {
        ReadBack {
            partition: "raw.bank/0".into(),
            offset,
            written: written.into(),
            read: read.map(|(o, m)| (o, m.to_string())),
        }
    }

    #[test]
    fn metadata_read_back_as_written_is_kept() {
        assert_eq!(
            verdict(&[back(7, "idemgate/2 g", Some((7, "idemgate/2 g")))]),
            Some(Ok(()))
        );
    }

    #[test]
    fn metadata_missing_at_the_offset_written_is_a_refusal_that_says_why() {
        let why = verdict(&[back(7, "idemgate/2 g", Some((7, "")))])
            .expect("a verdict")
            .expect_err("dropped")
            .to_string();
        assert!(
            why.contains("dropped the metadata") && why.contains("at least once"),
            "{why}"
        );
        assert!(verdict(&[back(7, "a", Some((7, "b")))]).unwrap().is_err());
    }

    #[test]
    fn a_partition_read_at_another_offset_says_nothing() {
        assert_eq!(verdict(&[back(7, "a", Some((9, "")))]), None);
        assert_eq!(verdict(&[back(7, "a", None)]), None);
        assert_eq!(
            verdict(&[back(7, "a", Some((9, ""))), back(3, "b", Some((3, "b")))]),
            Some(Ok(()))
        );
    }
}
