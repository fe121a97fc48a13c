//! Exactly once: what a failed `send_offsets_to_transaction` or
//! `commit_transaction` leaves (docs/design.md §7), pure.

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// What a failed `send_offsets_to_transaction` or `commit_transaction`
/// leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommitFailure {
    /// The transaction must be aborted, and the producer goes on: a
    /// delivery inside it failed, or the brokers aborted it.
    Abortable,
    /// The end of this worker: the producer is fenced or broken, or this
    /// replica is a zombie whose group generation moved on (its next owner
    /// replays), or the outcome is unknown (a timeout).
    Fatal,
}

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
        KafkaError::Transaction(e) => {
            classify_commit(e.code(), e.txn_requires_abort(), e.is_fatal())
        }
        _ => CommitFailure::Fatal,
    }
}

/// Pure: the class of a transactional error by its code and librdkafka's
/// flags.
pub(crate) fn classify_commit(
    code: RDKafkaErrorCode,
    requires_abort: bool,
    fatal: bool,
) -> CommitFailure {
    if requires_abort && !fatal && !FENCED.contains(&code) {
        CommitFailure::Abortable
    } else {
        CommitFailure::Fatal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abortable_error_is_aborted_and_a_fenced_fatal_or_unknown_one_ends_the_worker() {
        use RDKafkaErrorCode as Code;
        // A delivery inside the transaction failed, or the brokers aborted it.
        for code in [
            Code::MessageSizeTooLarge,
            Code::InvalidRecord,
            Code::InvalidTransactionalState,
        ] {
            assert_eq!(
                classify_commit(code, true, false),
                CommitFailure::Abortable,
                "{code:?}"
            );
        }
        // A zombie (its group generation moved on) or a fenced producer:
        // abortable to librdkafka, the end of this worker all the same.
        for code in FENCED {
            assert_eq!(
                classify_commit(code, true, false),
                CommitFailure::Fatal,
                "{code:?}"
            );
        }
        // Fatal, or retriable (a timeout: the outcome is unknown).
        assert_eq!(
            classify_commit(Code::ProducerFenced, false, true),
            CommitFailure::Fatal
        );
        assert_eq!(
            classify_commit(Code::OperationTimedOut, false, false),
            CommitFailure::Fatal
        );
        assert_eq!(
            classify_commit(Code::InvalidRecord, true, true),
            CommitFailure::Fatal
        );
    }
}
