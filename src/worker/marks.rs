//! The progress marks a commit records (docs/design.md §8.2,
//! `store/marks.rs`): in the pre-commit store step, after the records of
//! finished runs, each stream the commit covers bumps its marks, and the
//! answer goes into its partitions' metadata (`m=`). The bump comes after
//! every claim the commit relies on was answered (their records are
//! decided), so a store holding marks as high holds those claims.
//!
//! A stream whose marks cannot be bumped (the store did not answer before
//! the deadline, or they lie below this replica's floor: the store came
//! back older) commits without them where it is fail-open (its records
//! pass as `unverified` anyway), and not at all where it is fail-closed:
//! [`stamp`] answers those, and each committer decides (at least once
//! leaves their partitions out; exactly once aborts).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::TopicPartitionList;
use tracing::{error, warn};

use super::metadata;
use crate::clock::Clock;
use crate::store::{ClaimStore, Marked, StoreError, StreamId};

/// The streams a commit covers, with their inputs, as the loop knows them.
#[derive(Clone, Debug, Default)]
pub(super) struct Covered {
    /// Per stream: its index, whether it is fail-open, its input topics
    /// in the commit.
    streams: Vec<(usize, bool, Vec<String>)>,
}

impl Covered {
    pub(super) fn add(&mut self, stream: usize, fail_open: bool, topic: &str) {
        match self.streams.iter_mut().find(|(s, ..)| *s == stream) {
            Some((_, _, topics)) if topics.iter().any(|t| t == topic) => {}
            Some((_, _, topics)) => topics.push(topic.to_string()),
            None => self
                .streams
                .push((stream, fail_open, vec![topic.to_string()])),
        }
    }
}

/// A fail-closed stream whose marks the commit could not record.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) stream: usize,
    pub(super) topics: Vec<String>,
    /// The marks lie below the floor; otherwise the store did not answer.
    pub(super) behind: bool,
    pub(super) error: Option<StoreError>,
}

/// Bumps the marks of each stream `covered` names, retried while
/// `deadline` allows, and appends them to the metadata of its partitions
/// in `list`. Answers the fail-closed streams left without them.
pub(super) async fn stamp(
    store: &Arc<dyn ClaimStore>,
    clock: &Arc<dyn Clock>,
    covered: &Covered,
    list: &mut TopicPartitionList,
    deadline: Instant,
) -> Vec<Held> {
    let mut held = Vec::new();
    for (stream, fail_open, topics) in &covered.streams {
        let answer = advance(store, clock, StreamId(*stream), deadline).await;
        let (behind, error) = match answer {
            Ok(Marked::At(marks)) => {
                append(list, topics, &metadata::marks_word(&marks));
                continue;
            }
            Ok(Marked::Unkept) => continue,
            Ok(Marked::Behind) => (true, None),
            Err(error) => (false, Some(error)),
        };
        if *fail_open {
            warn!(stream = stream, behind, error = ?error,
                "a fail-open stream commits without progress marks: its store came back older or did not answer the pre-commit step");
            continue;
        }
        if behind {
            error!(
                stream,
                "the store's progress marks lie below what commits recorded: this commit does not go"
            );
        }
        held.push(Held {
            stream: *stream,
            topics: topics.clone(),
            behind,
            error,
        });
    }
    held
}

/// One stream's bump, asked again while the deadline allows.
async fn advance(
    store: &Arc<dyn ClaimStore>,
    clock: &Arc<dyn Clock>,
    stream: StreamId,
    deadline: Instant,
) -> Result<Marked, StoreError> {
    let mut backoff = Duration::from_millis(20);
    loop {
        let result = tokio::time::timeout(Duration::from_secs(5), store.advance_marks(stream))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "progress marks bump timed out".into(),
                ))
            });
        match result {
            Err(error) if clock.now() + backoff < deadline => {
                crate::metrics::store_failed("marks", &error);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(error) => {
                crate::metrics::store_failed("marks", &error);
                return Err(error);
            }
            answered => return answered,
        }
    }
}

/// Appends `word` to the metadata of every partition of `topics`.
fn append(list: &mut TopicPartitionList, topics: &[String], word: &str) {
    let found: Vec<(String, i32, String)> = list
        .elements()
        .iter()
        .filter(|e| topics.iter().any(|t| t == e.topic()))
        .map(|e| {
            (
                e.topic().to_string(),
                e.partition(),
                e.metadata().to_string(),
            )
        })
        .collect();
    for (topic, partition, text) in found {
        if let Some(mut element) = list.find_partition(&topic, partition) {
            element.set_metadata(format!("{text}{word}"));
        }
    }
}

/// `list` without the partitions of `topics`.
pub(super) fn without(list: &TopicPartitionList, topics: &[String]) -> TopicPartitionList {
    let mut out = TopicPartitionList::new();
    for e in list.elements() {
        if topics.iter().any(|t| t == e.topic()) {
            continue;
        }
        if out
            .add_partition_offset(e.topic(), e.partition(), e.offset())
            .is_ok()
        {
            if let Some(mut added) = out.find_partition(e.topic(), e.partition()) {
                added.set_metadata(e.metadata());
            }
        }
    }
    out
}
