//! Exactly once (docs/design.md §7): what the open transaction holds, what
//! its offsets say, and what its commit lets settle.
//!
//! A delivery inside the transaction waits in `Produced`: no watermark
//! raise covers it and no done flag is sent for it until the transaction
//! commits, so a crash (an abort) leaves its claim unsettled and the replay
//! produces it again. Tier-2 inserts go before the commit. The offsets sent
//! with the transaction are each partition's delivered prefix, and the
//! metadata lists the delivered ranges above it (and the last owner's,
//! until the prefix passes them): a new owner settles those and sends
//! nothing for them.

use super::deliver::{carried_forward, Commit};
use super::Record;
use super::{Flight, Stage, Tp};
use crate::clock::Millis;
use crate::store::{EarlyRun, Insert, StreamId};

/// The open transaction's tier-2 inserts, and the runs of offsets they
/// speak for: the runs go to the store first, acknowledged, then the
/// inserts, then the commit.
#[derive(Debug, Default)]
pub(crate) struct EarlyInserts {
    pub(crate) runs: Vec<EarlyRun>,
    pub(crate) inserts: Vec<Insert>,
}

/// What a record of the partition means to a run of early inserts.
enum InRun {
    /// Its hash goes in with this transaction.
    Inserted,
    /// Never claimed by any owner: it has no hash (invalid), or lies
    /// below the watermark (a re-emission; the watermark only goes up).
    /// A run may span it.
    Spanned,
    /// Anything else ends the run. A filter duplicate holds its own claim
    /// and its hit is another record's; so may a record decided without a
    /// claim here (a duplicate naming its holder, a conflict, one passed
    /// unverified) at a later owner, once the holder's key has expired:
    /// the runs of every owner are read together.
    Ends,
}

fn in_run(record: &Record, open: u64) -> InRun {
    let in_open = record.txn == open && matches!(record.stage, Stage::Sending | Stage::Produced);
    match &record.claim {
        Some(owned) if in_open && owned.insert.is_some() => InRun::Inserted,
        None if record.replay || matches!(record.print, Some(Err(_))) => InRun::Spanned,
        _ => InRun::Ends,
    }
}

impl Flight {
    /// The tier-2 inserts of the open transaction's outputs (delivered,
    /// or still awaiting their reports: the commit waits for those), taken,
    /// with the runs of offsets they speak for: they go to the store before
    /// the transaction commits, and an abort leaves them. The partition's
    /// next owner then meets these records' own unsettled claims beside a
    /// filter hit that may be their own hash, and the runs tell it so; a
    /// hit beside a record outside them (a filter duplicate) is another
    /// record's (docs/design.md §4.4 rule 5).
    pub(crate) fn take_txn_inserts(&mut self) -> EarlyInserts {
        let mut out = EarlyInserts::default();
        let open = self.open_txn;
        for (tp, partition) in &mut self.partitions {
            let stream = StreamId(partition.stream);
            let (topic, below) = (partition.tag, partition.watermark);
            let run_of = |(start, end, at): (i64, i64, Millis)| EarlyRun {
                stream,
                topic,
                partition: tp.1,
                start,
                end,
                below,
                at,
            };
            // The open run: its first offset, the end of its last inserted
            // record, and the latest of their times.
            let mut run: Option<(i64, i64, Millis)> = None;
            let mut runs = Vec::new();
            for (&offset, record) in partition.records.iter_mut() {
                match in_run(record, open) {
                    InRun::Inserted => {
                        let Some(owned) = record.claim.as_mut() else {
                            continue;
                        };
                        let Some(at) = owned.insert.take() else {
                            continue;
                        };
                        out.inserts.push(Insert {
                            stream,
                            hash: owned.held.hash,
                            at,
                        });
                        run = Some(match run {
                            Some((start, _, last)) => (start, offset + 1, last.max(at)),
                            None => (offset, offset + 1, at),
                        });
                    }
                    InRun::Spanned => {}
                    InRun::Ends => runs.extend(run.take()),
                }
            }
            runs.extend(run);
            out.runs.extend(runs.into_iter().map(run_of));
        }
        out
    }

    /// How many outputs of claimed records the open transaction holds
    /// (delivered or awaiting their reports): claims its commit leaves to
    /// settle.
    pub(crate) fn open_txn_claims(&self) -> usize {
        let open = self.open_txn;
        self.partitions
            .values()
            .flat_map(|p| p.records.values())
            .filter(|r| {
                r.txn == open
                    && r.claim.is_some()
                    && matches!(r.stage, Stage::Sending | Stage::Produced)
            })
            .count()
    }

