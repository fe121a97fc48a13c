//! `idemgate rebuild`, the I/O around [`crate::ops::rebuild`]: refuses while the
//! group has members (the member check `reset` uses), reads the group's
//! committed offsets and the stream's clean topic over the TTL window
//! (read_committed: an aborted transaction's outputs were never delivered),
//! then writes the store: the settled claims, the tier-2 inserts, the
//! watermarks, and last the identity, so a replica can start only once
//! everything before it is written. Every write is idempotent (claims are
//! overwritten with the same values, raises never lower, inserts are set
//! bits), so a rebuild that failed half way is run again.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::config::{Config, StoreConfig, StreamConfig};
use crate::ops::group::{self, GroupError};
use crate::ops::kafka::{QuietContext, REQUEST_TIMEOUT};
use crate::ops::rebuild::{report, watermarks, CleanOutput, Rebuild};
use crate::store::{at_start, AtStart, Publish, StoreError, StoreIdentity, StreamId};

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// `--stream` names no stream of the config.
    #[error("--stream: no stream named `{stream}` (the config has {})", names.join(", "))]
    NoSuchStream { stream: String, names: Vec<String> },
    #[error(
        "store.kind = \"memory\": each replica's store starts empty and keeps its own \
         identity; there is nothing to rebuild"
    )]
    MemoryStore,
    /// `--adopt` where the store holds part of an identity, or two.
    #[error(
        "stream {stream}: {why}; --adopt vouches only for a store that holds no identity at \
         all: rebuild it instead"
    )]
    NotAdoptable {
        stream: String,
        why: crate::store::Refusal,
    },
    #[error("kafka: {0}")]
    Kafka(KafkaError),
    #[error("kafka: offsets of {clean} by time: {error}")]
    OffsetsByTime { clean: String, error: KafkaError },
    #[error(
        "kafka: {clean} partitions {left:?} did not reach their end within {quiet_s}s (an open \
         transaction holding them back?); run the rebuild again"
    )]
    NotAtEnd {
        clean: String,
        left: Vec<i32>,
        quiet_s: u64,
    },
    /// The blocking task that talked to the brokers died.
    #[error("kafka: {0}")]
    Task(tokio::task::JoinError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Group(#[from] GroupError),
}

/// What the operator asked for, from the CLI.
pub struct RebuildArgs {
    pub stream: String,
    /// Write the identity only, vouching that the store kept the stream's
    /// state: the first start after an upgrade from a version without
    /// store identities.
    pub adopt: bool,
}

/// A clean partition read longer than this without a record is taken to
/// be held back by an open transaction: the rebuild fails rather than
/// write a store that misses what it holds.
pub(crate) const QUIET: Duration = Duration::from_secs(30);

/// A read of a topic's partitions to their ends that gives up, naming the
/// partitions left, once no message came for [`QUIET`].
pub(crate) struct Quiet {
    last: Instant,
}

impl Quiet {
    pub(crate) fn new() -> Quiet {
        Quiet {
            last: Instant::now(),
        }
    }

    /// The next poll's answer (None: nothing yet), or the error once the
    /// topic was quiet too long with `left` still open.
    pub(crate) fn poll<'c>(
        &mut self,
        consumer: &'c BaseConsumer<QuietContext>,
        topic: &str,
        left: impl FnOnce() -> Vec<i32>,
    ) -> Result<
        Option<rdkafka::error::KafkaResult<rdkafka::message::BorrowedMessage<'c>>>,
        RebuildError,
    > {
        if self.last.elapsed() > QUIET {
            let mut left = left();
            left.sort_unstable();
            return Err(RebuildError::NotAtEnd {
                clean: topic.to_string(),
                left,
                quiet_s: QUIET.as_secs(),
            });
        }
        let polled = consumer.poll(Duration::from_millis(200));
        if polled.is_some() {
            self.last = Instant::now();
        }
        Ok(polled)
    }
}

