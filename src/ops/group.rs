//! A replica's consumer group as the operator's commands and the start-up
//! identity check see it, from outside: a client with the group's
//! `group.id` that never joins it, asking for its members and its
//! committed offsets (with their metadata).

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::Config;
use crate::group::{group_members, MembersError};
use crate::ops::kafka::{QuietContext, REQUEST_TIMEOUT};

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// Members would race what the command writes (their commits, their
    /// rounds).
    #[error(
        "group {group} has {members} active member(s): stop every replica (and wait for their \
         sessions to end) first"
    )]
    Active { group: String, members: usize },
    #[error("kafka: cannot make a client from [kafka]: {0}")]
    Client(KafkaError),
    #[error("kafka: describing group {group}: {error}")]
    Describe { group: String, error: MembersError },
    #[error("kafka: metadata of {topic}: {error}")]
    Metadata { topic: String, error: KafkaError },
    #[error("kafka: topic {0} is not there")]
    TopicMissing(String),
    #[error("kafka: committed offsets: {0}")]
    Committed(KafkaError),
    /// The blocking task that asked died (a panic, or the runtime going).
    #[error("kafka: {0}")]
    Task(tokio::task::JoinError),
}

/// A client of the group `config` names, outside it, and the group's name.
pub(crate) fn client(config: &Config) -> Result<(BaseConsumer<QuietContext>, String), GroupError> {
    let (consumer_config, _) = crate::config::client_configs(config);
    let group = config.group_id().to_string();
    let consumer = consumer_config
        .create_with_context(QuietContext)
        .map_err(GroupError::Client)?;
    Ok((consumer, group))
}

/// [`client`], reading committed offsets without waiting for the
/// transactions still open on them (`isolation.level` read_uncommitted:
/// the offset fetch does not require stable offsets, so a partition with
/// an open transaction answers its last committed offset instead of an
/// error retried until it is decided). For the progress marks: a replica
/// killed inside a transaction must not hold its successor's start for
/// the transaction timeout, and the last committed marks are floors as
/// good as any.
pub(crate) fn client_reading_pending(
    config: &Config,
) -> Result<BaseConsumer<QuietContext>, GroupError> {
    let (mut consumer_config, _) = crate::config::client_configs(config);
    consumer_config.set("isolation.level", "read_uncommitted");
    consumer_config
        .create_with_context(QuietContext)
        .map_err(GroupError::Client)
}

/// Refused while the group has members, asked in a way that sees the
/// members of either group protocol (`group::group_members`).
pub(crate) fn refuse_if_active(
    consumer: &BaseConsumer<QuietContext>,
    group: &str,
) -> Result<(), GroupError> {
    let members = group_members(consumer.client(), group, REQUEST_TIMEOUT).map_err(|error| {
        GroupError::Describe {
            group: group.to_string(),
            error,
        }
    })?;
    if members > 0 {
        return Err(GroupError::Active {
            group: group.to_string(),
            members,
        });
    }
    Ok(())
}

/// One partition's committed offset, with the commit's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
}

/// Every partition of `topics` (from the brokers' metadata); a topic the
/// brokers do not have is an error.
pub(crate) fn partitions(
    consumer: &BaseConsumer<QuietContext>,
    topics: &[String],
) -> Result<Vec<(String, i32)>, GroupError> {
    let mut out = Vec::new();
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
            .map_err(|error| GroupError::Metadata {
                topic: topic.clone(),
                error,
            })?;
        let count = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map(|t| t.partitions().len())
            .filter(|n| *n > 0)
            .ok_or_else(|| GroupError::TopicMissing(topic.clone()))?;
        out.extend((0..count as i32).map(|p| (topic.clone(), p)));
    }
    Ok(out)
}

/// The group's committed offsets on `partitions` (those without one left
/// out).
pub(crate) fn committed(
    consumer: &BaseConsumer<QuietContext>,
    partitions: &[(String, i32)],
) -> Result<Vec<Committed>, GroupError> {
    let mut list = TopicPartitionList::new();
    for (topic, partition) in partitions {
        list.add_partition(topic, *partition);
    }
    // A group coordinator that is moving or still loading (a broker just
    // started, or restarted) answers the fetch with an error that passes:
    // asked again, within the request timeout.
    let until = std::time::Instant::now() + REQUEST_TIMEOUT;
    let found = loop {
        match consumer.committed_offsets(list.clone(), REQUEST_TIMEOUT) {
            Ok(found) => break found,
            Err(error) if coordinator_passing(&error) && std::time::Instant::now() < until => {
                // Waits on the broker's coordinator, not on a guess.
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Err(error) => return Err(GroupError::Committed(error)),
        }
    };
    Ok(found
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(offset) => Some(Committed {
                topic: e.topic().to_string(),
                partition: e.partition(),
                offset,
                metadata: e.metadata().to_string(),
            }),
            _ => None,
        })
        .collect())
}

