//! A stream's store identity (docs/design.md §8.2): how a round tells a
//! store that still holds the stream's claims from one that came back
//! without them (a restart without persistence, a flush, a failover to an
//! empty replica, a cluster node that returned empty).
//!
//! The identity is 16 random bytes, written where the stream's claims live
//! at the stream's first start (on Redis beside each of the 64 hash tags,
//! so each cluster node holding claims holds it too) and by `idemgate
//! rebuild`. Every round compares what it reads beside the claims it makes
//! with the identity the replica adopted at start. The decisions here are
//! pure: what the store found goes in, a verdict comes out.

use std::collections::HashMap;
use std::fmt;

use sha2::{Digest, Sha256};

use super::{StreamId, StreamLost};

/// One stream's store identity, shown (and stored on Redis) as 32 hex
/// digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct StoreIdentity(pub [u8; 16]);

impl StoreIdentity {
    /// A new identity, unlike any other stream's or store's: SHA-256 over
    /// the process's random hasher seed, the time and the process id
    /// (uniqueness is all it needs, not secrecy).
    pub fn random() -> StoreIdentity {
        let seed = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            std::process::id(),
        );
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut hasher = Sha256::new();
        hasher.update(seed.to_be_bytes());
        hasher.update(nanos.to_be_bytes());
        hasher.update(std::process::id().to_be_bytes());
        let digest = hasher.finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        StoreIdentity(bytes)
    }

    /// The stored form: 32 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The identity a stored value holds; `None` for anything else.
    pub fn parse(stored: &[u8]) -> Option<StoreIdentity> {
        let bytes = hex::decode(stored).ok()?;
        Some(StoreIdentity(bytes.try_into().ok()?))
    }
}

impl fmt::Display for StoreIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for StoreIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreIdentity({self})")
    }
}

/// A stream's identity as found at every place the store keeps it (on
/// Redis each of the 64 hash tags; the memory store has one place), raw:
/// `None` where a place holds none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdentityFound {
    pub places: Vec<Option<Vec<u8>>>,
}

impl IdentityFound {
    /// Places holding no identity.
    pub fn missing(&self) -> usize {
        self.places.iter().filter(|p| p.is_none()).count()
    }
}

/// What a round read beside a stream's claims, against the identity the
/// replica adopted at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Every place read holds the adopted identity.
    Intact,
    /// Some place holds none: it lost what it held (restarted empty,
    /// flushed, failed over to an empty replica).
    Missing,
    /// Some place holds another identity: the stream's store was replaced
    /// or rebuilt under this replica.
    Changed,
    /// Some place holds the identity marked gone back ([`WENT_BACK`]): a
    /// replica found the place's progress mark below a mark a commit
    /// recorded (`store::marks`), so the store came back older.
    Behind,
}

/// What a place's identity is prefixed with once a replica found the
/// place's progress mark below its floor (docs/design.md §8.2): every
/// round of every replica reads it beside its claims, so one replica's
/// finding stops them all. `idemgate rebuild` writes the identity anew.
pub const WENT_BACK: &[u8] = b"back:";

impl Check {
    pub fn lost(self) -> bool {
        self != Check::Intact
    }
}

/// Judges what a round read: missing anywhere wins over gone back, gone
/// back over changed (the more common cause, and the one the log should
/// name).
pub fn check_identity<'a>(
    adopted: &StoreIdentity,
    read: impl IntoIterator<Item = Option<&'a [u8]>>,
) -> Check {
    let expected = adopted.to_hex();
    let mut verdict = Check::Intact;
    for value in read {
        match value {
            None => return Check::Missing,
            Some(value) if value.starts_with(WENT_BACK) => verdict = Check::Behind,
            Some(value) if value != expected.as_bytes() && verdict != Check::Behind => {
                verdict = Check::Changed
            }
            Some(_) => {}
        }
    }
    verdict
}