/// A consumer for the rebuild's reads of the outputs: read_committed,
/// assigned (its group is never joined), each partition's end told.
pub(crate) fn reader(config: &Config) -> Result<BaseConsumer<QuietContext>, RebuildError> {
    let (mut client, _) = crate::config::client_configs(config);
    client
        .set("group.id", "idemgate-rebuild")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest");
    client
        .create_with_context(QuietContext)
        .map_err(RebuildError::Kafka)
}

/// Reads `assignment` of `topic` until every partition in `open` is at
/// its end, each message to `on_message`; gives up as [`Quiet`] says.
pub(crate) fn read_to_ends(
    consumer: &BaseConsumer<QuietContext>,
    topic: &str,
    assignment: &TopicPartitionList,
    mut open: HashSet<i32>,
    mut on_message: impl FnMut(&rdkafka::message::BorrowedMessage<'_>),
) -> Result<(), RebuildError> {
    if open.is_empty() {
        return Ok(());
    }
    consumer.assign(assignment).map_err(RebuildError::Kafka)?;
    let mut quiet = Quiet::new();
    while !open.is_empty() {
        let Some(polled) = quiet.poll(consumer, topic, || open.iter().copied().collect())? else {
            continue;
        };
        match polled {
            Ok(message) => on_message(&message),
            Err(KafkaError::PartitionEOF(partition)) => {
                open.remove(&partition);
            }
            Err(error) => return Err(RebuildError::Kafka(error)),
        }
    }
    Ok(())
}
/// Tier-2 inserts per round.
const INSERTS_PER_ROUND: usize = 1000;

/// Runs the rebuild and returns the report to print.
pub async fn rebuild(config: &Config, args: RebuildArgs) -> Result<String, RebuildError> {
    let (index, stream) = config
        .streams
        .iter()
        .enumerate()
        .find(|(_, s)| s.spec.name == args.stream)
        .ok_or_else(|| RebuildError::NoSuchStream {
            stream: args.stream.clone(),
            names: config.streams.iter().map(|s| s.spec.name.clone()).collect(),
        })?;
    if matches!(config.store, StoreConfig::Memory { .. }) {
        return Err(RebuildError::MemoryStore);
    }
    let id = StreamId(index);
    let store = crate::app::open_store(config).await?;
    if args.adopt {
        return adopt(&*store, id, stream).await;
    }

    let (group_name, committed) = {
        let config = config.clone();
        let inputs = stream.inputs.clone();
        tokio::task::spawn_blocking(move || -> Result<_, RebuildError> {
            let (consumer, group) = group::client(&config)?;
            group::refuse_if_active(&consumer, &group)?;
            let partitions = group::partitions(&consumer, &inputs)?;
            Ok((group, group::committed(&consumer, &partitions)?))
        })
        .await
        .map_err(RebuildError::Task)??
    };

    let now = crate::worker::wall_ms();
    let mut plan = Rebuild::new(id, stream, now);
    // Blocking reads, on this runtime's thread (the plan borrows the
    // config): the command does nothing else meanwhile.
    tokio::task::block_in_place(|| read_clean(config, &stream.clean, &mut plan))?;

    store.restore(&plan.claims()).await?;
    for chunk in plan.inserts().chunks(INSERTS_PER_ROUND) {
        store
            .publish(&Publish {
                inserts: chunk.to_vec(),
                ..Publish::default()
            })
            .await?;
    }
    let marks = watermarks(id, &stream.spec.key_id, &committed);
    let raises = marks.iter().filter_map(|w| w.raise).collect();
    store
        .publish(&Publish {
            raises,
            ..Publish::default()
        })
        .await?;
    let runs = super::runs_run::records(config, &*store, id, stream, &committed, now).await?;
    // The progress marks raised to the highest the commits recorded
    // (docs/design.md §8.2), before the new identity lets replicas start:
    // a store restored from an older snapshot holds lower ones.
    let recorded = crate::ops::group::highest_marks(&stream.spec.key_id, &committed);
    store.restore_marks(id, &recorded).await?;
    let identity = StoreIdentity::random();
    let written = store.write_identity(id, identity, true).await?;
    if at_start(&written) != AtStart::Adopt(identity) {
        return Err(RebuildError::Store(StoreError::Protocol(
            "the identity written does not read back at every place".into(),
        )));
    }
    let mut out = format!("group {group_name}, stream {}\n", stream.spec.name);
    out.push_str(&runs);
    out.push_str(&report(&plan, &stream.clean, &marks, &identity.to_hex()));
    Ok(out)
}

/// `--adopt`: the identity only, where the store holds none.
async fn adopt(
    store: &dyn crate::store::ClaimStore,
    id: StreamId,
    stream: &StreamConfig,
) -> Result<String, RebuildError> {
    let found = store.find_identity(id).await?;
    match at_start(&found) {
        AtStart::Adopt(identity) => {
            return Ok(format!(
                "stream {}: the store holds identity {identity} already; nothing written\n",
                stream.spec.name
            ))
        }
        AtStart::Refuse(why) => {
            return Err(RebuildError::NotAdoptable {
                stream: stream.spec.name.clone(),
                why,
            })
        }
        AtStart::FirstOrLost => {}
    }
    let written = store
        .write_identity(id, StoreIdentity::random(), false)
        .await?;
    match at_start(&written) {
        AtStart::Adopt(identity) => Ok(format!(
            "stream {}: store identity {identity} written; the store's claims and watermarks \
             are taken as they are\n",
            stream.spec.name
        )),
        other => Err(RebuildError::Store(StoreError::Protocol(format!(
            "the identity written reads back as {other:?}"
        )))),
    }
}

/// Reads every partition of `clean` from the first output that may hold a
/// live claim to its end, each output into the plan: from the earlier of
/// the first at or after the plan's window start by the time index, and
/// the first decided since (`start`).
fn read_clean(config: &Config, clean: &str, plan: &mut Rebuild<'_>) -> Result<(), RebuildError> {
    let kafka = RebuildError::Kafka;
    let consumer = reader(config)?;
    let partitions = group::partitions(&consumer, &[clean.to_string()])?;
    let mut by_time = TopicPartitionList::new();
    for (topic, partition) in &partitions {
        by_time
            .add_partition_offset(topic, *partition, Offset::Offset(plan.window_start()))
            .map_err(kafka)?;
    }
    let found = consumer
        .offsets_for_times(by_time, REQUEST_TIMEOUT)
        .map_err(|error| RebuildError::OffsetsByTime {
            clean: clean.to_string(),
            error,
        })?;
    let numbers: Vec<i32> = partitions.iter().map(|(_, p)| *p).collect();
    let decided =
        crate::ops::rebuild::start::by_decision(&consumer, clean, &numbers, plan.decided_since())?;
    let mut assignment = TopicPartitionList::new();
    let mut open: HashSet<i32> = HashSet::new();
    for element in found.elements() {
        let partition = element.partition();
        // Offset::End by time: nothing stamped in the window there.
        let by_time = match element.offset() {
            Offset::Offset(offset) => Some(offset),
            _ => None,
        };
        let by_decision = decided.get(&partition).copied();
        let end = consumer
            .fetch_watermarks(clean, partition, REQUEST_TIMEOUT)
            .map_err(kafka)?
            .1;
        let start = match (by_time, by_decision) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(start) => start,
                None => continue,
            },
        };
        if start >= end {
            continue;
        }
        assignment
            .add_partition_offset(clean, partition, Offset::Offset(start))
            .map_err(kafka)?;
        open.insert(partition);
    }
    read_to_ends(&consumer, clean, &assignment, open, |message| {
        let (headers, _) = crate::worker::read_headers(message);
        plan.add(&CleanOutput {
            timestamp: message.timestamp().to_millis(),
            headers: &headers,
            key: message.key(),
            payload: message.payload(),
        });
    })
}
