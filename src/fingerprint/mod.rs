//! Canonical source hashes (docs/design.md §3).
//!
//! A record's identity is a SHA-256 over a canonical form, never over raw
//! bytes, so two deliveries of one event hash alike however the sender
//! spelled them (key order, whitespace, "100.50" versus "100.5000", time
//! zone offsets) and two different events never do. Beside the hash, a short
//! digest of the whole payload tells a reused key with a different payload
//! (a `conflict`) from a true duplicate.
//!
//! The hash input is a tag naming the format version and profile kind
//! (`idemgate/v1/<kind>\0`) followed by the canonical form, so a header
//! value can never collide with a payload that happens to have the same
//! bytes, and a future change of canonical form can move to `v2` without
//! silently matching old claims. Stream namespaces are the store's job.
//!
//! - `header`: the header's UTF-8 value.
//! - `record-key`: the Kafka record key's bytes as they are.
//! - `fields`: a canonical JSON object mapping each listed field name
//!   (dotted path as written) to its normalised value; see [`Normaliser`].
//! - `payload`: the canonical JSON of the whole payload; `payload-raw`: the
//!   bytes as they are.
//!
//! Canonical JSON sorts object keys by their UTF-8 bytes, drops whitespace,
//! escapes strings as serde_json does and keeps serde_json's number
//! representation: `1` and `1.0` differ (as do `"123"` and `123`); use the
//! `decimal` or `round:N` normalisers where numeric equality matters.
//!
//! `ignore` lists payload fields left out of the digest (and, under
//! `payload`, out of the hash): see `ignore.rs`.
//!
//! Every number is read from its literal text, never through a binary float
//! alone: `1.000000000000000001` and `1.000000000000000002` are two amounts.
//! Where serde_json's representation is exactly the literal's value it is
//! kept, so ordinary numbers hash as they always did; a longer number is
//! written in an exact form of its own (`number.rs`), and a number its
//! normaliser cannot hold exactly is refused (`inexact-decimal`).

mod canonical;
mod error;
mod fast;
mod fast_normalise;
mod fast_scan;
mod fast_tree;
mod ignore;
mod json;
mod normalise;
mod number;
mod profile;
#[cfg(test)]
mod profile_tests;

#[cfg(test)]
mod duplicate_key_tests;
#[cfg(test)]
mod fast_tests;
#[cfg(test)]
mod keys_tests;
#[cfg(test)]
mod tests;

use std::fmt;

use sha2::{Digest, Sha256};

use json::{Json, Object};

pub use error::Invalid;
pub use profile::{FieldSpec, Identity, Normaliser, Profile, ProfileError};

/// Hash-input prefixes: format version, then profile kind, NUL-terminated.
const TAG_HEADER: &[u8] = b"idemgate/v1/header\0";
const TAG_FIELDS: &[u8] = b"idemgate/v1/fields\0";
const TAG_PAYLOAD: &[u8] = b"idemgate/v1/payload\0";
const TAG_PAYLOAD_RAW: &[u8] = b"idemgate/v1/payload-raw\0";
const TAG_RECORD_KEY: &[u8] = b"idemgate/v1/record-key\0";

/// SHA-256 of the canonical form of the record's identity.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceHash(pub [u8; 32]);

/// First 8 bytes of SHA-256 over the canonical whole payload (canonical JSON
/// when the payload is JSON, raw bytes otherwise; under `fields`, with the
/// listed fields replaced by their normalised values; the profile's
/// `ignore` paths removed from a JSON payload); lets a reused key
/// with a different payload be told apart (a `conflict`). Eight bytes keep the
/// stored claim compact; an accidental match between two payloads under one
/// key is a 1 in 2^64 event.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PayloadDigest(pub [u8; 8]);

/// What a record is claimed under, and what tells a conflict from a
/// duplicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// The claim key's hash.
    pub hash: SourceHash,
    /// Digest of the whole payload, stored with the claim.
    pub digest: PayloadDigest,
}

/// What the fingerprint sees of a Kafka record: borrowed, so the consumer
/// loop builds it from a message without copying.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    /// The Kafka record key; `None` when the record has none.
    pub key: Option<&'a [u8]>,
    /// The value; `None` for a tombstone.
    pub payload: Option<&'a [u8]>,
    /// Headers in wire order; a header may repeat and may have no value.
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
}