/// Whether an error of a group request says its coordinator is moving or
/// loading, which passes by itself.
fn coordinator_passing(error: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(
            Code::NotCoordinator | Code::CoordinatorLoadInProgress | Code::CoordinatorNotAvailable
        )
    )
}

/// Whether any of `committed` is idemgate's for the stream of `key_id`
/// (metadata `idemgate/3 <key_id> ...`, or `idemgate/2` of before).
pub(crate) fn has_idemgate_commits(committed: &[Committed], key_id: &str) -> bool {
    committed
        .iter()
        .any(|c| crate::worker::metadata::is_ours(key_id, &c.metadata))
}

/// Place by place, the highest progress mark the commits' metadata for
/// the stream of `key_id` records (docs/design.md §8.2); empty where none
/// does. A commit without idemgate's metadata (Kafka's own reset tool)
/// records none.
pub(crate) fn highest_marks(key_id: &str, committed: &[Committed]) -> Vec<u64> {
    let mut highest: Vec<u64> = Vec::new();
    for c in committed {
        let Ok(Some(read)) = crate::worker::metadata::parse(key_id, &c.metadata) else {
            continue;
        };
        if highest.len() < read.marks.len() {
            highest.resize(read.marks.len(), 0);
        }
        for (h, m) in highest.iter_mut().zip(read.marks) {
            *h = (*h).max(m);
        }
    }
    highest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_marks_are_taken_place_by_place_from_idemgates_commits_alone() {
        let at = |metadata: &str| Committed {
            topic: "t".into(),
            partition: 0,
            offset: 5,
            metadata: metadata.into(),
        };
        let committed = [
            at("idemgate/3 Ab gap-free m=3,a,1"),
            at("idemgate/3 Ab gaps d=1.1 m=5,2"),
            at("idemgate/3 Cd gap-free m=zz,zz,zz"),
            at(""),
            at("idemgate/3 Ab gap-free"),
        ];
        assert_eq!(highest_marks("Ab", &committed), vec![5, 10, 1]);
        assert!(highest_marks("Ef", &committed).is_empty());
    }

    /// A coordinator still loading or moving (a broker that just started)
    /// answers the first fetches with errors that pass: the committed
    /// offsets are asked again and found, where a start used to refuse.
    #[test]
    fn committed_offsets_are_asked_again_while_the_coordinator_loads_or_moves() {
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
        let mock = crate::demo::mock::MockKafka::start(1, 0).expect("mock cluster");
        mock.create_topic("raw", 1).expect("topic");
        let consumer: BaseConsumer<QuietContext> = rdkafka::ClientConfig::new()
            .set(
                "bootstrap.servers",
                mock.bootstrap_servers().expect("servers"),
            )
            .set("group.id", "coordinator-moves")
            .create_with_context(QuietContext)
            .expect("consumer");
        mock.cluster().expect("cluster").request_errors(
            RDKafkaApiKey::OffsetFetch,
            &[
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
            ],
        );
        let found = committed(&consumer, &[("raw".into(), 0)]).expect("found after retries");
        assert!(
            found.is_empty(),
            "nothing was committed: {} found",
            found.len()
        );
    }

    fn commit(metadata: &str) -> Committed {
        Committed {
            topic: "raw".into(),
            partition: 0,
            offset: 5,
            metadata: metadata.into(),
        }
    }

    #[test]
    fn only_idemgates_commits_for_the_stream_count() {
        assert!(has_idemgate_commits(
            &[commit(""), commit("idemgate/2 Ab gaps")],
            "Ab"
        ));
        assert!(!has_idemgate_commits(
            &[commit("idemgate/2 Cd gap-free")],
            "Ab"
        ));
        assert!(!has_idemgate_commits(&[commit("")], "Ab"), "Kafka's tool");
        assert!(!has_idemgate_commits(&[], "Ab"));
    }
}
