//! What an operator's commands leave in the store: a reset's ranges per
//! partition (`idemgate reset`, docs/design.md §4.9) and the claims a
//! rebuild writes back from the clean topic (`idemgate rebuild`, §8.3).

use super::StreamId;
use crate::clock::Millis;
use crate::coordinates::{Coordinates, TopicTag};
use crate::fingerprint::{PayloadDigest, SourceHash};

/// What an operator's reset (`idemgate reset`) recorded for one partition,
/// read with its watermark in every round (docs/design.md §4.9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRanges {
    pub stream: StreamId,
    pub topic: TopicTag,
    pub partition: i32,
    /// Ranges `[from, to)` skipped forward with `--skipped abandoned`: an
    /// unsettled claim whose holder lies in one may be taken over by
    /// another record (compare and set on the whole old value).
    pub abandoned: Vec<(i64, i64)>,
    /// The range `[from, to)` replayed with `--re-emit`: a record in it
    /// that was decided and delivered before as its claim's holder is
    /// produced to clean again, marked `idemgate-replay`, instead of
    /// nothing.
    pub replay: Option<(i64, i64)>,
}

impl PartitionRanges {
    pub fn in_replay(&self, offset: i64) -> bool {
        self.replay
            .is_some_and(|(from, to)| from <= offset && offset < to)
    }

    pub fn in_abandoned(&self, offset: i64) -> bool {
        self.abandoned
            .iter()
            .any(|&(from, to)| from <= offset && offset < to)
    }
}

/// What `idemgate reset` writes for one partition of one stream. Applied
/// only while the group has no members, so no round races it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionReset {
    pub stream: StreamId,
    pub topic: TopicTag,
    pub partition: i32,
    /// `--skipped delivered`: `W = max(W, to)` (a watermark never goes
    /// down).
    pub raise_to: Option<i64>,
    /// `--skipped abandoned`: add this range to the partition's abandoned
    /// ones.
    pub abandon: Option<(i64, i64)>,
    /// The partition's re-emit range from now on; `None` clears an earlier
    /// one (a reset without `--re-emit` re-emits nothing).
    pub replay: Option<(i64, i64)>,
}

/// A settled tier-1 claim written back by `idemgate rebuild` from a clean
/// output (docs/design.md §8.3): its holder is the output's input, its done
/// flag is set, and it expires when the original would have, at the
/// record's timestamp plus `tier1_ttl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restored {
    pub stream: StreamId,
    pub hash: SourceHash,
    /// Recomputed from the clean record's payload with the stream's
    /// profile: a later copy with another payload is a conflict again.
    pub digest: PayloadDigest,
    pub holder: Coordinates,
    /// The record's timestamp: the claim time the value records.
    pub at: Millis,
    /// When the key expires, on the store's clock.
    pub expires_at: Millis,
}

/// At most this many abandoned ranges are kept per partition: an older
/// one beyond them is merged into its neighbour (every record between two
/// skips was finished and settled before the second, so the merged range
/// frees no claim a live holder still needs).
pub const MAX_ABANDONED: usize = 16;

/// Adds `range` to `ranges`, sorted, merging overlaps and beyond
/// [`MAX_ABANDONED`] the closest neighbours.
pub fn add_abandoned(ranges: &mut Vec<(i64, i64)>, range: (i64, i64)) {
    if range.0 >= range.1 {
        return;
    }
    ranges.push(range);
    ranges.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(ranges.len());
    for &(from, to) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    while merged.len() > MAX_ABANDONED {
        let gap = (1..merged.len())
            .min_by_key(|&i| merged[i].0 - merged[i - 1].1)
            .unwrap_or(1);
        let next = merged.remove(gap);
        merged[gap - 1].1 = next.1;
    }
    *ranges = merged;
}