/// The streams whose identity, as found at every place the store keeps
/// it, is not the one adopted: what the timed check answers
/// (`ClaimStore::verify_identity`, docs/design.md §8.2). A stream never
/// adopted is not judged.
pub(crate) fn lost_among(
    adopted: &HashMap<usize, StoreIdentity>,
    found: impl IntoIterator<Item = (StreamId, IdentityFound)>,
) -> Vec<StreamLost> {
    found
        .into_iter()
        .filter_map(|(stream, found)| {
            let identity = adopted.get(&stream.0)?;
            let how = check_identity(identity, found.places.iter().map(Option::as_deref));
            how.lost().then_some(StreamLost { stream, how })
        })
        .collect()
}

/// What a replica does with a stream's identity at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AtStart {
    /// Every place holds this identity: the rounds compare with it.
    Adopt(StoreIdentity),
    /// No place holds one: a first start, or a store that lost everything.
    /// The group's committed offsets tell which ([`first_or_lost`]).
    FirstOrLost,
    /// The store lost part of its state, or holds two identities.
    Refuse(Refusal),
}

/// Why a stream is refused at start. Each says what happened to the
/// store; the caller names the stream and points to `idemgate rebuild`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the store holds no identity for it, yet the group has idemgate's commits for it: \
         the store lost the stream's claims (restarted without persistence, flushed, or \
         replaced by an empty server)"
    )]
    Lost,
    #[error(
        "{missing} of {places} places in the store lack the stream's identity: part of the \
         store (a cluster node, a replica promoted empty) lost its claims"
    )]
    Partial { missing: usize, places: usize },
    #[error(
        "the store holds {count} different identities for the stream: it was rebuilt or \
         replaced in part"
    )]
    Differing { count: usize },
    #[error(
        "the store came back older than what the group's commits recorded (its progress marks \
         lie below theirs): restored from an older snapshot or backup, or a lagging replica \
         promoted; the claims and watermarks written since are gone"
    )]
    WentBack,
}

/// Judges the identity found at start.
pub fn at_start(found: &IdentityFound) -> AtStart {
    if found
        .places
        .iter()
        .flatten()
        .any(|p| p.starts_with(WENT_BACK))
    {
        return AtStart::Refuse(Refusal::WentBack);
    }
    let missing = found.missing();
    if missing == found.places.len() {
        return AtStart::FirstOrLost;
    }
    if missing > 0 {
        return AtStart::Refuse(Refusal::Partial {
            missing,
            places: found.places.len(),
        });
    }
    let mut distinct: Vec<&[u8]> = found.places.iter().flatten().map(Vec::as_slice).collect();
    distinct.sort_unstable();
    distinct.dedup();
    match distinct.as_slice() {
        [one] => match StoreIdentity::parse(one) {
            Some(identity) => AtStart::Adopt(identity),
            None => AtStart::Refuse(Refusal::Differing { count: 1 }),
        },
        many => AtStart::Refuse(Refusal::Differing { count: many.len() }),
    }
}

