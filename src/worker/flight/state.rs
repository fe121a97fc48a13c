//! Where a record and a partition stand: the flight's state, plain data
//! (the transitions are in `mod.rs`, `take.rs`, `round.rs`, `deliver.rs`).

use std::time::{Duration, Instant};

use super::super::record::Input;
use crate::clock::Millis;
use crate::coordinates::{Coordinates, TopicTag};
use crate::decision::Decision;
use crate::fingerprint::{Fingerprint, Invalid};
use crate::store::Held;

/// Where a record stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Its partition's watermark is not known yet (just assigned).
    Fresh,
    /// To be claimed in the next round.
    Claim,
    /// In a round in flight.
    Claiming,
    /// Another record holds an unsettled claim on its hash.
    Wait { retry_at: Instant },
    /// Decided; its output is to be sent.
    Produce,
    /// Its delivery report is outstanding.
    Sending,
    /// Exactly once: delivered inside the open transaction; its claim
    /// settles once the transaction commits (`transaction.rs`).
    Produced,
    /// A delivery failed and may have landed: sent again at this instant.
    Backoff { until: Instant },
    /// Delivered; its claim is to be settled (watermark, done flag or
    /// release).
    Delivered,
    /// Its settlement is in a round in flight.
    Settling,
    /// Nothing more to do but commit its offset.
    Finished,
}

/// A tier-1 claim this record holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Owned {
    pub(crate) held: Held,
    /// Written by this record in this assignment: only then may it be
    /// released (docs/design.md §4.5).
    pub(crate) fresh: bool,
    /// Settle by deleting it: every attempt to produce the record's output
    /// was refused, certainly not persisted.
    pub(crate) release: bool,
    /// The hash goes into tier 2 at publish (a delivered novel record of a
    /// tiered stream) at this time.
    pub(crate) insert: Option<Millis>,
}

pub(crate) struct Record {
    pub(crate) input: Input,
    pub(crate) stream: usize,
    pub(crate) print: Option<Result<Fingerprint, Invalid>>,
    pub(crate) stage: Stage,
    pub(crate) decision: Option<Decision>,
    pub(crate) claim: Option<Owned>,
    /// The clock of its claim (wall or event time).
    pub(crate) at: Millis,
    /// Since when it has waited on another record's claim, and on whose.
    pub(crate) waiting_since: Option<Instant>,
    pub(crate) waiting_on: Option<Coordinates>,
    pub(super) backoff: Duration,
    pub(super) bytes: usize,
    /// Counted among the unfinished records (until it finishes).
    pub(super) counted: bool,
    /// The poll batch it came in.
    pub(super) batch: u64,
    /// Its partition's assignment.
    pub(crate) epoch: u64,
    /// Produced again in a replay the operator asked to re-emit
    /// (`idemgate reset --re-emit`): its output is marked `idemgate-replay`.
    pub(crate) replay: bool,
    /// A round carrying its claim failed: the claim may have been written
    /// (or re-stamped) without this record hearing of it, so a later
    /// `Won { fresh: true }` cannot be trusted to mean it wrote it, and it
    /// never releases.
    pub(super) claim_uncertain: bool,
    /// Exactly once: its output is in a transaction the last owner
    /// committed (listed in the commit's metadata): it is claimed to settle
    /// its claim, and produces nothing.
    pub(crate) already_out: bool,
    /// Exactly once: the transaction its output was last sent in.
    pub(super) txn: u64,
}

/// Where an assigned partition resumes, from its committed offset and
/// idemgate's metadata on it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Resume {
    /// The committed offset, if any.
    pub(crate) committed: Option<i64>,
    /// The committed offset, where the metadata says everything below it
    /// was delivered (gap-free).
    pub(crate) metadata_raise: Option<i64>,
    /// Finished ranges above it that the last owner listed.
    pub(crate) skip: Vec<(i64, i64)>,
}

/// One partition this replica owns.
pub(crate) struct Partition {
    pub(crate) stream: usize,
    pub(crate) tag: TopicTag,
    /// Which assignment this is: a delivery report from an earlier one
    /// (the partition revoked and given back meanwhile) is not this
    /// assignment's record's.
    pub(crate) epoch: u64,
    /// Records from the committed offset on, by offset.
    pub(super) records: super::records::Records,
    /// The first offset this owner read since it was assigned the
    /// partition: the start of every watermark raise it asks for.
    pub(super) range_start: Option<i64>,
    /// The offset after the last record read.
    pub(super) next_read: Option<i64>,
    /// The offset committed last (the next one to read after a restart).
    pub(super) committed: Option<i64>,
    /// The watermark as last read or raised; `None` where none exists.
    pub(crate) watermark: Option<i64>,
    /// The re-emit range an operator's reset recorded, as last read: its
    /// records below the watermark are claimed (the store says whether to
    /// produce them again) rather than finished on arrival.
    pub(super) replay: Option<(i64, i64)>,
    /// A replay under way below the watermark, counted for the log
    /// (`replay.rs`).
    pub(super) replaying: Option<super::replay::Replaying>,
    /// The watermark was read after the assignment.
    pub(super) fresh: bool,
    /// This owner's range starts at or below the watermark: its raises
    /// hold. Where not (an offset skip), its records settle by done flags.
    pub(super) gap_free: bool,
    /// The end of the last raise acknowledged.
    pub(super) raised: i64,
    /// A raise from the committed offset's idemgate metadata, asked once.
    pub(super) metadata_raise: Option<i64>,
    /// Ranges the last owner finished above its commit: not decided again.
    pub(super) skip: Vec<(i64, i64)>,
    /// The finished ranges above the offset in the last commit.
    pub(super) committed_done: Vec<(i64, i64)>,
    /// Exactly once: the offset and the delivered ranges above it in the
    /// last transaction committed.
    pub(super) txn_committed: Option<(i64, Vec<(i64, i64)>)>,
    /// Records read and not finished.
    pub(super) unfinished: usize,
    /// Every record below this offset is delivered (or settling, or
    /// finished), and below `finished_scan` finished: where the scans for
    /// the delivered and the finished prefix resume (stages only move
    /// forward past these).
    pub(super) delivered_scan: i64,
    pub(super) finished_scan: i64,
    /// The committed metadata names a record of finished runs the store
    /// lost (docs/design.md §7): no commit of this process goes over it,
    /// so `rebuild` still finds what it named.
    pub(super) keep_commit: bool,
}
