//! `idemgate reset`, the I/O around [`crate::ops::reset::plan`]: asks the
//! brokers for the group, its committed offsets and the logs' bounds, and
//! the store for the watermarks; then, only with `--execute` (a plan may
//! be printed while the group has members), records in the store what the
//! plan says, and only then commits the new offsets for the group. The store goes first: a commit that fails after it leaves the
//! group where it was and the command can be run again (every store write
//! is idempotent: raises never lower, ranges merge), whereas offsets moved
//! without the store knowing would leave the skipped holders' copies
//! waiting for good.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::Config;
use crate::coordinates::TopicTag;
use crate::group::group_members;
use crate::ops::group::{self, refuse_if_active, GroupError};
use crate::ops::kafka::{QuietContext, REQUEST_TIMEOUT};
use crate::ops::reset::text::text;
use crate::ops::reset::{plan, Change, Mode, Request, Seen, Skipped, Target};
use crate::store::{PartitionReset, Publish, StoreError, StreamId};

/// The commit metadata a reset writes: idemgate's, for the stream, never
/// `gap-free` (the next owner raises no watermark from it, docs/design.md
/// §7), and carrying the `done` ranges of the commit it replaces that lie
/// at or above the new offset: those records were finished (their
/// duplicates and invalid records already in audit, above a record that
/// waited), and the next owner skips them rather than deciding them again.
/// A reference to a record of runs in the store is carried as it is: the
/// record's runs are all above the offset its writer committed, and a
/// reader skips none below the offset it resumes from.
pub(crate) fn commit_metadata(key_id: &str, old: Option<&str>, after: i64) -> String {
    use crate::worker::metadata::{encode, parse, Metadata, Runs};
    let old = old.and_then(|text| parse(key_id, text).ok().flatten());
    // The progress marks the old commit recorded still bound what the
    // store must hold: carried, so the reset lowers no floor.
    let marks = old.as_ref().map(|m| m.marks.clone()).unwrap_or_default();
    let runs = match old {
        Some(Metadata {
            runs: Runs::Stored(stored),
            ..
        }) => Runs::Stored(stored),
        Some(Metadata {
            runs: Runs::Inline(done),
            ..
        }) => Runs::Inline(
            done.into_iter()
                .filter_map(|(from, to)| (to > after).then_some((from.max(after), to)))
                .collect(),
        ),
        None => Runs::Inline(Vec::new()),
    };
    encode(
        key_id,
        &Metadata {
            gap_free: false,
            runs,
            marks,
        },
    )
}