    /// Per partition, the offsets the transaction commits: the delivered
    /// prefix (outputs in this or an earlier transaction, or none due),
    /// and the delivered ranges above it: only where they moved since the
    /// last transaction, unless `all` (a transaction with outputs sends
    /// offsets, so the broker checks the group generation and fences a
    /// zombie).
    pub(crate) fn txn_offsets(&mut self, all: bool) -> Vec<Commit> {
        let mut out = Vec::new();
        for (tp, p) in &mut self.partitions {
            if p.keep_commit {
                continue;
            }
            let Some(start) = p.committed.or(p.range_start) else {
                continue;
            };
            // An output still awaiting its report is in the transaction
            // being sealed: its commit waits for every report, and fails
            // if one failed.
            let open = self.open_txn;
            let delivered = |r: &super::Record| {
                r.already_out
                    || matches!(
                        r.stage,
                        Stage::Produced | Stage::Delivered | Stage::Settling | Stage::Finished
                    )
                    || (r.stage == Stage::Sending && r.txn == open)
            };
            let mut end = None;
            let mut ranges: Vec<(i64, i64)> = Vec::new();
            let mut open = false;
            for (&offset, record) in p.records.range(start..) {
                let out_already = delivered(record);
                if end.is_none() {
                    if !out_already {
                        end = Some(offset);
                    }
                    continue;
                }
                match (out_already, open, ranges.last_mut()) {
                    (true, true, Some(last)) => last.1 = offset + 1,
                    (true, _, _) => ranges.push((offset, offset + 1)),
                    (false, _, _) => {}
                }
                open = out_already;
            }
            // Everything read is delivered: the prefix runs to the next
            // record to read.
            let end = end.unwrap_or_else(|| p.next_read.unwrap_or(start).max(start));
            // The last owner's delivered ranges not yet passed, carried
            // forward: they were not read yet, or are being settled again.
            let ranges = carried_forward(ranges, &p.skip, end);
            let now = (end, ranges);
            if !all && p.txn_committed.as_ref() == Some(&now) {
                continue;
            }
            out.push(Commit {
                tp: tp.clone(),
                offset: now.0,
                gap_free: p.gap_free,
                done: now.1.clone(),
            });
            p.txn_committed = Some(now);
        }
        out
    }

    /// The open transaction is sealed (its offsets taken): deliveries
    /// from now on are the next one's.
    pub(crate) fn seal_txn(&mut self) {
        let delivered = std::mem::take(&mut self.in_txn);
        self.sealed.extend(delivered);
        self.sealed_txn = Some(self.open_txn);
        self.open_txn += 1;
    }

    /// The sealed transaction committed: its deliveries settle (done
    /// flags, the watermark raise) in the rounds that follow.
    pub(crate) fn txn_committed(&mut self) {
        self.sealed_txn = None;
        for (tp, offset) in std::mem::take(&mut self.sealed) {
            let Some(record) = self.record_mut(&tp, offset) else {
                continue;
            };
            if record.stage != Stage::Produced {
                continue;
            }
            if record.claim.is_some() {
                record.stage = Stage::Delivered;
                self.to_settle.push((tp, offset));
            } else {
                self.finish_at(&tp, offset);
            }
        }
    }

    /// Whether every record read is finished, or waits on a holder in a
    /// partition this replica does not own (which may take any time): what
    /// a handover drains to.
    pub(crate) fn drained(&self) -> bool {
        let owned = |holder: &crate::coordinates::Coordinates, stream: usize| {
            self.partitions.iter().any(|(tp, p)| {
                p.stream == stream && p.tag == holder.topic && tp.1 == holder.partition
            })
        };
        self.partitions.values().all(|p| {
            p.records.values().all(|r| match (r.stage, &r.waiting_on) {
                (Stage::Finished, _) => true,
                (Stage::Wait { .. }, Some(holder)) => !owned(holder, r.stream),
                _ => false,
            })
        })
    }

    /// The open transaction was aborted: its deliveries are sent again in
    /// the next one (their claims are still this owner's, unsettled).
    /// How many.
    pub(crate) fn txn_aborted(&mut self) -> usize {
        self.open_txn += 1;
        let aborted = std::mem::take(&mut self.in_txn);
        self.send_again(aborted)
    }

    /// The sealed transaction's commit failed and it was aborted: its
    /// deliveries are sent again in the next one, and the offsets it
    /// carried too. How many.
    pub(crate) fn sealed_aborted(&mut self) -> usize {
        self.sealed_txn = None;
        self.txn_offsets_lost();
        let aborted = std::mem::take(&mut self.sealed);
        self.send_again(aborted)
    }

    fn send_again(&mut self, aborted: Vec<(Tp, i64)>) -> usize {
        let mut again = 0;
        for (tp, offset) in aborted {
            let Some(record) = self.record_mut(&tp, offset) else {
                continue;
            };
            if record.stage == Stage::Produced {
                record.stage = Stage::Produce;
                self.queue.push((tp, offset));
                again += 1;
            }
        }
        again
    }

    /// The sealed transaction's offsets did not commit: the next one sends
    /// them again.
    pub(crate) fn txn_offsets_lost(&mut self) {
        for p in self.partitions.values_mut() {
            p.txn_committed = None;
        }
    }
}
