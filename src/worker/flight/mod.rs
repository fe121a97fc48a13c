//! Every record in flight and every partition's offsets, in one owner: the
//! pure state machine of the pipelined worker (docs/design.md §1, §4).
//! `state.rs` holds where each record and partition stands, `records.rs`
//! a partition's records in offset order, `take.rs` puts a round
//! together, `round.rs` applies its answer, `deliver.rs` the deliveries
//! and the commits.
//!
//! ```text
//! arrive ─► Fresh ─(watermark read)─► Claim ─► Claiming ─┬─► Produce ─► Sending ─┬─► Delivered ─► Settling ─► Finished
//!              │                         ▲               │                      ├─► Backoff ─► Produce
//!              └─ below the watermark ───┼───────────────┼─ Replayed ───────────┼──────────────────────► Finished
//!                                        └─── Wait ◄─────┘ (held)               └─ no claim to settle ─► Finished
//! ```
//!
//! Plain data in, next stage out: the loop (`pipeline.rs`) asks for the
//! next round ([`Flight::take_round`]), hands back its answer or its
//! failure, asks what to produce, hands back delivery reports, and asks
//! what to commit. Nothing here touches Kafka, Redis or a clock.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod deliver;
mod lost;
mod records;
mod replay;
pub(crate) use replay::ReplayLog;
mod take;
pub(crate) use deliver::{Commit, Reported};
pub(crate) use lost::Lost;
#[cfg(test)]
mod lost_tests;
mod round;
mod state;
pub(crate) use state::{Owned, Partition, Record, Resume, Stage};
#[cfg(test)]
mod settle_tests;
#[cfg(test)]
mod tests;
mod txn;
pub(crate) use txn::EarlyInserts;
#[cfg(test)]
mod txn_tests;

use super::record::Input;
use crate::clock::Millis;
use crate::coordinates::{Coordinates, TopicTag};
use crate::decision::Decision;
use crate::fingerprint::{Fingerprint, Invalid};
use crate::store::{Claim, OwnerToken, Publish, StreamId};

/// A partition: topic (shared, cheap to clone) and number.
pub(crate) type Tp = (Arc<str>, i32);

const FIRST_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What a round carries, and where each answer goes back.
#[derive(Debug, Default)]
pub(crate) struct Round {
    pub(crate) publish: Publish,
    pub(crate) claims: Vec<Claim>,
    pub(crate) read: Vec<StreamId>,
    claim_of: Vec<(Tp, i64)>,
    /// Per raise in `publish.raises`, in order: its partition and what it
    /// was for.
    raise_of: Vec<(Tp, RaiseFor)>,
    done_of: Vec<(Tp, i64)>,
    release_of: Vec<(Tp, i64)>,
    /// Every record this round settles (with a done flag, a release, or
    /// under a raise).
    settling_of: Vec<(Tp, i64)>,
    /// Partitions whose watermark this round reads for the first time.
    freshened: Vec<Tp>,
}

/// What became of a record read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrived {
    Kept,
    /// At or below an offset already read (a fetch started again from the
    /// assignment's start): the record is in flight already.
    ReadAgain,
    /// Its partition is not this replica's (not assigned, or revoked).
    NotOwned,
}

/// Why a raise is in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RaiseFor {
    /// The last owner's gap-free commit at this offset (given back if the
    /// round fails).
    Metadata(i64),
    /// This owner's delivered prefix up to this offset.
    Prefix(i64),
}

impl Round {
    /// Records this round claims.
    pub(crate) fn claimed(&self) -> usize {
        self.claims.len()
    }
}

/// What a round's answer decided, for metrics and logs.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    pub(crate) replayed: Vec<usize>,
    pub(crate) released: Vec<usize>,
    /// Done flags refused: the claim carries another owner now.
    pub(crate) lost: usize,
    /// Records told to wait on another record's claim.
    pub(crate) held: u64,
    /// Per claim that took over an abandoned holder's (docs/design.md §4.9),
    /// its stream.
    pub(crate) taken_over: Vec<usize>,
}

/// How the flight settles what it delivered (docs/design.md §4.3, §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Settle {
    /// At least once: a delivered record is settled by its partition's
    /// raise, or a done flag where a hole lies below it.
    #[default]
    OnDelivery,
    /// Exactly once: deliveries wait for their transaction's commit, and
    /// tier-2 inserts go before it.
    WithTransaction,
}

