//! `check`'s probe of whether the brokers keep the metadata of a
//! transactional offset commit (docs/design.md §7): a transaction on a
//! group of its own (`probe`, blocking), read back and judged by the rule
//! the worker applies to its own first commit (`group::read_back`).

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::Finding;
use crate::config::{Config, Guarantee};
use crate::group::{read_back, verdict, ReadBack};
use crate::ops::kafka::REQUEST_TIMEOUT;

/// How long the probe's transactional requests may take.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);

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
    let group = format!("{}-check-{suffix}", config.group_id());
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
        read_back(&consumer, &list, REQUEST_TIMEOUT).map_err(ProbeError::ReadBack)
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
    let admin: Result<rdkafka::admin::AdminClient<crate::ops::kafka::QuietContext>, _> =
        consumer_config.create_with_context(crate::ops::kafka::QuietContext);
    if let Ok(admin) = admin {
        let options = rdkafka::admin::AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
        let _ = futures::executor::block_on(admin.delete_groups(&[group], &options));
    }
}
