//! At least once: each partition's finished prefix committed with the
//! consumer, with idemgate's metadata (docs/design.md §7): periodically,
//! off the loop, and synchronously as a handover's last word. Exactly
//! once commits offsets in its transaction instead (`transaction.rs`).

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{error, warn};

use super::flight::Tp;
use super::marks::{self, Covered};
use super::pipeline::{Pipeline, FLUSH_PATIENCE};
use super::poller;
use super::runs::{self, Write};
use super::Worker;
use crate::store::RunsName;

static COMMIT_STUCK: LazyLock<crate::logging::RateLimit> =
    LazyLock::new(|| crate::logging::RateLimit::new(Duration::from_secs(30)));

impl Worker {
    /// At least once, a handover's commit of `partitions`: the last word
    /// on them. What it fails to say (a done range above a waiting
    /// record), the next owner decides again. It goes after the periodic
    /// one still in flight, if any (an older commit landing after it would
    /// put older offsets and done ranges back), and is retried while time
    /// is left.
    pub(super) async fn commit_partitions(
        &self,
        p: &mut Pipeline,
        partitions: &[Tp],
        deadline: Instant,
    ) {
        let mut earlier_unfinished = false;
        if let Some((_, earlier)) = p.commit_in_flight.take() {
            let left = deadline.saturating_duration_since(self.clock.now());
            if tokio::time::timeout(left, earlier).await.is_err() {
                error!("a periodic commit did not finish before the handover's deadline: committing over it");
                earlier_unfinished = true;
            }
        }
        let mut list = self.commit_list(p, Some(partitions));
        if earlier_unfinished {
            // The earlier commit may still land after this one, naming
            // the record this one supersedes: deleting it would turn that
            // commit into a store loss for the next owner. It expires
            // with the stream's watermark TTL instead.
            list.superseded.clear();
        }
        let mut backoff = Duration::from_millis(50);
        loop {
            let left = deadline.saturating_duration_since(self.clock.now());
            let committing = self.commit_off_loop(list.clone(), deadline);
            let result = match tokio::time::timeout(left, committing).await {
                Ok(result) => result,
                Err(_) => {
                    error!("handover commit unanswered at the deadline: the next owner decides the finished records above the last commit again");
                    break;
                }
            };
            match result {
                Ok(()) => break,
                Err(error) if self.clock.now() + backoff < deadline => {
                    warn!(%error, "handover commit failed: retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(error) => {
                    error!(%error, "handover commit failed: the next owner decides the finished records above the last commit again");
                    break;
                }
            }
        }
    }

    /// Commits each partition's finished prefix, with idemgate's metadata,
    /// off the loop: a synchronous commit (one round trip per commit
    /// interval; an asynchronous one could land after the handover's final
    /// commit and put older offsets and done ranges back) waits on the
    /// group coordinator, which can take as long as the brokers are gone,
    /// and the loop must go on (store rounds, deliveries, stop). One at a
    /// time: while one is in flight the next interval's commit waits.
    pub(super) fn commit_periodic(&self, p: &mut Pipeline) {
        if let Some((since, earlier)) = &p.commit_in_flight {
            if !earlier.is_finished() {
                let waited = self.clock.now().duration_since(*since);
                if waited >= FLUSH_PATIENCE && COMMIT_STUCK.allow().is_some() {
                    warn!(
                        waited_s = waited.as_secs(),
                        "a commit is still waiting for the group coordinator: nothing newer is committed meanwhile"
                    );
                }
                return;
            }
        }
        let list = self.commit_list(p, None);
        if list.offsets.count() == 0 {
            p.commit_in_flight = None;
            return;
        }
        let committing = self.commit_off_loop(list, self.clock.now() + FLUSH_PATIENCE);
        p.commit_in_flight = Some((
            self.clock.now(),
            tokio::spawn(async move {
                if let Err(error) = committing.await {
                    warn!(%error, "commit failed");
                }
            }),
        ));
    }

    /// Writes the records of finished runs the commit names (acknowledged,
    /// before `deadline`: a commit without them does not go), then commits
    /// the offsets synchronously on a blocking thread; counts what the
    /// broker took, and once it took it deletes the records it superseded.
    fn commit_off_loop(
        &self,
        list: CommitList,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<(), CommitError>> {
        let consumer = self.consumer.clone();
        let store = self.store.clone();
        let clock = self.clock.clone();
        async move {
            let CommitList {
                mut offsets,
                writes,
                superseded,
                covered,
            } = list;
            if offsets.count() == 0 {
                return Ok(());
            }
            runs::write(&store, &clock, &writes, deadline)
                .await
                .map_err(CommitError::Runs)?;
            // The progress marks, bumped after every claim this commit
            // relies on; a fail-closed stream that cannot record them
            // commits nothing this time.
            let mut superseded = superseded;
            for held in marks::stamp(&store, &clock, &covered, &mut offsets, deadline).await {
                offsets = marks::without(&offsets, &held.topics);
                // Their commits stay as they were, naming what they named.
                superseded.retain(|name| name.stream.0 != held.stream);
            }
            if offsets.count() == 0 {
                return Ok(());
            }
            let committed =
                tokio::task::spawn_blocking(move || consumer.commit(&offsets, CommitMode::Sync))
                    .await
                    .unwrap_or(Ok(()));
            match committed {
                Ok(()) => {
                    crate::metrics::committed();
                    runs::delete(&store, superseded);
                    Ok(())
                }
                Err(error) if poller::is_nothing_to_commit(&error) => Ok(()),
                Err(error) => Err(CommitError::Kafka(error)),
            }
        }
    }

    /// Each partition's finished prefix to commit, with idemgate's
    /// metadata, and the store writes it needs first.
    fn commit_list(&self, p: &mut Pipeline, only: Option<&[Tp]>) -> CommitList {
        let commits = match only {
            None => p.flight.commits(None),
            Some(list) => list
                .iter()
                .flat_map(|tp| p.flight.commits(Some(tp)))
                .collect(),
        };
        let mut list = CommitList {
            offsets: TopicPartitionList::new(),
            writes: Vec::new(),
            superseded: Vec::new(),
            covered: Covered::default(),
        };
        for c in &commits {
            let Some(&stream) = self.by_topic.get(&*c.tp.0) else {
                continue;
            };
            if list
                .offsets
                .add_partition_offset(&c.tp.0, c.tp.1, Offset::Offset(c.offset))
                .is_err()
            {
                continue;
            }
            if let Some(mut element) = list.offsets.find_partition(&c.tp.0, c.tp.1) {
                let prepared = self.prepare_commit(p, stream, c);
                element.set_metadata(prepared.text);
                list.writes.extend(prepared.write);
                list.superseded.extend(prepared.superseded);
                if p.flight.lost(stream).is_none() {
                    list.covered.add(stream, self.fail_open(stream), &c.tp.0);
                }
            }
        }
        list
    }
}

/// An at-least-once commit: the offsets with their metadata, the records
/// of finished runs they name (written first), and the records they make
/// needless (deleted once the broker took them).
#[derive(Clone)]
pub(super) struct CommitList {
    offsets: TopicPartitionList,
    writes: Vec<Write>,
    superseded: Vec<RunsName>,
    covered: Covered,
}

/// Why an at-least-once commit did not go.
#[derive(Debug, thiserror::Error)]
pub(super) enum CommitError {
    #[error("writing the record of finished runs it names: {0}")]
    Runs(#[source] crate::store::StoreError),
    #[error(transparent)]
    Kafka(#[from] rdkafka::error::KafkaError),
}