#[derive(Default)]
pub(crate) struct Flight {
    partitions: HashMap<Tp, Partition>,
    /// Records that entered `Produce`, in order.
    queue: Vec<(Tp, i64)>,
    /// Records that entered `Claim`, in order (an entry whose record has
    /// moved on since is skipped).
    to_claim: VecDeque<(Tp, i64)>,
    /// Records that entered `Delivered`: their claims are to be settled.
    to_settle: Vec<(Tp, i64)>,
    /// Records in `Wait`.
    waits: Vec<(Tp, i64)>,
    /// Records in `Backoff`, with when they are due.
    backoffs: Vec<(Instant, Tp, i64)>,
    /// Records read and not finished, and their payload bytes.
    unfinished: usize,
    bytes: usize,
    /// Per poll batch with unfinished records, how many it still has.
    batches: HashMap<u64, usize>,
    /// The batch the next arrivals belong to.
    batch: u64,
    /// The earliest instant a waiting record claims again, as the last
    /// round left them.
    earliest_wait: Option<Instant>,
    /// Streams of records finished on arrival (decided before), until the
    /// loop counts them.
    replayed: Vec<usize>,
    /// Assignments so far.
    epoch: u64,
    /// How what is delivered gets settled: the guarantee, as the flight
    /// sees it.
    settle: Settle,
    /// Exactly once (docs/design.md §7): deliveries wait in `Produced`
    /// for their transaction, listed here.
    in_txn: Vec<(Tp, i64)>,
    /// The open transaction's number: outputs sent now are in it.
    open_txn: u64,
    /// The transaction sealed and committing, and its deliveries.
    sealed_txn: Option<u64>,
    sealed: Vec<(Tp, i64)>,
    /// Some partition has a re-emit range: the rounds' answers are read
    /// for them until none has.
    replaying: bool,
    /// Replays' starts and ends, until the loop logs them (`replay.rs`).
    replay_log: Vec<ReplayLog>,
    /// Partitions with a replay under way: while none has, a record's
    /// step costs no lookup of its partition (`replay_step`).
    open_replays: usize,
    /// Streams whose store lost its state (docs/design.md §8.2), and what
    /// their records do from then on (`lost.rs`).
    lost: HashMap<usize, Lost>,
    /// Records of streams that stopped deciding: never claimed again by
    /// this process (the store is rebuilt while no replica runs).
    parked: Vec<(Tp, i64)>,
}

impl Flight {
    /// An empty flight that settles as `settle` says.
    pub(crate) fn new(settle: Settle) -> Flight {
        Flight {
            settle,
            ..Flight::default()
        }
    }

    /// A partition assigned, and where it resumes.
    pub(crate) fn assign(&mut self, tp: Tp, stream: usize, from: Resume) {
        let tag = TopicTag::of(&tp.0);
        self.epoch += 1;
        let Resume {
            committed,
            metadata_raise,
            skip,
        } = from;
        self.partitions.entry(tp).or_insert(Partition {
            stream,
            tag,
            epoch: self.epoch,
            records: Default::default(),
            // From the committed offset where there is one: the first record
            // read may sit above it (a transaction marker, a compacted
            // record), and the range is this owner's all the same.
            range_start: committed,
            next_read: None,
            committed,
            watermark: None,
            replay: None,
            replaying: None,
            fresh: false,
            gap_free: true,
            raised: i64::MIN,
            metadata_raise,
            skip,
            committed_done: Vec::new(),
            txn_committed: None,
            unfinished: 0,
            delivered_scan: i64::MIN,
            finished_scan: i64::MIN,
            keep_commit: false,
        });
    }

    /// Forgets a partition (revoked): its unfinished claims are left to
    /// the next owner, who meets them as its own.
    pub(crate) fn revoke(&mut self, tp: &Tp) {
        if let Some(partition) = self.partitions.remove(tp) {
            if partition.replaying.is_some() {
                self.open_replays -= 1;
            }
            for record in partition.records.values().filter(|r| r.counted) {
                self.unfinished -= 1;
                self.bytes -= record.bytes;
                uncount(&mut self.batches, record.batch);
            }
        }
    }

    pub(crate) fn partitions(&self) -> impl Iterator<Item = (&Tp, &Partition)> {
        self.partitions.iter()
    }

    pub(crate) fn in_flight(&self) -> (usize, usize) {
        (self.unfinished, self.bytes)
    }

