//! Exactly once: a transactional call whose outcome is unknown (it timed
//! out: a broker frozen, a coordinator unreachable), resolved
//! (docs/design.md §7). librdkafka leaves such a transaction in a state
//! nothing but a new producer ends, and tells its users to treat the
//! timeout as fatal; a crash would make the next owner replay. Instead
//! the lane's producer is built again (its epoch bump fences the old one:
//! the brokers finish a commit already prepared and abort one still open),
//! and the offsets the transaction sent are read back, stable now, to tell
//! which it was (`commit_failure::judge`). Also here: the read-back of a
//! replica's first commits, which checks that the brokers keep their
//! metadata.

use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{info, warn};

use super::commit_failure::{judge, Outcome, ReadBack};
use super::error::{Doing, WorkerError};
use super::lane::Lane;
use super::poller::GroupConsumer;

/// How many times the committed offsets are asked for.
const READ_ATTEMPTS: u32 = 10;
/// How long the read-back of a first commit may take: one that does not
/// answer is read again after the next commit.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(10);

/// What a transaction's offsets were, per partition: what it wrote, and
/// whether that differs from the last commit seen succeed there.
pub(crate) struct Sent {
    pub(crate) list: TopicPartitionList,
    pub(crate) moved: Vec<bool>,
}

/// Blocking: builds `lane`'s producer again and reads the outcome of the
/// transaction that sent `sent`. An error (the brokers still away after
/// every attempt, or an outcome that cannot be told) is the end of the
/// worker, as a timeout was before.
pub(crate) fn resolve(
    lane: &Lane,
    consumer: &GroupConsumer,
    sent: &Sent,
    timeout: Duration,
    error: KafkaError,
) -> Result<Outcome, KafkaError> {
    warn!(%error, "a transactional call timed out, its outcome unknown: the producer is built again, which ends the transaction, and its outcome is read back from the committed offsets");
    lane.rebuild(timeout)?;
    let mut ask = TopicPartitionList::new();
    for element in sent.list.elements() {
        ask.add_partition(element.topic(), element.partition());
    }
    let mut tried = 0;
    let answered = loop {
        tried += 1;
        match consumer.committed_offsets(ask.clone(), timeout) {
            Ok(answered) => break answered,
            Err(read) if tried < READ_ATTEMPTS => {
                warn!(error = %read, tried, "reading the committed offsets back: trying again");
                // Unstable offsets, a coordinator moving: a pause before the
                // next question (no wake-up to wait on).
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(read) => return Err(read),
        }
    };
    let read_back: Vec<ReadBack> = sent
        .list
        .elements()
        .iter()
        .zip(&sent.moved)
        .map(|(element, &moved)| ReadBack {
            written: (offset_of(element.offset()), element.metadata().to_string()),
            read: answered
                .find_partition(element.topic(), element.partition())
                .and_then(|a| match a.offset() {
                    Offset::Offset(o) => Some((o, a.metadata().to_string())),
                    _ => None,
                }),
            moved,
        })
        .collect();
    judge(&read_back).ok_or(error)
}

/// An offset as a number (-1 for none).
pub(super) fn offset_of(offset: Offset) -> i64 {
    match offset {
        Offset::Offset(o) => o,
        _ => -1,
    }
}

impl super::Worker {
    /// Reads a commit back (this replica's first, until one partition
    /// answers at the offset written): a broker that dropped its metadata
    /// is the end of this worker, with why (docs/design.md §7). `true`
    /// once the metadata was seen kept.
    pub(super) async fn metadata_read_back(
        &self,
        written: TopicPartitionList,
    ) -> Result<bool, WorkerError> {
        let consumer = self.consumer.clone();
        let read = tokio::task::spawn_blocking(move || {
            crate::group::read_back(&consumer, &written, READ_BACK_TIMEOUT)
        })
        .await
        .doing("reading the first transactional commit back")?;
        match read {
            Err(why) => {
                warn!(%why, "the first transactional commit could not be read back: read again after the next one");
                Ok(false)
            }
            Ok(read) => match crate::group::verdict(&read) {
                Some(Ok(())) => {
                    info!("exactly once: the brokers keep transactional offset metadata (this replica's first commit read back)");
                    Ok(true)
                }
                Some(Err(why)) => Err(why.into()),
                None => Ok(false),
            },
        }
    }
}
