//! The consumer side: a record as read, and the thread that polls the
//! group (`poller.rs`).
//!
//! A record is fingerprinted on the polling thread, while librdkafka's
//! message is still borrowed (nothing is copied for it), so hashing runs
//! beside the loop rather than on it. What the output needs later (key,
//! payload, headers) is the one copy a record costs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rdkafka::message::BorrowedMessage;
use rdkafka::Message;

use super::record::HeaderList;
pub(crate) use super::record::Input;
use crate::config::StreamConfig;
use crate::fingerprint::{fingerprint, Fingerprint, Invalid, Profile, RecordView};

/// A record as read, with its stream and fingerprint.
pub(crate) struct Arrival {
    pub(crate) input: Input,
    pub(crate) stream: usize,
    pub(crate) print: Result<Fingerprint, Invalid>,
}

/// What the polling thread needs to fingerprint records: each input
/// topic's stream, and each stream's profile.
pub(crate) struct Reader {
    topics: HashMap<String, (Arc<str>, usize)>,
    streams: Vec<(Profile, usize)>,
}

impl Reader {
    pub(crate) fn new(streams: &[StreamConfig]) -> Reader {
        let mut topics = HashMap::new();
        for (index, stream) in streams.iter().enumerate() {
            for topic in &stream.inputs {
                topics.insert(topic.clone(), (Arc::from(topic.as_str()), index));
            }
        }
        Reader {
            topics,
            streams: streams
                .iter()
                .map(|s| (s.profile.clone(), s.max_record_bytes))
                .collect(),
        }
    }

    /// Reads and fingerprints a record; `None` for a topic no stream reads.
    pub(crate) fn read(&self, message: &BorrowedMessage<'_>, polled: Instant) -> Option<Arrival> {
        let (topic, stream) = self.topics.get(message.topic())?;
        let (profile, max_bytes) = &self.streams[*stream];
        // A header name that is not UTF-8 (shown lossily in `headers`)
        // makes the record `invalid`: its headers cannot be written out as
        // they came.
        let (headers, bad_header_name) = read_headers(message);
        // The whole record counts against the limit, not just its payload:
        // the output carries key and headers too, and one the producer or
        // the broker refuses would be undeliverable instead of `too-large`.
        let size = message.payload_len()
            + message.key().map_or(0, <[u8]>::len)
            + headers
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                .sum::<usize>();
        let print = match bad_header_name {
            _ if size > *max_bytes => Err(Invalid::TooLarge {
                size,
                limit: *max_bytes,
            }),
            Some(name) => Err(Invalid::HeaderNameNotUtf8 { name }),
            // Only the header profile reads headers.
            None if profile.header_name().is_some() => {
                let view: Vec<(&str, Option<&[u8]>)> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_deref()))
                    .collect();
                fingerprint(
                    profile,
                    *max_bytes,
                    &RecordView {
                        key: message.key(),
                        payload: message.payload(),
                        headers: &view,
                    },
                )
            }
            None => fingerprint(
                profile,
                *max_bytes,
                &RecordView {
                    key: message.key(),
                    payload: message.payload(),
                    headers: &[],
                },
            ),
        };
        let input = Input {
            topic: topic.clone(),
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().map(<[u8]>::to_vec),
            headers,
            timestamp: message.timestamp().to_millis(),
            polled,
        };
        Some(Arrival {
            input,
            stream: *stream,
            print,
        })
    }
}

/// A record's headers, read through librdkafka itself: rdkafka's header
/// iterator unwraps every name as UTF-8 and panics on one that is not, and
/// a record must never stop the worker. Such a name comes back lossily
/// (U+FFFD), and is named in the second value.
pub fn read_headers(message: &BorrowedMessage<'_>) -> (HeaderList, Option<String>) {
    use rdkafka::bindings as rd;
    let mut headers_ptr: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `message.ptr()` is the live message this borrow holds; the
    // headers it yields belong to it and are only read within this call.
    let found = unsafe { rd::rd_kafka_message_headers(message.ptr(), &mut headers_ptr) };
    if found != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || headers_ptr.is_null() {
        return (Vec::new(), None);
    }
    // SAFETY: as above; `headers_ptr` is non-null.
    let count = unsafe { rd::rd_kafka_header_cnt(headers_ptr) };
    let mut headers = Vec::with_capacity(count);
    let mut bad_name = None;
    for index in 0..count {
        let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
        // SAFETY: `index < count`; the out-pointers are valid locals; what
        // they point to lives as long as the message.
        let got = unsafe {
            rd::rd_kafka_header_get_all(headers_ptr, index, &mut name, &mut value, &mut size)
        };
        if got != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            continue;
        }
        // SAFETY: librdkafka's header names are NUL-terminated, and a
        // non-null value has `size` bytes.
        let (name, value) = unsafe {
            let name = std::ffi::CStr::from_ptr(name).to_bytes();
            let value = (!value.is_null())
                .then(|| std::slice::from_raw_parts(value.cast::<u8>(), size).to_vec());
            (name, value)
        };
        let name = match std::str::from_utf8(name) {
            Ok(name) => name.to_string(),
            Err(_) => {
                let lossy = String::from_utf8_lossy(name).into_owned();
                bad_name.get_or_insert_with(|| lossy.clone());
                lossy
            }
        };
        headers.push((name, value));
    }
    (headers, bad_name)
}