    /// Records read and not finished, less those delivered and waiting for
    /// their transaction's commit (exactly once): what the polling thread
    /// reads ahead of (`batch.read_ahead`). A record past its send is no
    /// longer ahead of the loop; counting the ones a commit holds would
    /// cap a replica at `read_ahead` batches per commit.
    pub(crate) fn ahead_of_the_loop(&self) -> usize {
        self.unfinished
            .saturating_sub(self.in_txn.len() + self.sealed.len())
    }

    /// Poll batches with records not finished yet.
    pub(crate) fn batches_in_flight(&self) -> usize {
        self.batches.len()
    }

    /// Streams of the records finished on arrival since the last call:
    /// decided before, produced nothing.
    pub(crate) fn take_replayed(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.replayed)
    }

    /// Whether a waiting record is due to claim again.
    pub(crate) fn wait_due(&self, now: Instant) -> bool {
        self.earliest_wait.is_some_and(|at| at <= now)
    }

    /// Records arriving from now on belong to a new poll batch.
    pub(crate) fn next_batch(&mut self) {
        self.batch += 1;
    }

    /// Records of one partition kept until their offset is committed.
    pub(crate) fn held_back(&self, tp: &Tp) -> usize {
        self.partitions.get(tp).map_or(0, |p| p.records.len())
    }

    pub(crate) fn record(&self, tp: &Tp, offset: i64) -> Option<&Record> {
        self.partitions.get(tp)?.records.get(&offset)
    }

    /// A record read from a partition this replica owns; one it does not
    /// own, or has seen, is not kept.
    pub(crate) fn arrive(
        &mut self,
        input: Input,
        stream: usize,
        print: Result<Fingerprint, Invalid>,
        at: Millis,
    ) -> Arrived {
        let tp = (input.topic.clone(), input.partition);
        let offset = input.offset;
        let Some(partition) = self.partitions.get_mut(&tp) else {
            return Arrived::NotOwned;
        };
        if partition.next_read.is_some_and(|n| offset < n) {
            return Arrived::ReadAgain;
        }
        let first = partition.range_start.is_none();
        partition.range_start.get_or_insert(offset);
        partition.committed.get_or_insert(offset);
        partition.next_read = Some(offset + 1);
        partition.unfinished += 1;
        let bytes = input.payload.as_ref().map_or(0, Vec::len);
        let mut record = Record {
            input,
            stream,
            print: Some(print),
            stage: Stage::Fresh,
            decision: None,
            claim: None,
            at,
            waiting_since: None,
            waiting_on: None,
            backoff: FIRST_BACKOFF,
            bytes,
            counted: true,
            claim_uncertain: false,
            already_out: false,
            txn: 0,
            batch: self.batch,
            epoch: partition.epoch,
            replay: false,
        };
        *self.batches.entry(self.batch).or_default() += 1;
        self.unfinished += 1;
        self.bytes += bytes;
        let skipped = partition
            .skip
            .iter()
            .any(|(from, to)| (*from..*to).contains(&offset));
        let settle_again = skipped
            && self.settle == Settle::WithTransaction
            && matches!(record.print, Some(Ok(_)));
        if skipped && !settle_again {
            // Delivered and settled by the last owner (its commit said so).
            record.stage = Stage::Finished;
        } else if partition.fresh {
            if first {
                // The range begins with this record and the watermark is
                // known: an owner starting above it (an offset skip)
                // settles by done flags.
                partition.gap_free = partition.watermark.is_none_or(|w| w >= offset);
            }
            entry_stage(&mut record, partition.watermark, partition.replay);
        }
        // Exactly once, the last owner's commit lists it as delivered: its
        // output is in a committed transaction, its claim may not be settled
        // yet (a crash between the commit and the done flags). Claimed again
        // to settle it: it meets its own claim and sets its done flag.
        record.already_out = settle_again;
        let stage = record.stage;
        partition.records.insert(offset, record);
        if first {
            self.replay_begins(&tp);
        } else {
            self.replay_read(&tp, offset);
        }
        if stage == Stage::Finished {
            self.replayed.push(stream);
        }
        self.entered(&tp, offset, stage);
        Arrived::Kept
    }

    /// Follows a record into the stage it just entered.
    fn entered(&mut self, tp: &Tp, offset: i64, stage: Stage) {
        self.replay_step(tp, offset, stage);
        match stage {
            Stage::Finished => self.finish_at(tp, offset),
            Stage::Produce if self.park_invalid(tp, offset) => {}
            Stage::Produce => self.queue.push((tp.clone(), offset)),
            Stage::Claim => self.to_claim.push_back((tp.clone(), offset)),
            Stage::Delivered => self.to_settle.push((tp.clone(), offset)),
            Stage::Wait { .. } => self.waits.push((tp.clone(), offset)),
            _ => {}
        }
    }

    /// Marks a record finished and frees its payload.
    fn finish_at(&mut self, tp: &Tp, offset: i64) {
        let Some(partition) = self.partitions.get_mut(tp) else {
            return;
        };
        if let Some(record) = partition.records.get_mut(&offset) {
            record.stage = Stage::Finished;
            record.waiting_since = None;
            // The payload and key go; the headers stay for the decision's
            // log line (its trace id).
            record.input.payload = None;
            record.input.key = None;
            if std::mem::take(&mut record.counted) {
                partition.unfinished -= 1;
                self.unfinished -= 1;
                self.bytes -= record.bytes;
                uncount(&mut self.batches, record.batch);
            }
        }
    }

    fn record_mut(&mut self, tp: &Tp, offset: i64) -> Option<&mut Record> {
        self.partitions.get_mut(tp)?.records.get_mut(&offset)
    }

    /// A record with its partition's topic tag (computed once, at the
    /// assignment, rather than per claim).
    fn record_and_tag(&mut self, tp: &Tp, offset: i64) -> Option<(&mut Record, TopicTag)> {
        let partition = self.partitions.get_mut(tp)?;
        let tag = partition.tag;
        Some((partition.records.get_mut(&offset)?, tag))
    }
}

