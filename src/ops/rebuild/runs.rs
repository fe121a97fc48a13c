//! `idemgate rebuild`, the records of finished runs (docs/design.md §7):
//! where a partition's committed metadata names a record the store lacks
//! (or holds with another digest), the record is made again from the
//! outputs above the committed offset. Decided here, purely; the reads and
//! writes are `runs_run.rs`'s.
//!
//! Every output, clean or audit, carries its input's coordinates
//! (`idemgate-input`); read with read_committed, an output says its input
//! was decided and delivered, so the inputs above a committed offset that
//! have one are exactly the finished records a commit could name. Where
//! their runs have the digest the metadata names, the record is written
//! back under its own name. Where they do not (a run its writer never
//! listed: at least once, outputs delivered after its last commit), the
//! runs go into a new commit of the same offset: inline where they fit,
//! else in a record of the rebuild's own, written before that commit.

use std::collections::{BTreeSet, HashMap};

use crate::coordinates::TopicTag;
use crate::store::{OwnerToken, RunsName, StreamId};
use crate::worker::metadata::{self, Metadata, Runs, RunsRef};

use super::parse_input;
use crate::ops::group::Committed;

/// A partition whose committed metadata names a record of runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    pub committed: Committed,
    pub gap_free: bool,
    pub reference: RunsRef,
    /// The record's name in the store.
    pub name: RunsName,
    /// The progress marks the commit recorded, carried by a commit made
    /// again.
    pub marks: Vec<u64>,
}

/// The partitions of `committed` whose metadata names a record of runs.
pub fn named(stream: StreamId, key_id: &str, committed: &[Committed]) -> Vec<Named> {
    committed
        .iter()
        .filter_map(|c| {
            let parsed = metadata::parse(key_id, &c.metadata).ok().flatten()?;
            let Runs::Stored(reference) = parsed.runs else {
                return None;
            };
            Some(Named {
                committed: c.clone(),
                gap_free: parsed.gap_free,
                marks: parsed.marks.clone(),
                reference,
                name: RunsName {
                    stream,
                    topic: TopicTag::of(&c.topic),
                    partition: c.partition,
                    writer: OwnerToken(reference.writer),
                    sequence: reference.sequence,
                },
            })
        })
        .collect()
}

/// Whether the store's answer for a record is the one its commit names.
pub fn holds(reference: &RunsRef, content: Option<&[u8]>) -> bool {
    content.is_some_and(|c| metadata::digest(c) == reference.digest)
}

/// The inputs above each missing record's committed offset that have an
/// output, as the outputs are read.
pub struct Finished {
    /// Per input partition, its committed offset and the inputs seen.
    wanted: HashMap<(String, i32), (i64, BTreeSet<i64>)>,
    pub read: u64,
}

impl Finished {
    pub fn new(missing: &[Named]) -> Finished {
        Finished {
            wanted: missing
                .iter()
                .map(|m| {
                    let c = &m.committed;
                    ((c.topic.clone(), c.partition), (c.offset, BTreeSet::new()))
                })
                .collect(),
            read: 0,
        }
    }

    /// One output's `idemgate-input`, if it has one.
    pub fn add(&mut self, input: Option<&str>) {
        self.read += 1;
        let Some((topic, partition, offset)) = input.and_then(parse_input) else {
            return;
        };
        if let Some((from, seen)) = self.wanted.get_mut(&(topic.to_string(), partition)) {
            if offset >= *from {
                seen.insert(offset);
            }
        }
    }

    /// The runs `[from, to)` of a partition's inputs seen, ascending.
    pub fn runs(&self, topic: &str, partition: i32) -> Vec<(i64, i64)> {
        let mut runs: Vec<(i64, i64)> = Vec::new();
        let Some((_, seen)) = self.wanted.get(&(topic.to_string(), partition)) else {
            return runs;
        };
        for &offset in seen {
            match runs.last_mut() {
                Some(last) if last.1 == offset => last.1 = offset + 1,
                _ => runs.push((offset, offset + 1)),
            }
        }
        runs
    }
}

/// What the rebuild writes for one missing record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recreate {
    /// The outputs give the content the commit names: written back under
    /// its name, the commit left as it is.
    AsNamed { name: RunsName, content: Vec<u8> },
    /// The outputs give other runs: a new commit of the same offset with
    /// this metadata, after the record it names, if any, is written.
    Recommit {
        record: Option<(RunsName, Vec<u8>)>,
        metadata: String,
    },
}

/// The record of `missing` made again from `runs`; `writer` and `sequence`
/// name a record of the rebuild's own where one is needed.
pub fn recreate(
    key_id: &str,
    missing: &Named,
    runs: &[(i64, i64)],
    writer: OwnerToken,
    sequence: u64,
) -> Recreate {
    let content = metadata::runs_text(runs).into_bytes();
    let digest = metadata::digest(&content);
    if digest == missing.reference.digest {
        return Recreate::AsNamed {
            name: missing.name,
            content,
        };
    }
    if let Some(metadata) = metadata::inline(key_id, missing.gap_free, runs) {
        return Recreate::Recommit {
            record: None,
            metadata: metadata + &metadata::marks_word(&missing.marks),
        };
    }
    let name = RunsName {
        writer,
        sequence,
        ..missing.name
    };
    let metadata = metadata::encode(
        key_id,
        &Metadata {
            gap_free: missing.gap_free,
            runs: Runs::Stored(RunsRef {
                writer: writer.0,
                sequence,
                digest,
            }),
            marks: missing.marks.clone(),
        },
    );
    Recreate::Recommit {
        record: Some((name, content)),
        metadata,
    }
}

#[cfg(test)]
#[path = "runs_tests.rs"]
mod tests;
