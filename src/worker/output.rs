//! The producer side: every output is the input's key, payload and
//! timestamp as they were, its headers, and the decision headers; every
//! delivery report is awaited and classified.

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::consumer::Input;

/// One output to produce.
pub(crate) struct Output<'a> {
    pub(crate) topic: &'a str,
    pub(crate) input: &'a Input,
    pub(crate) decision_headers: crate::decision::Headers,
    /// What of the input goes out with it.
    pub(crate) carry: Carry,
}

/// How much of the input an output carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carry {
    /// Key, payload, headers and timestamp, as they came.
    Whole,
    /// All but the payload: the broker refused the whole record.
    NoPayload,
    /// Only the timestamp: even without its payload it was refused.
    Bare,
}

impl Carry {
    /// Bytes of the input this output carries (for the refusal's reason).
    pub(crate) fn bytes(self, input: &Input) -> usize {
        let key = input.key.as_ref().map_or(0, Vec::len);
        let headers: usize = input
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum();
        let payload = input.payload.as_ref().map_or(0, Vec::len);
        match self {
            Carry::Whole => key + headers + payload,
            Carry::NoPayload => key + headers,
            Carry::Bare => 0,
        }
    }
}

/// What a failed delivery means for its record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Refused for its size or content: this output can never be written
    /// as it is, and was certainly not persisted.
    Refused(String),
    /// Anything else, a timeout above all: it may have been persisted, so
    /// the claim is kept and the output produced again.
    Retry(String),
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

/// Hands one output to the producer and returns its delivery report. The
/// record is copied into librdkafka at once, so the future borrows nothing;
/// a full local queue is a failure to retry, like any other that may pass.
pub(crate) fn send(
    producer: &FutureProducer<super::client_logs::ProducerLogs>,
    output: &Output<'_>,
) -> impl std::future::Future<Output = Result<(), Failure>> + Send + 'static {
    let mut headers =
        OwnedHeaders::new_with_capacity(output.input.headers.len() + output.decision_headers.len());
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
    let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(output.topic).headers(headers);
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
    let queued = producer
        .send_result(record)
        .map_err(|(error, _)| classify(&error));
    async move {
        match queued?.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((error, _))) => Err(classify(&error)),
            Err(_) => Err(Failure::Retry(
                "delivery report lost: producer closed".into(),
            )),
        }
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
