//! A transactional commit read back from its group's coordinator, and the
//! rule that judges it: whether the brokers keep the metadata of a
//! transactional offset commit (docs/design.md §7). Exactly once settles
//! the claims a replica left below its committed offset (it stopped
//! between a commit and its settlements) from that metadata alone; a
//! broker that drops it strands them, and their copies pass once the
//! claims expire.
//!
//! Two readers of one rule, `verdict`: `check` commits a probe transaction
//! on a group of its own (`ops::check::txn`), and the worker reads back its
//! own first transactional commit (`worker/resolve.rs`).

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

/// What a broker that dropped the metadata is told.
const DROPPED: &str = "the brokers dropped the metadata of a transactional offset commit: exactly once settles the claims a stopped replica left below its committed offset from that metadata alone, so on these brokers such claims stay unsettled and their copies pass once the claims expire (docs/design.md §7); run at least once on them, or use brokers that keep it (Apache Kafka does)";

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

/// Reads `list`'s partitions back from the consumer's group coordinator,
/// beside what `list` wrote, for `verdict` to judge.
pub(crate) fn read_back<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    list: &TopicPartitionList,
    timeout: Duration,
) -> Result<Vec<ReadBack>, KafkaError> {
    let mut ask = TopicPartitionList::new();
    for element in list.elements() {
        ask.add_partition(element.topic(), element.partition());
    }
    let answered = consumer.committed_offsets(ask, timeout)?;
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
