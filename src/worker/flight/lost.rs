//! Streams whose store lost its state (docs/design.md §8.2): a round found
//! their identity missing or changed beside its claims. From then on this
//! process claims nothing for them: a fail-closed stream stops deciding
//! (its records wait, nothing is committed past them, its partitions
//! pause), a fail-open one passes its records as `unverified`. Nothing
//! brings a stream back but a restart after `idemgate rebuild`.

use super::{round::pass_unchecked, Flight, Stage, Tp};

/// What a lost stream's records do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lost {
    /// Fail-closed: they stay undecided.
    Stop,
    /// Fail-open: they go to clean as `unverified`, without a claim.
    PassUnverified,
}

impl Flight {
    /// The store lost `stream`'s state. Returns `true` the first time.
    pub(crate) fn lose(&mut self, stream: usize, fail_open: bool) -> bool {
        let how = if fail_open {
            Lost::PassUnverified
        } else {
            Lost::Stop
        };
        self.lost.insert(stream, how).is_none()
    }

    /// The committed metadata of `tp` names a record of finished runs the
    /// store lost: nothing commits the partition again in this process
    /// (its stream stopped; a commit over the metadata would erase the
    /// name `rebuild` makes the record again under).
    pub(crate) fn keep_commit(&mut self, tp: &Tp) {
        if let Some(partition) = self.partitions.get_mut(tp) {
            partition.keep_commit = true;
        }
    }

    /// How a stream's records go on, if its store lost its state.
    pub(crate) fn lost(&self, stream: usize) -> Option<Lost> {
        self.lost.get(&stream).copied()
    }

    /// Partitions of streams that stopped deciding: paused, so their
    /// records do not fill the in-flight bounds that other streams share.
    pub(crate) fn stopped(&self) -> impl Iterator<Item = &Tp> {
        self.partitions
            .iter()
            .filter(|(_, p)| self.lost(p.stream) == Some(Lost::Stop))
            .map(|(tp, _)| tp)
    }

    /// An invalid record about to be produced whose stream stopped
    /// deciding: parked too. It needs no claim, but it may be one a lost
    /// record of finished runs listed (docs/design.md §7): sent again, it
    /// would reach audit twice. Returns whether it was parked.
    pub(super) fn park_invalid(&mut self, tp: &Tp, offset: i64) -> bool {
        let Some(record) = self.record(tp, offset) else {
            return false;
        };
        if self.lost(record.stream) != Some(Lost::Stop)
            || !matches!(record.decision, Some(crate::decision::Decision::Invalid(_)))
        {
            return false;
        }
        if let Some(record) = self.record_mut(tp, offset) {
            record.stage = Stage::Claim;
            record.decision = None;
        }
        self.parked.push((tp.clone(), offset));
        true
    }

    /// A record about to be claimed (ready, or due after a wait) whose
    /// stream's store lost its state: parked (fail-closed) or passed as
    /// `unverified` (fail-open) instead. Returns whether it was diverted.
    pub(super) fn divert(&mut self, tp: &Tp, offset: i64) -> bool {
        let Some(how) = self.record(tp, offset).and_then(|r| self.lost(r.stream)) else {
            return false;
        };
        let Some(record) = self.record_mut(tp, offset) else {
            return false;
        };
        // Exactly once, a record the last owner's committed transaction
        // holds is never sent again, not even `unverified`: parked.
        let how = if record.already_out { Lost::Stop } else { how };
        match how {
            Lost::Stop => {
                record.stage = Stage::Claim;
                self.parked.push((tp.clone(), offset));
                true
            }
            Lost::PassUnverified => {
                pass_unchecked(record);
                self.entered(tp, offset, Stage::Produce);
                true
            }
        }
    }
}
