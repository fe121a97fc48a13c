//! Progress marks (docs/design.md §8.2): how a store that came back older
//! (restarted from an RDB snapshot taken before its last writes, restored
//! from a backup, a lagging replica promoted) is told from a live one. It
//! keeps its identity, so the identity alone cannot tell.
//!
//! Each stream keeps a counter per place (on Redis each of the 64 hash
//! tags, beside the place's identity, without expiry) that only grows.
//! Before each commit a replica bumps every place's mark: the bump is
//! acknowledged after every claim the commit relies on (their records are
//! decided), on the same node, so a store holding a mark at least as high
//! as the one the commit records holds those claims. The commit records
//! the marks its bump answered (`m=` in its metadata, `worker::metadata`).
//!
//! Each replica keeps a floor per place: the highest mark it has seen,
//! from its own bumps and from the group's committed metadata (at start,
//! on the identity-check timer, at assignment). A store whose mark lies below a floor lost writes. The
//! comparison is the store's, atomic with the bump: a bump below the floor
//! is refused, so writers that never saw the floor cannot grow the counter
//! back past what was lost, and the refusing replica marks the place's
//! identity gone back (`identity::WENT_BACK`), so every replica's next
//! round stops too. Every round also reads the marks of the places it
//! claims in, against the floors taken when it was planned. Raising a
//! floor, and any trip that failed (a reconnect, perhaps to another
//! server), make the next round check every place first.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a bump or a check of a stream's marks answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Marked {
    /// The store keeps no marks (the memory store, which dies with its
    /// replica): the commit records none.
    Unkept,
    /// Every place's mark, in place order, at or above the floor.
    At(Vec<u64>),
    /// Some place's mark lies below the floor: the store came back older.
    /// The place's identity is marked gone back.
    Behind,
}

/// One replica's floors, per stream and place, and whether the marks must
/// be checked before the next round.
pub(crate) struct Floors {
    streams: Vec<Vec<AtomicU64>>,
    recheck: AtomicBool,
}

impl Floors {
    pub(crate) fn new(streams: usize, places: usize) -> Floors {
        Floors {
            streams: (0..streams)
                .map(|_| (0..places).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            // A replica's first round follows its start's check.
            recheck: AtomicBool::new(false),
        }
    }

    /// The floors of `stream`, in place order (empty for a stream not
    /// known).
    pub(crate) fn of(&self, stream: usize) -> Vec<u64> {
        self.streams.get(stream).map_or_else(Vec::new, |places| {
            places.iter().map(|f| f.load(Ordering::SeqCst)).collect()
        })
    }

    /// Raises the floors of `stream` to `marks` where they lie below;
    /// whether any rose. Marks beyond the places known are ignored.
    pub(crate) fn raise(&self, stream: usize, marks: &[u64]) -> bool {
        let Some(places) = self.streams.get(stream) else {
            return false;
        };
        let mut rose = false;
        for (floor, &mark) in places.iter().zip(marks) {
            rose |= floor.fetch_max(mark, Ordering::SeqCst) < mark;
        }
        rose
    }

    /// The next round checks the marks first.
    pub(crate) fn ask_recheck(&self) {
        self.recheck.store(true, Ordering::SeqCst);
    }

    /// Whether the next round checks the marks first (the ask is taken).
    pub(crate) fn take_recheck(&self) -> bool {
        self.recheck.swap(false, Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_only_rise_and_say_when_they_did() {
        let floors = Floors::new(2, 3);
        assert!(floors.raise(1, &[4, 0, 7]));
        assert!(!floors.raise(1, &[3, 0, 7]), "nothing higher");
        assert!(floors.raise(1, &[3, 1, 2]));
        assert_eq!(floors.of(1), vec![4, 1, 7]);
        assert_eq!(floors.of(0), vec![0, 0, 0]);
        assert!(!floors.raise(5, &[9]), "a stream not known");
        assert!(floors.of(5).is_empty());
        assert!(!floors.raise(0, &[0, 0, 0, 9]), "a place not known");
    }

    #[test]
    fn a_recheck_asked_is_taken_once() {
        let floors = Floors::new(1, 1);
        assert!(!floors.take_recheck());
        floors.ask_recheck();
        assert!(floors.take_recheck());
        assert!(!floors.take_recheck());
    }
}
