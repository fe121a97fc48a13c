//! Records of finished runs (docs/design.md §7): where a commit's finished
//! runs above its offset do not fit in its metadata, the metadata names one
//! of these instead, with its content's digest. The store only keeps them:
//! what they say, and when one may go, is the worker's (`worker/runs.rs`).
//!
//! Each is written under a name no other record ever had (stream, input
//! topic, partition, writer token, writer's sequence: equal content must not
//! mean an equal name, or one writer's clean-up would delete what another's
//! commit names), acknowledged before the commit that names it, never
//! changed, its expiry (the stream's watermark TTL, so at least a week)
//! moved on by each commit that names it again, and deleted only by its
//! writer once a later commit of its own is known committed.

use crate::coordinates::TopicTag;

use super::{OwnerToken, StreamId};

/// A record's unique name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunsName {
    pub stream: StreamId,
    pub topic: TopicTag,
    pub partition: i32,
    /// The owner token of the replica that wrote it.
    pub writer: OwnerToken,
    /// The writer's sequence number of it.
    pub sequence: u64,
}