#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// `--stream` names no stream of the config.
    #[error("--stream: no stream named `{stream}` (the config has {})", names.join(", "))]
    NoSuchStream { stream: String, names: Vec<String> },
    #[error(
        "store.kind = \"memory\": claims and watermarks live inside each replica, where no \
         reset can record anything; reset with Kafka's own tool (a restarted memory store \
         remembers nothing anyway)"
    )]
    MemoryStore,
    /// The plan refused the request (named flag and partition).
    #[error(transparent)]
    Plan(#[from] crate::ops::reset::PlanError),
    #[error("kafka: cannot make a client from [kafka]: {0}")]
    Client(KafkaError),
    #[error("kafka: bounds of {topic}/{partition}: {error}")]
    Bounds {
        topic: String,
        partition: i32,
        error: KafkaError,
    },
    #[error("kafka: committed offsets: {0}")]
    Committed(KafkaError),
    #[error("kafka: offsets for --to-time: {0}")]
    OffsetsForTime(KafkaError),
    /// A partition list librdkafka refused to build.
    #[error("kafka: {0}")]
    Kafka(KafkaError),
    #[error("kafka: committing the new offsets: {0} (the store is updated; run the reset again)")]
    Commit(KafkaError),
    #[error("kafka: reading the commit back: {0}")]
    ReadBack(KafkaError),
    #[error("kafka: {topic}/{partition}: committed {now:?}, not {offset}")]
    CommitNotKept {
        topic: String,
        partition: i32,
        now: Option<Offset>,
        offset: i64,
    },
    /// The blocking task that talked to the brokers died.
    #[error("kafka: {0}")]
    Task(tokio::task::JoinError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The group has members, or the brokers did not answer about it.
    #[error(transparent)]
    Group(#[from] GroupError),
}

/// What the operator asked for, from the CLI.
#[derive(Debug)]
pub struct ResetArgs {
    pub stream: String,
    pub target: Target,
    pub skipped: Option<Skipped>,
    pub re_emit: bool,
    /// Plan (the default), dry run or execute.
    pub mode: Mode,
    /// The new offsets on stdout as Kafka's reset CSV, the report on
    /// stderr.
    pub export: bool,
}

/// What the command prints.
pub struct Printed {
    pub stdout: String,
    pub stderr: String,
}

/// Runs the reset and returns what to print.
pub async fn reset(config: &Config, args: ResetArgs) -> Result<Printed, ResetError> {
    let export = args.export;
    let (report, plan) = run(config, args).await?;
    Ok(if export {
        Printed {
            stdout: crate::ops::reset::csv::export(&plan),
            stderr: report,
        }
    } else {
        Printed {
            stdout: report,
            stderr: String::new(),
        }
    })
}

/// The reset, its report and its plan.
async fn run(
    config: &Config,
    args: ResetArgs,
) -> Result<(String, crate::ops::reset::Plan), ResetError> {
    let (index, stream) = config
        .streams
        .iter()
        .enumerate()
        .find(|(_, s)| s.spec.name == args.stream)
        .ok_or_else(|| ResetError::NoSuchStream {
            stream: args.stream.clone(),
            names: config.streams.iter().map(|s| s.spec.name.clone()).collect(),
        })?;
    if matches!(config.store, crate::config::StoreConfig::Memory { .. }) {
        return Err(ResetError::MemoryStore);
    }
    let (consumer_config, _) = crate::config::client_configs(config);
    let group = config.group_id().to_string();
    let resume_at_end = matches!(
        consumer_config.get("auto.offset.reset"),
        Some("latest" | "end" | "largest")
    );
    let inputs = stream.inputs.clone();
    let target = args.target.clone();
    let mode = args.mode;
    let (consumer, members, (mut seen, metadata)) = {
        let group = group.clone();
        tokio::task::spawn_blocking(move || -> Result<_, ResetError> {
            let consumer: BaseConsumer<QuietContext> = consumer_config
                .create_with_context(QuietContext)
                .map_err(ResetError::Client)?;
            // A plan writes nothing, so members do not race it: it plans
            // from what they have committed so far.
            let members = if !mode.writes() {
                group_members(consumer.client(), &group, REQUEST_TIMEOUT).map_err(|error| {
                    GroupError::Describe {
                        group: group.clone(),
                        error,
                    }
                })?
            } else {
                refuse_if_active(&consumer, &group)?;
                0
            };
            let (seen, metadata) = look(&consumer, &inputs, &target)?;
            Ok((consumer, members, (seen, metadata)))
        })
        .await
        .map_err(ResetError::Task)??
    };

    let store = crate::app::open_store(config).await?;
    let answer = store
        .round(&Publish::default(), &[], &[StreamId(index)])
        .await?;
    for s in &mut seen {
        let tag = TopicTag::of(&s.topic);
        s.watermark = answer
            .watermarks
            .iter()
            .find(|w| w.stream.0 == index && w.topic == tag && w.partition == s.partition)
            .map(|w| w.below);
    }
    let request = Request {
        stream: args.stream.clone(),
        group: group.clone(),
        target: args.target,
        skipped: args.skipped,
        re_emit: args.re_emit,
        resume_at_end,
    };
    let plan = plan(&request, &seen)?;
    let mut report = text(&plan, &group, mode);
    if members > 0 {
        report.push_str(&format!(
            "group {group} has {members} active member(s): this plan is from the offsets \
             committed so far; --execute is refused until every replica has stopped\n"
        ));
    }
    if let Some(closing) = crate::ops::reset::text::closing(mode) {
        report.push_str(closing);
        return Ok((report, plan));
    }

    let resets: Vec<PartitionReset> = plan
        .partitions
        .iter()
        .map(|p| PartitionReset {
            stream: StreamId(index),
            topic: TopicTag::of(&p.topic),
            partition: p.partition,
            raise_to: p.raise_to,
            abandon: p.abandon,
            replay: p.replay,
        })
        .collect();
    store.reset(&resets).await?;

    let key_id = stream.spec.key_id.clone();
    let group_name = group.clone();
    let commits: Vec<(String, i32, i64, String)> = plan
        .partitions
        .iter()
        .filter(|p| p.change != Change::Unchanged || p.committed.is_none())
        .map(|p| {
            let old = metadata.get(&(p.topic.clone(), p.partition));
            let written = commit_metadata(&key_id, old.map(String::as_str), p.after);
            (p.topic.clone(), p.partition, p.after, written)
        })
        .collect();
    let committed = tokio::task::spawn_blocking(move || -> Result<usize, ResetError> {
        // Asked again right before the commit: a replica that joined
        // meanwhile would otherwise read from offsets the store's ranges
        // were not written for.
        refuse_if_active(&consumer, &group)?;
        commit(&consumer, &commits)?;
        Ok(commits.len())
    })
    .await
    .map_err(ResetError::Task)??;
    report.push_str(&format!(
        "store updated; {committed} partition offset(s) committed for group {group_name}\n"
    ));
    Ok((report, plan))
}

/// Committed metadata by partition.
type Committed = std::collections::HashMap<(String, i32), String>;

/// Every input partition: committed offset, log bounds, the offset at the
/// time asked for; and the committed offsets' metadata.
fn look(
    consumer: &BaseConsumer<QuietContext>,
    inputs: &[String],
    target: &Target,
) -> Result<(Vec<Seen>, Committed), ResetError> {
    let mut seen = Vec::new();
    for (topic, partition) in group::partitions(consumer, inputs)? {
        let (low, high) = consumer
            .fetch_watermarks(&topic, partition, REQUEST_TIMEOUT)
            .map_err(|error| ResetError::Bounds {
                topic: topic.clone(),
                partition,
                error,
            })?;
        seen.push(Seen {
            topic,
            partition,
            committed: None,
            low,
            high,
            at_time: None,
            watermark: None,
        });
    }
    let mut list = TopicPartitionList::new();
    for s in &seen {
        list.add_partition(&s.topic, s.partition);
    }
    let committed = consumer
        .committed_offsets(list, REQUEST_TIMEOUT)
        .map_err(ResetError::Committed)?;
    let mut metadata = Committed::new();
    for s in &mut seen {
        if let Some(element) = committed.find_partition(&s.topic, s.partition) {
            if let Offset::Offset(o) = element.offset() {
                s.committed = Some(o);
                metadata.insert(
                    (s.topic.clone(), s.partition),
                    element.metadata().to_string(),
                );
            }
        }
    }
    if let Target::Time(at) = target {
        let mut list = TopicPartitionList::new();
        for s in &seen {
            list.add_partition_offset(&s.topic, s.partition, Offset::Offset(*at))
                .map_err(ResetError::Kafka)?;
        }
        let found = consumer
            .offsets_for_times(list, REQUEST_TIMEOUT)
            .map_err(ResetError::OffsetsForTime)?;
        for s in &mut seen {
            if let Some(Offset::Offset(o)) = found
                .find_partition(&s.topic, s.partition)
                .map(|e| e.offset())
            {
                s.at_time = Some(o);
            }
        }
    }
    Ok((seen, metadata))
}

fn commit(
    consumer: &BaseConsumer<QuietContext>,
    commits: &[(String, i32, i64, String)],
) -> Result<(), ResetError> {
    if commits.is_empty() {
        return Ok(());
    }
    let mut list = TopicPartitionList::new();
    for (topic, partition, offset, metadata) in commits {
        list.add_partition_offset(topic, *partition, Offset::Offset(*offset))
            .map_err(ResetError::Kafka)?;
        if let Some(mut element) = list.find_partition(topic, *partition) {
            element.set_metadata(metadata);
        }
    }
    consumer
        .commit(&list, CommitMode::Sync)
        .map_err(ResetError::Commit)?;
    // Read back: the broker said yes to what it holds now.
    let mut check = TopicPartitionList::new();
    for (topic, partition, _, _) in commits {
        check.add_partition(topic, *partition);
    }
    let back = consumer
        .committed_offsets(check, Duration::from_secs(10))
        .map_err(ResetError::ReadBack)?;
    for (topic, partition, offset, _) in commits {
        let now = back.find_partition(topic, *partition).map(|e| e.offset());
        if now != Some(Offset::Offset(*offset)) {
            return Err(ResetError::CommitNotKept {
                topic: topic.clone(),
                partition: *partition,
                now,
                offset: *offset,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::worker::metadata::{parse, Metadata, Runs};

    fn read(key_id: &str, text: &str) -> Option<Metadata> {
        parse(key_id, text).unwrap()
    }

    fn done(metadata: Metadata) -> Vec<(i64, i64)> {
        match metadata.runs {
            Runs::Inline(done) => done,
            Runs::Stored(_) => panic!("a reference"),
        }
    }

    #[test]
    fn a_reset_commit_never_claims_gap_free() {
        let text = super::commit_metadata("Ab", Some("idemgate/2 Ab gap-free"), 7);
        let read = read("Ab", &text).expect("idemgate's own metadata");
        assert!(!read.gap_free, "{text}");
        assert!(done(read).is_empty(), "{text}");
    }

    #[test]
    fn a_reset_commit_carries_the_done_ranges_at_or_above_its_offset() {
        let old = "idemgate/2 Ab gaps done=11-15,20-30";
        let text = super::commit_metadata("Ab", Some(old), 22);
        assert_eq!(done(read("Ab", &text).unwrap()), vec![(22, 30)], "{text}");
        let text = super::commit_metadata("Ab", Some(old), 0);
        assert_eq!(done(read("Ab", &text).unwrap()), vec![(11, 15), (20, 30)]);
        // Another stream's or another writer's ranges are not ours.
        let text = super::commit_metadata("Ab", Some("idemgate/2 Cd gaps done=1-5"), 0);
        assert!(done(read("Ab", &text).unwrap()).is_empty());
    }
}
