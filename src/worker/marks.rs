//! The progress marks a commit records (docs/design.md §8.2,
//! `store/marks.rs`): in the pre-commit store step, after the records of
//! finished runs, each stream the commit covers bumps its marks, and the
//! answer goes into its partitions' metadata (`m=`). The bump comes after
//! every claim the commit relies on was answered (their records are
//! decided), so a store holding marks as high holds those claims.
//!
//! A store that does not answer the bump within two seconds lets the
//! commit go without marks (an outage is not a loss; the next commit's
//! bump covers these claims too). A store whose marks lie below this
//! replica's floor came back older: a fail-open stream commits without
//! them (its records pass as `unverified` anyway); a fail-closed one not
//! at all: [`stamp`] answers those, and each committer decides (at least
//! once leaves their partitions out; exactly once aborts and ends).

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use rdkafka::TopicPartitionList;
use tracing::{error, warn};

use super::metadata;
use crate::clock::Clock;
use crate::logging::RateLimit;
use crate::store::{ClaimStore, Marked, StoreError, StreamId};

static UNANSWERED: LazyLock<RateLimit> = LazyLock::new(|| RateLimit::new(Duration::from_secs(30)));

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

/// A fail-closed stream whose store came back older: its partitions
/// commit nothing.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) stream: usize,
    pub(super) topics: Vec<String>,
}

/// How long a bump may take before the commit goes without it.
const ATTEMPT: Duration = Duration::from_secs(2);

/// Bumps the marks of each stream `covered` names (one attempt, bounded
/// by [`ATTEMPT`] and `deadline`) and appends them to the metadata of its
/// partitions in `list`. A store that does not answer lets the commit go
/// without marks: an outage is not a loss. Answers the fail-closed streams
/// whose store came back older.
pub(super) async fn stamp(
    store: &Arc<dyn ClaimStore>,
    clock: &Arc<dyn Clock>,
    covered: &Covered,
    list: &mut TopicPartitionList,
    deadline: Instant,
) -> Vec<Held> {
    let mut held = Vec::new();
    for (stream, fail_open, topics) in &covered.streams {
        let bound = ATTEMPT.min(deadline.saturating_duration_since(clock.now()));
        let answer = tokio::time::timeout(bound, store.advance_marks(StreamId(*stream)))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "progress marks bump timed out".into(),
                ))
            });
        match answer {
            Ok(Marked::At(marks)) => append(list, topics, &metadata::marks_word(&marks)),
            Ok(Marked::Unkept) => {}
            Ok(Marked::Behind) if *fail_open => {
                warn!(stream, "a fail-open stream's store came back older: it commits without progress marks, its records pass as unverified");
            }
            Ok(Marked::Behind) => {
                error!(
                    stream,
                    "the store's progress marks lie below what commits recorded: this commit does not go"
                );
                held.push(Held {
                    stream: *stream,
                    topics: topics.clone(),
                });
            }
            Err(error) => {
                crate::metrics::store_failed("marks", &error);
                if let Some(held_back) = UNANSWERED.allow() {
                    warn!(stream, %error, held_back, "the store did not answer the progress marks' bump: this commit goes without them (the next one's bump covers its claims)");
                }
            }
        }
    }
    held
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