impl Partition {
    /// The offset after this owner's contiguous run of delivered records:
    /// what a watermark raise may vouch for.
    fn delivered_end(&mut self) -> i64 {
        let first_open = self.records.range(self.delivered_scan..).find(|(_, r)| {
            !matches!(
                r.stage,
                Stage::Delivered | Stage::Settling | Stage::Finished
            )
        });
        let end = match first_open {
            Some((&offset, _)) => offset,
            None => self.next_read.unwrap_or(i64::MIN),
        };
        self.delivered_scan = self.delivered_scan.max(end);
        end
    }

    /// The offset after the contiguous run of finished records: what may
    /// be committed.
    fn finished_end(&mut self) -> Option<i64> {
        let first_open = self
            .records
            .range(self.finished_scan..)
            .find(|(_, r)| r.stage != Stage::Finished);
        let end = match first_open {
            Some((&offset, _)) => Some(offset),
            None => self.next_read,
        };
        if let Some(end) = end {
            self.finished_scan = self.finished_scan.max(end);
        }
        end
    }

    /// Records read and not finished.
    pub(crate) fn unfinished(&self) -> usize {
        self.unfinished
    }

    /// Records waiting on other records' claims.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = &Record> {
        self.records
            .values()
            .filter(|r| matches!(r.stage, Stage::Wait { .. }))
    }
}

fn uncount(batches: &mut HashMap<u64, usize>, batch: u64) {
    if let Some(left) = batches.get_mut(&batch) {
        *left -= 1;
        if *left == 0 {
            batches.remove(&batch);
        }
    }
}

/// Where a record goes once its partition's watermark is known: below it,
/// decided before (rule 2), unless it is in the re-emit range and has a
/// hash (then the store says whether it goes to clean again); otherwise
/// claimed, or straight to audit when it has no hash.
fn entry_stage(record: &mut Record, watermark: Option<i64>, replay: Option<(i64, i64)>) {
    let offset = record.input.offset;
    if watermark.is_some_and(|w| offset < w) {
        let in_replay = replay.is_some_and(|(from, to)| from <= offset && offset < to);
        record.stage = match &record.print {
            Some(Ok(_)) if in_replay => Stage::Claim,
            _ => Stage::Finished,
        };
        return;
    }
    record.stage = match &record.print {
        Some(Err(invalid)) => {
            record.decision = Some(Decision::Invalid(invalid.clone()));
            Stage::Produce
        }
        _ => Stage::Claim,
    };
}

/// The claim of a record with a hash (only those reach the Claim stage).
fn claim_of(
    record: &Record,
    topic: TopicTag,
    token: OwnerToken,
    early_inserts: bool,
) -> Option<Claim> {
    let Some(Ok(print)) = &record.print else {
        return None;
    };
    Some(Claim {
        stream: StreamId(record.stream),
        hash: print.hash,
        digest: print.digest,
        holder: Coordinates {
            topic,
            partition: record.input.partition,
            offset: record.input.offset,
        },
        token,
        at: record.at,
        early_inserts,
    })
}
