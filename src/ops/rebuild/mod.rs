//! `idemgate rebuild`: a stream's store written back after it lost its
//! state (docs/design.md §8.3), from what the clean topic and the group's
//! commits say. Decided here, purely: what each clean output restores (a
//! settled tier-1 claim, a tier-2 insert, or nothing, and why), which
//! watermarks the committed offsets vouch for, and the report.
//! `run.rs` reads the topic and the group and writes the store.
//!
//! Every clean output carries its input's coordinates (`idemgate-input`)
//! and its source hash (`idemgate-source-hash`); only `novel` ones held a
//! claim. The payload digest a conflict check needs is not on the output:
//! it is computed again from the output's payload and headers (the input's,
//! byte for byte) with the stream's profile, and the hash computed with it
//! must be the one the header names, or the profile changed since and the
//! output restores nothing.

pub mod run;
mod runs;
mod runs_run;
mod start;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use crate::clock::Millis;
use crate::config::StreamConfig;
use crate::coordinates::{Coordinates, TopicTag};
use crate::decision::{DECIDED_AT, DECISION, INPUT, SOURCE_HASH};
use crate::fingerprint::{fingerprint, RecordView, SourceHash};
use crate::store::{millis, Insert, Raise, Restored, StreamId};
use crate::worker::metadata;

use crate::ops::group::Committed;

/// A clean output as read back.
pub struct CleanOutput<'a> {
    /// Its timestamp: the input's, which the output keeps (it dates the
    /// claim only where the output has no `idemgate-decided-at`: one
    /// written before that header was).
    pub timestamp: Option<Millis>,
    pub headers: &'a [(String, Option<Vec<u8>>)],
    /// Its key: the input's, which a clean output keeps (the
    /// `record-key` profile hashes it).
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
}

/// Why a clean output restores nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    /// Not `novel`: `unverified` held no claim, and a shadow stream's
    /// other decisions did not either.
    NotNovel,
    /// Its input is no input of this stream (a clean topic shared with
    /// another stream).
    OtherStream,
    /// No readable `idemgate-input` or `idemgate-source-hash`.
    Unreadable,
    /// No decision time and no timestamp: its claim's expiry is unknown.
    NoTimestamp,
    /// The stream's profile no longer gives the hash it carries.
    ProfileChanged,
    /// Its claim would have expired, and its filter generation too.
    Expired,
}

impl Skip {
    fn label(self) -> &'static str {
        match self {
            Skip::NotNovel => "not novel",
            Skip::OtherStream => "another stream's input",
            Skip::Unreadable => "no readable idemgate-input or idemgate-source-hash",
            Skip::NoTimestamp => "no timestamp",
            Skip::ProfileChanged => "the profile gives another hash now",
            Skip::Expired => "expired",
        }
    }
}

/// What the clean outputs read so far restore.
pub struct Rebuild<'a> {
    stream: StreamId,
    config: &'a StreamConfig,
    inputs: HashMap<&'a str, TopicTag>,
    now: Millis,
    /// Per hash, the claim of its latest clean output (the one whose claim
    /// lives longest).
    claims: HashMap<SourceHash, Restored>,
    /// Per hash, the latest time it goes into tier 2 (tiered streams).
    inserts: HashMap<SourceHash, Millis>,
    pub read: u64,
    pub skipped: BTreeMap<Skip, u64>,
}

