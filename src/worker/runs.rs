//! Finished runs that do not fit in a commit's metadata (docs/design.md
//! §7): the commit names a record of them kept in the store instead, so no
//! finished run is ever dropped.
//!
//! ```text
//! commit built ─► runs fit? ─yes─► inline (d=)
//!                    └─no─► record put (or, same content as this writer's
//!                           last, its expiry refreshed) and acknowledged
//!                           ─► commit names it (r=) ─► known committed
//!                           ─► this writer's earlier records of the
//!                              partition deleted
//! ```
//!
//! Which record a commit names, and which it makes needless, is decided
//! here without I/O ([`Records`]); the store calls are the committers'
//! (`transaction.rs` under exactly once, `at_least_once.rs` at least once) and
//! the assignment's read ([`Worker::runs_at_assignment`]). A record the
//! committed metadata names that the store lacks, or whose digest differs,
//! is a store loss (`store_lost.rs`), never an empty list.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{error, warn};

use super::flight::{Commit, Tp};
use super::metadata::{self, Metadata, Runs, RunsRef};
use super::pipeline::{Pipeline, FLUSH_PATIENCE};
use super::Worker;
use crate::clock::Clock;
use crate::coordinates::TopicTag;
use crate::store::{Check, ClaimStore, OwnerToken, RunsName, StoreError, StreamId, StreamLost};

/// What this writer has written, per partition it owns.
pub(crate) struct Records {
    /// The writer's next sequence number: no two of its records share a
    /// name. It starts at the process's start in microseconds: an
    /// incarnation is 24 random bits, and two that drew the same bits
    /// must not count from the same number, or one's clean-up could
    /// delete the record the other's commit names.
    next: u64,
    /// Per partition, the records written and not yet known needless,
    /// with their digests: the one the last commit named, and any an
    /// aborted or failed commit named.
    written: HashMap<Tp, Vec<(RunsName, [u8; 32])>>,
}

/// A store write a commit needs acknowledged before it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Write {
    /// A new record.
    Put(RunsName, Vec<u8>),
    /// This writer's last record of the partition has the same content:
    /// its expiry moves on (written again where the store lacks it).
    Refresh(RunsName, Vec<u8>),
}

/// One partition's commit metadata and what it needs of the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Prepared {
    pub(crate) text: String,
    pub(crate) write: Option<Write>,
    /// This writer's records of the partition that are needless once this
    /// commit is known committed.
    pub(crate) superseded: Vec<RunsName>,
}

impl Default for Records {
    fn default() -> Records {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_micros());
        Records {
            next: u64::try_from(started).unwrap_or(0),
            written: HashMap::new(),
        }
    }
}

impl Records {
    /// The metadata of `commit` of `stream`, written by `token`. The
    /// records it supersedes leave the bookkeeping now: the committer
    /// deletes them once the commit is known committed; where it is not,
    /// they expire with the stream's watermark TTL.
    pub(crate) fn prepare(
        &mut self,
        key_id: &str,
        stream: StreamId,
        token: OwnerToken,
        commit: &Commit,
    ) -> Prepared {
        if let Some(text) = metadata::inline(key_id, commit.gap_free, &commit.done) {
            return Prepared {
                text,
                write: None,
                superseded: self.supersede(&commit.tp, None),
            };
        }
        let content = metadata::runs_text(&commit.done).into_bytes();
        let digest = metadata::digest(&content);
        let written = self.written.entry(commit.tp.clone()).or_default();
        let (name, write) = match written.last() {
            Some(&(name, last)) if last == digest && name.writer == token => {
                (name, Write::Refresh(name, content))
            }
            _ => {
                let name = RunsName {
                    stream,
                    topic: TopicTag::of(&commit.tp.0),
                    partition: commit.tp.1,
                    writer: token,
                    sequence: self.next,
                };
                self.next += 1;
                written.push((name, digest));
                (name, Write::Put(name, content))
            }
        };
        let text = metadata::encode(
            key_id,
            &Metadata {
                gap_free: commit.gap_free,
                runs: Runs::Stored(RunsRef {
                    writer: name.writer.0,
                    sequence: name.sequence,
                    digest,
                }),
                marks: Vec::new(),
            },
        );
        Prepared {
            text,
            write: Some(write),
            superseded: self.supersede(&commit.tp, Some(name)),
        }
    }

    /// Every record of `tp` but `named`, out of the bookkeeping.
    fn supersede(&mut self, tp: &Tp, named: Option<RunsName>) -> Vec<RunsName> {
        let Some(written) = self.written.get_mut(tp) else {
            return Vec::new();
        };
        let mut superseded = Vec::new();
        written.retain(|(name, _)| {
            let keep = Some(*name) == named;
            if !keep {
                superseded.push(*name);
            }
            keep
        });
        superseded
    }

    /// The partition went: its last record stays for the next owner
    /// (which never deletes it: it expires), the bookkeeping goes.
    pub(crate) fn forget(&mut self, tp: &Tp) {
        self.written.remove(tp);
    }
}

/// What one commit of `runs` above `offset` on `topic`/`partition` writes,
/// as the worker builds it (for the bench's figures, docs/design.md §7):
/// its metadata's text and, where the runs do not fit inline, the store
/// write it needs first: the record of them, put under a new name.
pub fn commit_cost(
    key_id: &str,
    stream: StreamId,
    token: OwnerToken,
    (topic, partition, offset): (&str, i32, i64),
    runs: &[(i64, i64)],
) -> (String, Option<(RunsName, Vec<u8>)>) {
    let commit = Commit {
        tp: (Arc::from(topic), partition),
        offset,
        gap_free: true,
        done: runs.to_vec(),
    };
    let prepared = Records::default().prepare(key_id, stream, token, &commit);
    let write = prepared.write.map(|w| match w {
        Write::Put(name, content) | Write::Refresh(name, content) => (name, content),
    });
    (prepared.text, write)
}

