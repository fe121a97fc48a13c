//! Exactly once: what a failed `send_offsets_to_transaction`,
//! `commit_transaction` or `abort_transaction` leaves, and, where its
//! outcome was unknown, what the committed offsets read back say of it
//! (docs/design.md §7), pure.

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// What a failed `send_offsets_to_transaction` or `commit_transaction`
/// leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommitFailure {
    /// The transaction must be aborted, and the producer goes on: a
    /// delivery inside it failed, or the brokers aborted it.
    Abortable,
    /// The call timed out (or librdkafka calls it retriable): whether the
    /// transaction committed is unknown. The producer is built again,
    /// which ends it, and the outcome is read back (`judge`).
    Unknown,
    /// The end of this worker: the producer is fenced or broken, or this
    /// replica is a zombie whose group generation moved on (its next owner
    /// replays).
    Fatal,
}

/// Error codes of a call that ran out of time.
const TIMED_OUT: [RDKafkaErrorCode; 2] = [
    RDKafkaErrorCode::OperationTimedOut,
    RDKafkaErrorCode::RequestTimedOut,
];

/// Error codes that say this replica was fenced, whatever else the error
/// says: retrying would only repeat it.
const FENCED: [RDKafkaErrorCode; 6] = [
    RDKafkaErrorCode::ProducerFenced,
    RDKafkaErrorCode::InvalidProducerEpoch,
    RDKafkaErrorCode::UnknownMemberId,
    RDKafkaErrorCode::IllegalGeneration,
    RDKafkaErrorCode::FencedInstanceId,
    RDKafkaErrorCode::RebalanceInProgress,
];

/// Pure: how a transactional call's error is handled.
pub(crate) fn commit_failure(error: &KafkaError) -> CommitFailure {
    match error {
        KafkaError::Transaction(e) => classify_commit(
            e.code(),
            e.txn_requires_abort(),
            e.is_fatal(),
            e.is_retriable(),
        ),
        _ => CommitFailure::Fatal,
    }
}

/// Pure: the class of a transactional error by its code and librdkafka's
/// flags.
pub(crate) fn classify_commit(
    code: RDKafkaErrorCode,
    requires_abort: bool,
    fatal: bool,
    retriable: bool,
) -> CommitFailure {
    if fatal || FENCED.contains(&code) {
        CommitFailure::Fatal
    } else if requires_abort {
        CommitFailure::Abortable
    } else if retriable || TIMED_OUT.contains(&code) {
        CommitFailure::Unknown
    } else {
        CommitFailure::Fatal
    }
}

/// What a transaction whose outcome was unknown turned out to be, once the
/// producer was built again (its epoch bump ended it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Committed,
    Aborted,
}

/// One partition of the offsets a transaction sent: what it wrote, what
/// the brokers hold now, and whether what it wrote differs from the last
/// commit seen to succeed there (`true` where there was none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadBack {
    pub(crate) written: (i64, String),
    pub(crate) read: Option<(i64, String)>,
    pub(crate) moved: bool,
}

/// Pure: the outcome of a transaction from its offsets read back after it
/// ended. A transaction is atomic: committed, every partition holds what
/// it wrote; so one partition that holds anything else says aborted. All
/// holding it says committed only where one of them moved (else the
/// commit before it wrote the same): `None`, it cannot be told.
pub(crate) fn judge(read_back: &[ReadBack]) -> Option<Outcome> {
    if read_back
        .iter()
        .any(|r| r.read.as_ref() != Some(&r.written))
    {
        Some(Outcome::Aborted)
    } else if read_back.iter().any(|r| r.moved) {
        Some(Outcome::Committed)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_abortable_unknown_or_fatal_by_their_code_and_flags() {
        use RDKafkaErrorCode as Code;
        // A delivery inside the transaction failed, or the brokers aborted it.
        for code in [
            Code::MessageSizeTooLarge,
            Code::InvalidRecord,
            Code::InvalidTransactionalState,
        ] {
            assert_eq!(
                classify_commit(code, true, false, false),
                CommitFailure::Abortable,
                "{code:?}"
            );
        }
        // A zombie (its group generation moved on) or a fenced producer:
        // abortable to librdkafka, the end of this worker all the same.
        for code in FENCED {
            assert_eq!(
                classify_commit(code, true, false, false),
                CommitFailure::Fatal,
                "{code:?}"
            );
        }
        // Fatal.
        assert_eq!(
            classify_commit(Code::ProducerFenced, false, true, false),
            CommitFailure::Fatal
        );
        assert_eq!(
            classify_commit(Code::InvalidRecord, true, true, false),
            CommitFailure::Fatal
        );
        assert_eq!(
            classify_commit(
                Code::TransactionalIdAuthorizationFailed,
                false,
                false,
                false
            ),
            CommitFailure::Fatal
        );
        // A timeout, or retriable: the outcome is unknown.
        for code in TIMED_OUT {
            assert_eq!(
                classify_commit(code, false, false, false),
                CommitFailure::Unknown,
                "{code:?}"
            );
        }
        assert_eq!(
            classify_commit(Code::CoordinatorNotAvailable, false, false, true),
            CommitFailure::Unknown
        );
        // Fenced while it timed out is fenced.
        assert_eq!(
            classify_commit(Code::ProducerFenced, false, false, true),
            CommitFailure::Fatal
        );
    }

    fn partition(written: (i64, &str), read: Option<(i64, &str)>, moved: bool) -> ReadBack {
        ReadBack {
            written: (written.0, written.1.to_string()),
            read: read.map(|(o, m)| (o, m.to_string())),
            moved,
        }
    }

    #[test]
    fn a_transaction_read_back_whole_committed_and_one_partition_elsewhere_says_aborted() {
        let a = "idemgate/2 k gap-free";
        let b = "idemgate/2 k gaps d=a.2";
        // Every partition holds what it wrote, one of them moved.
        assert_eq!(
            judge(&[
                partition((10, a), Some((10, a)), true),
                partition((4, b), Some((4, b)), false),
            ]),
            Some(Outcome::Committed)
        );
        // One partition holds the commit before (or nothing): aborted.
        assert_eq!(
            judge(&[
                partition((10, a), Some((7, a)), true),
                partition((4, b), Some((4, b)), false),
            ]),
            Some(Outcome::Aborted)
        );
        assert_eq!(
            judge(&[partition((10, a), None, true)]),
            Some(Outcome::Aborted)
        );
        // The same offset, other metadata: aborted.
        assert_eq!(
            judge(&[partition((10, b), Some((10, a)), true)]),
            Some(Outcome::Aborted)
        );
        // Nothing moved: the commit before wrote the same, so it cannot be
        // told; nor from no partition at all.
        assert_eq!(judge(&[partition((10, a), Some((10, a)), false)]), None);
        assert_eq!(judge(&[]), None);
    }
}