impl fmt::Display for SourceHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for SourceHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for PayloadDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for PayloadDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Compute a record's fingerprint under a profile.
///
/// Pure: no I/O, never panics. The size check comes first, so an oversized
/// record is refused before any parsing. The payload is parsed at most once
/// and its canonical form serves both the digest and (for `payload`) the
/// hash.
///
/// A single-pass scanner over reused thread-local buffers (`fast.rs`)
/// decides every record it is sure of, with no heap allocation per record
/// in steady state (but for the normalisers' uncommon cases, such as
/// `upper`/`lower` on non-ASCII text, which go through the reference's
/// tree); anything else (errors included) goes to
/// [`fingerprint_reference`], whose results it reproduces byte for byte.
pub fn fingerprint(
    profile: &Profile,
    max_bytes: usize,
    record: &RecordView<'_>,
) -> Result<Fingerprint, Invalid> {
    match fast::fingerprint(profile, max_bytes, record) {
        Some(result) => result,
        None => fingerprint_reference(profile, max_bytes, record),
    }
}

/// The reference implementation of [`fingerprint`] (serde_json's parse into
/// a tree that keeps each number's text, then canonical JSON into a fresh
/// string): what the fast path must agree with on every input, and what
/// decides whenever it is not sure. Public for the claims bench, which
/// times both.
#[doc(hidden)]
pub fn fingerprint_reference(
    profile: &Profile,
    max_bytes: usize,
    record: &RecordView<'_>,
) -> Result<Fingerprint, Invalid> {
    let payload = record.payload.unwrap_or_default();
    if payload.len() > max_bytes {
        return Err(Invalid::TooLarge {
            size: payload.len(),
            limit: max_bytes,
        });
    }
    let (mut parsed, duplicates) = match json::parse_noting_duplicates(payload) {
        Ok(parsed) => (Ok(parsed.value), parsed.duplicates),
        Err(error) => (Err(error), Vec::new()),
    };
    if let Ok(value) = &mut parsed {
        ignore::remove(value, &profile.ignore);
    }
    let canonical = parsed.as_ref().ok().map(canonical::to_canonical);
    let digest = payload_digest(canonical.as_deref().map_or(payload, str::as_bytes));

    let hash = match &profile.identity {
        Identity::Header { name } => hash(TAG_HEADER, header_value(record, name)?.as_bytes()),
        Identity::RecordKey => hash(TAG_RECORD_KEY, record_key(record)?),
        Identity::Payload { raw: true } => {
            if payload.is_empty() {
                return Err(Invalid::EmptyPayload);
            }
            hash(TAG_PAYLOAD_RAW, payload)
        }
        Identity::Payload { raw: false } => {
            json(payload, &parsed)?;
            if let Some(key) = duplicates
                .iter()
                .find(|key| !profile.ignore.iter().any(|path| holds(path, key)))
            {
                return Err(duplicate_key(key));
            }
            // Parsed, so `canonical` is present.
            hash(
                TAG_PAYLOAD,
                canonical.as_deref().unwrap_or_default().as_bytes(),
            )
        }
        Identity::Fields(specs) => {
            if specs.is_empty() {
                return Err(Invalid::NoFields);
            }
            // The ignored paths are gone from the tree, and none is (or
            // holds, or lies in) a listed field (`Profile::ignoring`), so
            // every lookup finds what it found before.
            let root = match json(payload, &parsed)? {
                Json::Object(root) => root,
                _ => return Err(Invalid::NotObject),
            };
            let mut entries = Vec::with_capacity(specs.len());
            for spec in specs {
                if let Some(key) = duplicates
                    .iter()
                    .find(|key| holds(&spec.name, key) || is_on_path(key, &spec.name))
                {
                    return Err(duplicate_key(key));
                }
                let value = normalise::lookup(root, &spec.name)?;
                entries.push((
                    &spec.name,
                    normalise::normalise(&spec.name, &spec.normaliser, value)?,
                ));
            }
            let mut form = String::new();
            canonical::write_object(
                &mut form,
                entries.iter().map(|(name, value)| (*name, value)),
            );
            // The digest sees the listed fields as normalised, so a copy that
            // only spells them differently ("100.5000", "usd") is a
            // duplicate, while an edit elsewhere in the payload is a conflict.
            let mut normalised = root.clone();
            for (name, value) in &entries {
                replace_at(&mut normalised, name, value.clone());
            }
            let digest =
                payload_digest(canonical::to_canonical(&Json::Object(normalised)).as_bytes());
            return Ok(Fingerprint {
                hash: hash(TAG_FIELDS, form.as_bytes()),
                digest,
            });
        }
    };
    Ok(Fingerprint { hash, digest })
}

