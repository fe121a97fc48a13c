//! Why a worker ended. Each of these is the end of the replica (`app`
//! logs it and exits non-zero); its partitions go to the group's other
//! members, who meet its claims as their own. Typed here, `anyhow` only in
//! `app` and the commands above it.

use std::time::Duration;

use rdkafka::error::KafkaError;

use crate::group::MetadataDropped;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkerError {
    /// A Kafka client call failed: what the worker was doing, and why.
    #[error("{doing}: {source}")]
    Kafka {
        doing: &'static str,
        #[source]
        source: KafkaError,
    },
    /// A client call on a blocking thread never came back (the thread
    /// panicked or the runtime is shutting down).
    #[error("{doing}: {source}")]
    Task {
        doing: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error("starting the polling thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("worker started twice")]
    StartedTwice,
    #[error("no consumer group metadata for the transaction")]
    NoGroupMetadata,
    /// Exactly once: the brokers dropped the transactional commit's
    /// offset metadata (docs/design.md §7).
    #[error(transparent)]
    MetadataDropped(#[from] MetadataDropped),
    /// Exactly once: an assignment's committed offsets stayed unreadable.
    #[error("the committed offsets of partitions assigned could not be read for {after:?} ({source}): deciding their records again could put a second output beside one the last owner committed, so this replica ends and the partitions go to another")]
    CommittedUnreadable {
        after: Duration,
        #[source]
        source: KafkaError,
    },
    /// A partition's committed metadata is idemgate's for the stream but
    /// does not read: guessing could decide finished records again.
    #[error("the committed metadata of {partition} does not read ({source}): deciding its finished records again could repeat their outputs, so this replica ends; `idemgate reset` writes a commit over it")]
    CommitMetadata {
        partition: String,
        #[source]
        source: crate::worker::metadata::Malformed,
    },
    /// The store did not answer for the record of finished runs a
    /// committed metadata names (docs/design.md §7).
    #[error("the record of finished runs a committed metadata names could not be read ({source}): deciding them again could repeat their outputs, so this replica ends")]
    RunsUnread {
        #[source]
        source: StoreError,
    },
    /// The record of finished runs a commit names could not be written
    /// before it: the commit does not go.
    #[error("the record of finished runs the transaction's commit names could not be written ({source}): aborted")]
    RunsUnwritten {
        #[source]
        source: StoreError,
    },
    /// Exactly once: the store's progress marks lie below what commits
    /// recorded (docs/design.md §8.2).
    #[error("stream {stream}: the claim store came back older than the group's commits (restored from an older snapshot or backup, or a lagging replica promoted): the open transaction is aborted and this replica ends; stop every replica, run `idemgate rebuild --stream {stream}`, then start them again")]
    StoreWentBack { stream: String },
    #[error("tier-2 inserts before the transaction commits failed until {patience:?} ran out ({source}): aborted")]
    Inserts {
        patience: Duration,
        #[source]
        source: StoreError,
    },
}

/// `result.doing("what")`: a Kafka error with what the worker was doing.
pub(super) trait Doing<T> {
    fn doing(self, doing: &'static str) -> Result<T, WorkerError>;
}

impl<T> Doing<T> for Result<T, KafkaError> {
    fn doing(self, doing: &'static str) -> Result<T, WorkerError> {
        self.map_err(|source| WorkerError::Kafka { doing, source })
    }
}

impl<T> Doing<T> for Result<T, tokio::task::JoinError> {
    fn doing(self, doing: &'static str) -> Result<T, WorkerError> {
        self.map_err(|source| WorkerError::Task { doing, source })
    }
}
