//! What the flight tracks of a record, apart from the I/O that reads and
//! writes it: the record as read (`consumer.rs` fills it on the polling
//! thread), how much of it an output carries, and what a failed delivery
//! means (`output.rs` classifies the producer's errors into it). The
//! flight imports these, never the I/O files.

use std::sync::Arc;
use std::time::Instant;

/// A record's headers as read: name, and value if it has one.
pub type HeaderList = Vec<(String, Option<Vec<u8>>)>;

/// A polled record, owned so a batch outlives the poll that read it.
#[derive(Clone, Debug)]
pub(crate) struct Input {
    /// Shared by every record of the topic.
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) payload: Option<Vec<u8>>,
    pub(crate) headers: HeaderList,
    /// The record's timestamp (ms), the clock in event-time mode.
    pub(crate) timestamp: Option<i64>,
    /// When the poll that read it returned: where its decision latency
    /// starts.
    pub(crate) polled: Instant,
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