/// The writes of one commit, each acknowledged, retried while `deadline`
/// allows: a commit naming a record the store does not hold would be a
/// store loss for the next owner.
pub(crate) async fn write(
    store: &Arc<dyn ClaimStore>,
    clock: &Arc<dyn Clock>,
    writes: &[Write],
    deadline: Instant,
) -> Result<(), StoreError> {
    let at = clock.wall_ms();
    let mut backoff = Duration::from_millis(20);
    for w in writes {
        loop {
            let result = tokio::time::timeout(Duration::from_secs(5), async {
                match w {
                    Write::Put(name, content) => store.put_runs(name, content, at).await,
                    Write::Refresh(name, content) => {
                        if store.refresh_runs(name, at).await? {
                            Ok(())
                        } else {
                            store.put_runs(name, content, at).await
                        }
                    }
                }
            })
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "runs record write timed out".into(),
                ))
            });
            match result {
                Ok(()) => break,
                Err(error) if clock.now() + backoff < deadline => {
                    crate::metrics::store_failed("runs", &error);
                    // A pause before asking the real store again; the
                    // deadline is the worker's clock's.
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(error) => return Err(error),
            }
        }
    }
    Ok(())
}

/// Deletes records a commit known committed superseded, off the loop. One
/// that fails expires with its TTL instead.
pub(crate) fn delete(store: &Arc<dyn ClaimStore>, superseded: Vec<RunsName>) {
    if superseded.is_empty() {
        return;
    }
    let store = store.clone();
    tokio::spawn(async move {
        if let Err(error) = store.delete_runs(&superseded).await {
            warn!(%error, records = superseded.len(), "records of finished runs a later commit superseded were not deleted: they expire with the stream's watermark ttl");
        }
    });
}

#[cfg(test)]
#[path = "runs_tests.rs"]
mod tests;

/// What an assignment's committed metadata says is finished above the
/// committed offset.
pub(crate) enum AtAssignment {
    Skip(Vec<(i64, i64)>),
    /// The record it names is missing or not what it names: a store loss.
    Lost(Check),
}

impl Worker {
    /// A commit's metadata for `c` (docs/design.md §7): its runs inline,
    /// or a record of them in the store, which the commit needs written
    /// first.
    pub(super) fn prepare_commit(&self, p: &mut Pipeline, stream: usize, c: &Commit) -> Prepared {
        let key_id = &self.streams[stream].config.spec.key_id;
        p.runs.prepare(key_id, StreamId(stream), self.token, c)
    }

    /// The runs the committed metadata of `tp` names: inline, or fetched
    /// from the store and checked against their digest. The store is
    /// asked until it answers (within the flush's patience: past it, the
    /// replica ends rather than decide finished records again).
    pub(super) async fn runs_at_assignment(
        &self,
        stream: usize,
        tp: &Tp,
        runs: Runs,
    ) -> Result<AtAssignment, super::WorkerError> {
        let stored = match runs {
            Runs::Inline(done) => return Ok(AtAssignment::Skip(done)),
            Runs::Stored(stored) => stored,
        };
        let name = RunsName {
            stream: StreamId(stream),
            topic: TopicTag::of(&tp.0),
            partition: tp.1,
            writer: OwnerToken(stored.writer),
            sequence: stored.sequence,
        };
        let deadline = self.clock.now() + FLUSH_PATIENCE;
        let mut backoff = Duration::from_millis(20);
        let content = loop {
            match self.store.get_runs(&name, self.clock.wall_ms()).await {
                Ok(content) => break content,
                Err(error) if self.clock.now() + backoff < deadline => {
                    crate::metrics::store_failed("runs", &error);
                    // A pause before asking the real store again; the
                    // deadline is the worker's clock's.
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(source) => return Err(super::WorkerError::RunsUnread { source }),
            }
        };
        let spec = &self.streams[stream].config.spec;
        let (topic, partition) = (&tp.0, tp.1);
        let Some(content) = content else {
            error!(stream = %spec.name, %topic, partition, writer = stored.writer, sequence = stored.sequence,
                "the committed metadata names a record of finished runs the store does not hold: the store lost it");
            return Ok(AtAssignment::Lost(Check::Missing));
        };
        let read = std::str::from_utf8(&content)
            .ok()
            .filter(|_| metadata::digest(&content) == stored.digest)
            .and_then(|text| metadata::parse_runs(text).ok());
        match read {
            Some(done) => Ok(AtAssignment::Skip(done)),
            None => {
                error!(stream = %spec.name, %topic, partition, writer = stored.writer, sequence = stored.sequence,
                    "the store's record of finished runs is not the one the committed metadata names (its digest differs): the store was replaced or rebuilt under it");
                Ok(AtAssignment::Lost(Check::Changed))
            }
        }
    }

    /// A record the committed metadata names is lost: the stream's
    /// store-lost path (docs/design.md §8.2).
    pub(super) fn runs_lost(&self, p: &mut Pipeline, stream: usize, how: Check) {
        self.on_store_lost(
            p,
            &StreamLost {
                stream: StreamId(stream),
                how,
            },
            super::store_lost::Evidence::RunsRecord,
        );
    }
}