/// No identity anywhere, or only in part of the places (`judged`): the
/// stream's first start on this store when its group has no idemgate
/// commits for it (write one; a part already there is another replica
/// starting at the same moment, midway through its own write, which
/// writes the first place first: the write completes the others with
/// what that place holds), a lost store when it has
/// (refused: what the commits cover is not in the store any more).
pub fn first_or_lost(judged: &AtStart, group_has_commits: bool) -> Result<(), Refusal> {
    match (judged, group_has_commits) {
        (_, false) => Ok(()),
        (AtStart::Refuse(why), true) => Err(why.clone()),
        (_, true) => Err(Refusal::Lost),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(byte: u8) -> StoreIdentity {
        StoreIdentity([byte; 16])
    }

    fn found(places: &[Option<StoreIdentity>]) -> IdentityFound {
        IdentityFound {
            places: places
                .iter()
                .map(|p| p.map(|i| i.to_hex().into_bytes()))
                .collect(),
        }
    }

    #[test]
    fn an_identity_reads_back_from_its_stored_form_and_nothing_else_does() {
        let a = StoreIdentity::random();
        assert_eq!(StoreIdentity::parse(a.to_hex().as_bytes()), Some(a));
        assert_eq!(a.to_hex().len(), 32);
        assert_ne!(a, StoreIdentity::random(), "two identities alike");
        assert_eq!(StoreIdentity::parse(b"not hex at all"), None);
        assert_eq!(StoreIdentity::parse(b"abcd"), None, "too short");
    }

    #[test]
    fn a_round_is_intact_only_where_every_place_read_holds_the_adopted_identity() {
        let a = id(1).to_hex().into_bytes();
        let b = id(2).to_hex().into_bytes();
        let read = |values: &[Option<&Vec<u8>>]| {
            check_identity(&id(1), values.iter().map(|v| v.map(Vec::as_slice)))
        };
        assert_eq!(read(&[Some(&a), Some(&a)]), Check::Intact);
        assert_eq!(read(&[]), Check::Intact, "a round without claims");
        assert_eq!(read(&[Some(&a), None]), Check::Missing);
        assert_eq!(read(&[Some(&b), Some(&a)]), Check::Changed);
        assert_eq!(
            read(&[Some(&b), None]),
            Check::Missing,
            "missing is named first"
        );
        assert!(Check::Changed.lost() && Check::Missing.lost() && !Check::Intact.lost());
        let back = [WENT_BACK, &a].concat();
        assert_eq!(read(&[Some(&b), Some(&back)]), Check::Behind);
        assert_eq!(read(&[Some(&back), Some(&b)]), Check::Behind);
        assert_eq!(read(&[Some(&back), None]), Check::Missing);
        assert_eq!(
            at_start(&IdentityFound {
                places: vec![Some(a.clone()), Some(back)]
            }),
            AtStart::Refuse(Refusal::WentBack)
        );
    }

    #[test]
    fn the_timed_check_names_each_adopted_stream_missing_or_changed_at_any_place() {
        let adopted = HashMap::from([(0, id(1)), (1, id(2)), (2, id(3))]);
        let lost = lost_among(
            &adopted,
            [
                (StreamId(0), found(&[Some(id(1)), Some(id(1))])),
                (StreamId(1), found(&[Some(id(2)), None])),
                (StreamId(2), found(&[Some(id(4)), Some(id(3))])),
                (StreamId(3), found(&[None, None])),
            ],
        );
        assert_eq!(
            lost,
            [
                StreamLost {
                    stream: StreamId(1),
                    how: Check::Missing
                },
                StreamLost {
                    stream: StreamId(2),
                    how: Check::Changed
                },
            ],
            "stream 0 intact, stream 3 never adopted"
        );
    }

    #[test]
    fn at_start_one_identity_everywhere_is_adopted() {
        assert_eq!(
            at_start(&found(&[Some(id(3)), Some(id(3))])),
            AtStart::Adopt(id(3))
        );
    }

    #[test]
    fn at_start_none_anywhere_is_a_first_start_without_commits_and_a_loss_with_them() {
        assert_eq!(at_start(&found(&[None, None])), AtStart::FirstOrLost);
        assert_eq!(first_or_lost(&AtStart::FirstOrLost, false), Ok(()));
        assert_eq!(
            first_or_lost(&AtStart::FirstOrLost, true),
            Err(Refusal::Lost)
        );
    }

    #[test]
    fn a_partial_identity_is_a_replica_writing_its_first_start_without_commits_and_a_loss_with_them(
    ) {
        let judged = at_start(&found(&[Some(id(3)), None, None]));
        assert_eq!(first_or_lost(&judged, false), Ok(()));
        assert_eq!(
            first_or_lost(&judged, true),
            Err(Refusal::Partial {
                missing: 2,
                places: 3
            })
        );
    }

    #[test]
    fn at_start_a_store_that_lost_part_of_its_state_or_holds_two_identities_is_refused() {
        assert_eq!(
            at_start(&found(&[Some(id(3)), None, Some(id(3))])),
            AtStart::Refuse(Refusal::Partial {
                missing: 1,
                places: 3
            })
        );
        assert_eq!(
            at_start(&found(&[Some(id(3)), Some(id(4))])),
            AtStart::Refuse(Refusal::Differing { count: 2 })
        );
        let garbage = IdentityFound {
            places: vec![Some(b"x".to_vec())],
        };
        assert_eq!(
            at_start(&garbage),
            AtStart::Refuse(Refusal::Differing { count: 1 })
        );
    }
}
