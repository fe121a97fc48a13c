//! An output and the producer: every output is the input's key, payload
//! and timestamp as they were, its headers, and the decision headers;
//! every delivery report is classified and handed to the loop.
//!
//! Outputs go to a `ThreadedProducer` with a slot number as their opaque:
//! its thread hands each report over as (slot, outcome) and wakes the loop,
//! which knows the record by the slot. No future, box or channel per
//! output.

pub(crate) use super::record::{Carry, Failure};
use std::sync::{Arc, Mutex};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use super::client_logs::ClientLogs;
use super::consumer::Input;
use super::flight::Tp;

/// The producer outputs go through.
pub(crate) type OutputProducer = ThreadedProducer<OutputContext>;

/// Delivery reports the producer's thread has handed over, not yet taken
/// by the loop.
#[derive(Default)]
pub(crate) struct Reports {
    queue: Mutex<Vec<(usize, Result<(), Failure>)>>,
    ready: tokio::sync::Notify,
}

impl Reports {
    fn push(&self, slot: usize, outcome: Result<(), Failure>) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((slot, outcome));
        self.ready.notify_one();
    }

    /// Resolves once a report is waiting (at once if one came meanwhile).
    pub(crate) async fn ready(&self) {
        self.ready.notified().await;
    }

    /// Every report handed over so far.
    pub(crate) fn take(&self) -> Vec<(usize, Result<(), Failure>)> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The producer's context: its logs, and where its reports go.
pub(crate) struct OutputContext {
    pub(crate) logs: ClientLogs,
    pub(crate) reports: Arc<Reports>,
}

impl ClientContext for OutputContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.logs.log(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.logs.error(&error, reason);
    }
}

impl ProducerContext for OutputContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, slot: usize) {
        let outcome = match result {
            Ok(_) => Ok(()),
            Err((error, _)) => Err(classify(error)),
        };
        self.reports.push(slot, outcome);
    }
}

/// Which record an output in flight is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SentFor {
    pub(crate) tp: Tp,
    pub(crate) offset: i64,
    /// The assignment the record was read in: a report from an earlier
    /// one is stale.
    pub(crate) epoch: u64,
}

/// Outputs awaiting their reports, by slot. Slots are reused.
#[derive(Default)]
pub(crate) struct Sent {
    slots: Vec<Option<SentFor>>,
    free: Vec<usize>,
}

impl Sent {
    pub(crate) fn insert(&mut self, entry: SentFor) -> usize {
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(entry);
                slot
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() - 1
            }
        }
    }

    pub(crate) fn take(&mut self, slot: usize) -> Option<SentFor> {
        let entry = self.slots.get_mut(slot)?.take();
        if entry.is_some() {
            self.free.push(slot);
        }
        entry
    }
}

/// One output to produce.
pub(crate) struct Output<'a> {
    pub(crate) topic: &'a str,
    pub(crate) input: &'a Input,
    pub(crate) decision_headers: crate::decision::Headers,
    /// When the record was decided (`idemgate-decided-at`).
    pub(crate) decided_at: crate::clock::Millis,
    /// What of the input goes out with it.
    pub(crate) carry: Carry,
}

/// Pure: a producer error to what the loop does about it.
pub(crate) fn classify(error: &KafkaError) -> Failure {
    use rdkafka::types::RDKafkaErrorCode as Code;
    let refused = matches!(
        error.rdkafka_error_code(),
        Some(
            Code::MessageSizeTooLarge
                | Code::InvalidMessageSize
                | Code::MessageBatchTooLarge
                | Code::InvalidRecord
        )
    );
    if refused {
        Failure::Refused(error.to_string())
    } else {
        Failure::Retry(error.to_string())
    }
}

/// Hands one output to the producer under `slot`; its report comes
/// through [`Reports`]. A refusal at once (a full local queue, say) is
/// reported there too, as a failure to retry like any other that may pass.
pub(crate) fn send(producer: &OutputProducer, reports: &Reports, output: &Output<'_>, slot: usize) {
    let mut headers = OwnedHeaders::new_with_capacity(
        output.input.headers.len() + output.decision_headers.len() + 2,
    );
    // Decision headers from an upstream idemgate are replaced, not
    // stacked: an output carries exactly one decision.
    let input_headers = match output.carry {
        Carry::Bare => &[][..],
        Carry::Whole | Carry::NoPayload => &output.input.headers[..],
    };
    for (key, value) in input_headers {
        if key.starts_with("idemgate-") {
            continue;
        }
        headers = headers.insert(Header {
            key,
            value: value.as_deref(),
        });
    }
    for (key, value) in output.decision_headers.iter() {
        headers = headers.insert(Header {
            key,
            value: Some(value),
        });
    }
    // `topic/partition/offset` on the stack: librdkafka copies a header's
    // value, and a topic name has at most 249 bytes.
    let mut coordinates = [0u8; 320];
    let written = {
        use std::io::Write;
        let mut cursor = std::io::Cursor::new(&mut coordinates[..]);
        let input = output.input;
        let _ = write!(
            cursor,
            "{}/{}/{}",
            input.topic, input.partition, input.offset
        );
        cursor.position() as usize
    };
    headers = headers.insert(Header {
        key: crate::decision::INPUT,
        value: Some(&coordinates[..written]),
    });
    let mut decided_at = [0u8; 20];
    let written = {
        use std::io::Write;
        let mut cursor = std::io::Cursor::new(&mut decided_at[..]);
        let _ = write!(cursor, "{}", output.decided_at);
        cursor.position() as usize
    };
    headers = headers.insert(Header {
        key: crate::decision::DECIDED_AT,
        value: Some(&decided_at[..written]),
    });
    let mut record: BaseRecord<'_, [u8], [u8], usize> =
        BaseRecord::with_opaque_to(output.topic, slot).headers(headers);
    if let Some(key) = output
        .input
        .key
        .as_deref()
        .filter(|_| output.carry != Carry::Bare)
    {
        record = record.key(key);
    }
    if let Some(payload) = output
        .input
        .payload
        .as_deref()
        .filter(|_| output.carry == Carry::Whole)
    {
        record = record.payload(payload);
    }
    // The input's time, not the moment idemgate wrote it: downstream
    // windows and retention see the event as it was.
    if let Some(timestamp) = output.input.timestamp {
        record = record.timestamp(timestamp);
    }
    if let Err((error, _)) = producer.send(record) {
        reports.push(slot, Err(classify(&error)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::RDKafkaErrorCode;

    fn produce_error(code: RDKafkaErrorCode) -> KafkaError {
        KafkaError::MessageProduction(code)
    }

    #[test]
    fn a_size_or_content_refusal_is_final_and_anything_else_is_retried() {
        for code in [
            RDKafkaErrorCode::MessageSizeTooLarge,
            RDKafkaErrorCode::InvalidMessageSize,
            RDKafkaErrorCode::MessageBatchTooLarge,
            RDKafkaErrorCode::InvalidRecord,
        ] {
            assert!(
                matches!(classify(&produce_error(code)), Failure::Refused(_)),
                "{code:?}"
            );
        }
        // A timeout may have landed: never treated as a refusal.
        for code in [
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::RequestTimedOut,
            RDKafkaErrorCode::NotEnoughReplicasAfterAppend,
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::QueueFull,
        ] {
            assert!(
                matches!(classify(&produce_error(code)), Failure::Retry(_)),
                "{code:?}"
            );
        }
    }
}
