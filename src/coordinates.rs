//! Where a record is, in the words the claims, the store's answers, the
//! decisions' headers and the worker's flight share: its input topic's tag,
//! its partition and its offset. A leaf: it imports nothing of the crate,
//! so everything that names a record's place can, without importing the
//! store.

use std::fmt;

/// Identifies a record within the stream: the claim holder. Compared
/// field for field to recognise a record meeting its own claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Coordinates {
    pub topic: TopicTag,
    pub partition: i32,
    pub offset: i64,
}

/// A 24-bit tag of an input topic's name. Stored instead of the name so
/// every tier-1 value has the same small size; the worker maps tags back to
/// the names of its stream's input topics (the config refuses two inputs of
/// one stream with the same tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicTag(pub u32);

impl TopicTag {
    /// The first three bytes of SHA-256 over the topic name: stable across
    /// restarts, config reorderings and replicas.
    pub fn of(topic: &str) -> TopicTag {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(topic.as_bytes());
        TopicTag(u32::from_be_bytes([0, digest[0], digest[1], digest[2]]))
    }
}

impl fmt::Display for Coordinates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:06x}/{}/{}", self.topic.0, self.partition, self.offset)
    }
}