/// The parsed payload, or why the profile cannot read it as JSON.
fn json<'a>(
    payload: &[u8],
    parsed: &'a Result<Json, serde_json::Error>,
) -> Result<&'a Json, Invalid> {
    if payload.is_empty() {
        return Err(Invalid::EmptyPayload);
    }
    parsed.as_ref().map_err(|error| Invalid::NotJson {
        reason: error.to_string(),
    })
}

/// The value of the first header called `name`, which must be non-empty
/// UTF-8: a key that cannot be read as text is more likely a producer bug
/// than an identity.
fn header_value<'a>(record: &RecordView<'a>, name: &str) -> Result<&'a str, Invalid> {
    let value = record
        .headers
        .iter()
        .find(|(key, _)| *key == name)
        .and_then(|(_, value)| *value)
        .ok_or_else(|| Invalid::MissingHeader {
            name: name.to_owned(),
        })?;
    let text = std::str::from_utf8(value).map_err(|_| Invalid::HeaderNotUtf8 {
        name: name.to_owned(),
    })?;
    if text.is_empty() {
        return Err(Invalid::EmptyHeader {
            name: name.to_owned(),
        });
    }
    Ok(text)
}

/// The record's key, which must be present and non-empty: hashing nothing
/// would make every keyless record a duplicate of the first. Its bytes are
/// taken as they are (keys may be binary: a UUID's 16 bytes, Avro).
fn record_key<'a>(record: &RecordView<'a>) -> Result<&'a [u8], Invalid> {
    match record.key {
        None => Err(Invalid::MissingKey),
        Some([]) => Err(Invalid::EmptyKey),
        Some(key) => Ok(key),
    }
}

/// The dotted path `outer` is `key`'s path or one of its objects: `key`
/// lies in (or is) the value at `outer`.
fn holds(outer: &str, key: &[String]) -> bool {
    let mut steps = key.iter();
    outer
        .split('.')
        .all(|segment| steps.next().is_some_and(|step| step == segment))
}

/// `key` is an object on the dotted path `inner` (or the path itself).
fn is_on_path(key: &[String], inner: &str) -> bool {
    let mut segments = inner.split('.');
    key.iter()
        .all(|step| segments.next().is_some_and(|segment| segment == step))
}

/// A duplicated key's error, its path written dotted, `[]` for an array's
/// items.
fn duplicate_key(key: &[String]) -> Invalid {
    let mut dotted = String::new();
    for step in key {
        if step == json::ARRAY_STEP {
            dotted.push_str("[]");
        } else {
            if !dotted.is_empty() {
                dotted.push('.');
            }
            dotted.push_str(step);
        }
    }
    Invalid::DuplicateKey { key: dotted }
}

/// Sets the value at a dotted path that `normalise::lookup` has already
/// found, so every step exists and is an object.
fn replace_at(root: &mut Object, path: &str, value: Json) {
    let mut segments = path.split('.').peekable();
    let mut object = root;
    while let Some(segment) = segments.next() {
        if segments.peek().is_none() {
            object.insert(segment.to_owned(), value);
            return;
        }
        match object.get_mut(segment) {
            Some(Json::Object(inner)) => object = inner,
            _ => return,
        }
    }
}

fn hash(tag: &[u8], form: &[u8]) -> SourceHash {
    let mut hasher = Sha256::new();
    hasher.update(tag);
    hasher.update(form);
    SourceHash(hasher.finalize().into())
}

fn payload_digest(form: &[u8]) -> PayloadDigest {
    let full: [u8; 32] = Sha256::digest(form).into();
    let mut short = [0u8; 8];
    for (to, from) in short.iter_mut().zip(full) {
        *to = from;
    }
    PayloadDigest(short)
}
