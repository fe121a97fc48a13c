//! The producer side: every output is the input's key, payload and
//! timestamp as they were, its headers, and the decision headers; every
//! delivery is awaited.

use std::time::Duration;

use futures::future::join_all;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;

use super::consumer::Input;

/// One output to produce.
pub(crate) struct Output<'a> {
    pub(crate) topic: &'a str,
    pub(crate) input: &'a Input,
    pub(crate) decision_headers: Vec<(&'static str, String)>,
}

/// How long `send` may wait for room in the local queue.
const QUEUE_WAIT: Duration = Duration::from_secs(5);

/// Produces every output at once and waits for every delivery report.
/// `Err` carries the broker's or the client's reason.
pub(crate) async fn produce_all(
    producer: &FutureProducer<super::client_logs::ProducerLogs>,
    outputs: &[Output<'_>],
) -> Vec<Result<(), String>> {
    let sends = outputs.iter().map(|output| async move {
        let mut headers = OwnedHeaders::new_with_capacity(
            output.input.headers.len() + output.decision_headers.len(),
        );
        // Decision headers from an upstream idemgate are replaced, not
        // stacked: an output carries exactly one decision.
        for (key, value) in &output.input.headers {
            if key.starts_with("idemgate-") {
                continue;
            }
            headers = headers.insert(Header {
                key,
                value: value.as_deref(),
            });
        }
        for (key, value) in &output.decision_headers {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_bytes()),
            });
        }
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(output.topic).headers(headers);
        if let Some(key) = output.input.key.as_deref() {
            record = record.key(key);
        }
        if let Some(payload) = output.input.payload.as_deref() {
            record = record.payload(payload);
        }
        // The input's time, not the moment idemgate wrote it: downstream
        // windows and retention see the event as it was.
        if let Some(timestamp) = output.input.timestamp {
            record = record.timestamp(timestamp);
        }
        producer
            .send(record, Timeout::After(QUEUE_WAIT))
            .await
            .map(drop)
            .map_err(|(error, _)| error.to_string())
    });
    join_all(sends).await
}
