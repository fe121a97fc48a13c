//! `idemgate rebuild`, the I/O around [`super::runs`]: asks the
//! store for every record of finished runs the group's commits name, reads
//! the stream's clean and audit topics (read_committed) from their start
//! where one is missing, writes the records made again, and commits anew
//! where their runs are not the named ones, while the group still has no
//! members.

use std::collections::HashSet;
use std::fmt::Write as _;

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::run::{read_to_ends, reader, RebuildError};
use super::runs::{self, Recreate};
use crate::config::{Config, StreamConfig};
use crate::decision::INPUT;
use crate::ops::group;
use crate::ops::kafka::REQUEST_TIMEOUT;
use crate::store::{OwnerToken, StoreError, StreamId};

/// The records of finished runs the group's commits name (docs/design.md
/// §7): each the store lacks, or holds with another digest, is made again
/// from the stream's outputs above its committed offset (`runs.rs`),
/// written, and where its runs are not the named ones committed anew,
/// before the identity lets a replica start. Returns the report's lines.
pub(super) async fn records(
    config: &Config,
    store: &dyn crate::store::ClaimStore,
    id: StreamId,
    stream: &StreamConfig,
    committed: &[group::Committed],
    now: crate::clock::Millis,
) -> Result<String, RebuildError> {
    let key_id = &stream.spec.key_id;
    let named = runs::named(id, key_id, committed);
    let mut missing = Vec::new();
    for n in named.iter() {
        let content = store.get_runs(&n.name, now).await?;
        if !runs::holds(&n.reference, content.as_deref()) {
            missing.push(n.clone());
        }
    }
    let mut out = format!(
        "{} committed offset(s) name a record of finished runs; {} missing from the store\n",
        named.len(),
        missing.len()
    );
    if missing.is_empty() {
        return Ok(out);
    }
    let mut finished = runs::Finished::new(&missing);
    let outputs = [stream.clean.clone(), stream.audit.clone()];
    tokio::task::block_in_place(|| read_outputs(config, &outputs, &mut finished))?;
    let _ = writeln!(
        out,
        "read {} outputs of {} from their start for the inputs above those offsets",
        finished.read,
        outputs.join(" and ")
    );
    // The rebuild's own records: a writer token no replica holds (random,
    // attempt 0xff) and a sequence of its start time, so no name repeats.
    let writer = OwnerToken(
        (std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), now)
            as u32)
            | 0xff,
    );
    let mut commits = Vec::new();
    for (sequence, m) in (u64::try_from(now).unwrap_or(0) * 1000..).zip(&missing) {
        let c = &m.committed;
        let runs = finished.runs(&c.topic, c.partition);
        match runs::recreate(key_id, m, &runs, writer, sequence) {
            Recreate::AsNamed { name, content } => {
                store.put_runs(&name, &content, now).await?;
                let _ = writeln!(
                    out,
                    "{}/{}: record of {} finished run(s) above {} written back as named",
                    c.topic,
                    c.partition,
                    runs.len(),
                    c.offset
                );
            }
            Recreate::Recommit { record, metadata } => {
                if let Some((name, content)) = &record {
                    store.put_runs(name, content, now).await?;
                }
                let _ = writeln!(
                    out,
                    "{}/{}: {} finished run(s) above {} (not the named ones) committed anew{}",
                    c.topic,
                    c.partition,
                    runs.len(),
                    c.offset,
                    if record.is_some() {
                        ", in a new record"
                    } else {
                        " inline"
                    }
                );
                commits.push((c.clone(), metadata));
            }
        }
    }
    if !commits.is_empty() {
        let config = config.clone();
        tokio::task::spawn_blocking(move || recommit(&config, &commits))
            .await
            .map_err(RebuildError::Task)??;
    }
    Ok(out)
}

/// Commits each partition's offset again with new metadata, while the
/// group still has no members, and reads it back.
fn recommit(config: &Config, commits: &[(group::Committed, String)]) -> Result<(), RebuildError> {
    let (consumer, group_name) = group::client(config)?;
    group::refuse_if_active(&consumer, &group_name)?;
    let mut list = TopicPartitionList::new();
    for (c, metadata) in commits {
        list.add_partition_offset(&c.topic, c.partition, Offset::Offset(c.offset))
            .map_err(RebuildError::Kafka)?;
        if let Some(mut element) = list.find_partition(&c.topic, c.partition) {
            element.set_metadata(metadata);
        }
    }
    consumer
        .commit(&list, CommitMode::Sync)
        .map_err(RebuildError::Kafka)?;
    let partitions: Vec<(String, i32)> = commits
        .iter()
        .map(|(c, _)| (c.topic.clone(), c.partition))
        .collect();
    let back = group::committed(&consumer, &partitions)?;
    for (c, metadata) in commits {
        let kept = back.iter().any(|b| {
            (&b.topic, b.partition, b.offset, &b.metadata)
                == (&c.topic, c.partition, c.offset, metadata)
        });
        if !kept {
            return Err(RebuildError::Store(StoreError::Protocol(format!(
                "the new commit of {}/{} did not read back",
                c.topic, c.partition
            ))));
        }
    }
    Ok(())
}

/// Reads every partition of `topics` from its start to its end
/// (read_committed), each output's `idemgate-input` into `finished`.
fn read_outputs(
    config: &Config,
    topics: &[String],
    finished: &mut runs::Finished,
) -> Result<(), RebuildError> {
    for topic in topics {
        read_output(config, topic, finished)?;
    }
    Ok(())
}

/// One topic of [`read_outputs`] (a partition's end is told by its number
/// alone).
fn read_output(
    config: &Config,
    topic: &str,
    finished: &mut runs::Finished,
) -> Result<(), RebuildError> {
    let kafka = RebuildError::Kafka;
    let consumer = reader(config)?;
    let mut assignment = TopicPartitionList::new();
    let mut open: HashSet<i32> = HashSet::new();
    for (topic, partition) in group::partitions(&consumer, &[topic.to_string()])? {
        let (low, high) = consumer
            .fetch_watermarks(&topic, partition, REQUEST_TIMEOUT)
            .map_err(kafka)?;
        if low >= high {
            continue;
        }
        assignment
            .add_partition_offset(&topic, partition, Offset::Offset(low))
            .map_err(kafka)?;
        open.insert(partition);
    }
    read_to_ends(&consumer, topic, &assignment, open, |message| {
        let (headers, _) = crate::worker::read_headers(message);
        let input = headers
            .iter()
            .find(|(name, _)| name == INPUT)
            .and_then(|(_, v)| std::str::from_utf8(v.as_deref()?).ok());
        finished.add(input);
    })
}