impl<'a> Rebuild<'a> {
    pub fn new(stream: StreamId, config: &'a StreamConfig, now: Millis) -> Rebuild<'a> {
        Rebuild {
            stream,
            config,
            inputs: config
                .inputs
                .iter()
                .map(|t| (t.as_str(), TopicTag::of(t)))
                .collect(),
            now,
            claims: HashMap::new(),
            inserts: HashMap::new(),
            read: 0,
            skipped: BTreeMap::new(),
        }
    }

    /// Where reading the clean topic starts: the oldest output whose claim
    /// or filter generation can still be live.
    pub fn window_start(&self) -> Millis {
        let spec = &self.config.spec;
        let longest = spec.filter.as_ref().map_or(spec.tier1_ttl, |plan| {
            spec.tier1_ttl.max(plan.horizon * (plan.slots + 1))
        });
        self.now.saturating_sub(millis(longest))
    }

    /// The decision time from which `start` searches the clean
    /// topic: a window before the window's start, for outputs written up
    /// to a window after they were decided.
    pub fn decided_since(&self) -> Millis {
        let start = self.window_start();
        start.saturating_sub(self.now - start)
    }

    /// One clean output.
    pub fn add(&mut self, output: &CleanOutput<'_>) {
        self.read += 1;
        if let Err(skip) = self.restore(output) {
            *self.skipped.entry(skip).or_default() += 1;
        }
    }

    fn restore(&mut self, output: &CleanOutput<'_>) -> Result<(), Skip> {
        let header = |name: &str| {
            output
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| std::str::from_utf8(v.as_deref()?).ok())
        };
        if header(DECISION) != Some("novel") {
            return Err(Skip::NotNovel);
        }
        let (topic, partition, offset) = header(INPUT)
            .and_then(parse_input)
            .ok_or(Skip::Unreadable)?;
        let hash = header(SOURCE_HASH)
            .and_then(|h| hex::decode(h).ok())
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .map(SourceHash)
            .ok_or(Skip::Unreadable)?;
        let tag = *self.inputs.get(topic).ok_or(Skip::OtherStream)?;
        // Its claim was made when it was decided, whatever its input's
        // timestamp says.
        let at = header(DECIDED_AT)
            .and_then(|at| at.parse::<Millis>().ok())
            .or(output.timestamp)
            .ok_or(Skip::NoTimestamp)?;
        let headers: Vec<(&str, Option<&[u8]>)> = output
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_deref()))
            .collect();
        let record = RecordView {
            key: output.key,
            payload: output.payload,
            headers: &headers,
        };
        let print = fingerprint(&self.config.profile, self.config.max_record_bytes, &record)
            .map_err(|_| Skip::ProfileChanged)?;
        if print.hash != hash {
            return Err(Skip::ProfileChanged);
        }
        let spec = &self.config.spec;
        let expires_at = at.saturating_add(millis(spec.tier1_ttl));
        let in_tier1 = expires_at > self.now;
        let in_tier2 = spec
            .filter
            .as_ref()
            .is_some_and(|plan| plan.expires_at(plan.epoch(at)) > self.now);
        if !in_tier1 && !in_tier2 {
            return Err(Skip::Expired);
        }
        if in_tier1 {
            let restored = Restored {
                stream: self.stream,
                hash,
                digest: print.digest,
                holder: Coordinates {
                    topic: tag,
                    partition,
                    offset,
                },
                at,
                expires_at,
            };
            let kept = self.claims.entry(hash).or_insert(restored);
            if restored.expires_at > kept.expires_at {
                *kept = restored;
            }
        }
        if in_tier2 {
            let latest = self.inserts.entry(hash).or_insert(at);
            *latest = (*latest).max(at);
        }
        Ok(())
    }

    /// The settled claims to write back.
    pub fn claims(&self) -> Vec<Restored> {
        self.claims.values().copied().collect()
    }

    /// The tier-2 inserts (tiered streams), at each hash's latest time.
    pub fn inserts(&self) -> Vec<Insert> {
        self.inserts
            .iter()
            .map(|(hash, at)| Insert {
                stream: self.stream,
                hash: *hash,
                at: *at,
            })
            .collect()
    }
}

/// `topic/partition/offset` (topic names hold no `/`).
fn parse_input(text: &str) -> Option<(&str, i32, i64)> {
    let mut parts = text.rsplitn(3, '/');
    let offset = parts.next()?.parse().ok()?;
    let partition = parts.next()?.parse().ok()?;
    let topic = parts.next().filter(|t| !t.is_empty())?;
    Some((topic, partition, offset))
}

/// What a partition's committed offset does for its watermark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatermarkFrom {
    pub committed: Committed,
    /// A raise from 0 to the committed offset, where idemgate's metadata
    /// says every record below it was decided and delivered (`gap-free`);
    /// none where it does not (a skip left records below it that were
    /// never read) or where the commit is not idemgate's.
    pub raise: Option<Raise>,
}

/// The watermarks the group's committed offsets vouch for, per partition
/// of the stream's inputs that has a commit.
pub fn watermarks(stream: StreamId, key_id: &str, committed: &[Committed]) -> Vec<WatermarkFrom> {
    committed
        .iter()
        .map(|c| WatermarkFrom {
            committed: c.clone(),
            raise: metadata::parse(key_id, &c.metadata)
                .ok()
                .flatten()
                .filter(|m| m.gap_free)
                .map(|_| Raise {
                    stream,
                    topic: TopicTag::of(&c.topic),
                    partition: c.partition,
                    start: 0,
                    end: c.offset,
                }),
        })
        .collect()
}

/// What the rebuild read and wrote, as the command prints it.
pub fn report(
    rebuild: &Rebuild<'_>,
    clean: &str,
    watermarks: &[WatermarkFrom],
    identity: &str,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "read {} outputs of {clean} from {} on",
        rebuild.read,
        rfc3339(rebuild.window_start())
    );
    let _ = writeln!(
        out,
        "wrote {} settled tier-1 claim(s) (holder = the output's input, done, expiring at its decision time + tier1_ttl)",
        rebuild.claims.len()
    );
    if rebuild.config.spec.filter.is_some() {
        let _ = writeln!(out, "wrote {} tier-2 insert(s)", rebuild.inserts.len());
    }
    for (skip, count) in &rebuild.skipped {
        let _ = writeln!(out, "  skipped {count} output(s): {}", skip.label());
    }
    for w in watermarks {
        let c = &w.committed;
        match &w.raise {
            Some(raise) => {
                let _ = writeln!(
                    out,
                    "{}/{}: committed {} (gap-free): watermark raised to {}",
                    c.topic, c.partition, c.offset, raise.end
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "{}/{}: committed {} without idemgate's gap-free metadata: no watermark (its records settle by their claims' done flags)",
                    c.topic, c.partition, c.offset
                );
            }
        }
    }
    let _ = writeln!(out, "store identity {identity} written");
    out
}

fn rfc3339(ms: Millis) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests;
