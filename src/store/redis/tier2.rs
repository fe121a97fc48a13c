//! Tier 2 on Redis: rotating Bloom generations, on RedisBloom where the
//! server has it, on plain bitmaps anywhere (docs/design.md §5).
//!
//! Keys, per stream (its key id) and epoch (see `generations.rs` for the
//! epoch rules):
//! - RedisBloom: `<prefix><key_id>:f:<epoch>`, created by `BF.INSERT ...
//!   NONSCALING` with the planned capacity and error rate. A full
//!   generation refuses new items (`non scaling filter is full`); those go
//!   to its overflow part `<prefix><key_id>:f:<epoch>:x`, a scaling filter
//!   with the same expiry, which every probe checks too (`BF.MEXISTS` on a
//!   missing key answers zeros). An insert is never dropped.
//! - bitmaps: `<prefix><key_id>:b:<epoch>:<shard>`, one `BITFIELD` per shard
//!   per round (`SET u1`), `BITFIELD_RO GET u1` to probe. A bitmap never
//!   refuses an insert: past capacity it only answers more false
//!   positives, which the insert counter against capacity shows.
//! - inserts counted in `<prefix><key_id>:n:<epoch>`, read against capacity.
//!
//! Every generation key gets its expiry (`PEXPIRE ... NX`: the first writer
//! fixes it) in the same pipeline that creates it.
//!
//! A RedisBloom probe checks a generation's overflow part only where it may
//! exist. Every round asks (`EXISTS`, after its probes) whether the overflow
//! part of each generation it probes exists; a replica's next rounds leave
//! out the parts the last answer found absent, and a round that left one
//! out which exists now probes it before it answers (`Want::Overflow`). An
//! item the round could still miss went into an overflow part after the
//! round was sent: its record's claim, made before that insert, is live,
//! and answers for it in tier 1 (docs/design.md §5).

use std::collections::{BTreeMap, HashSet};

use redis::{RedisResult, Value};

use super::conn::{reply_error, server_error, Keyed};
use crate::clock::Millis;
use crate::fingerprint::SourceHash;
use crate::store::{GenerationPlan, StoreError};

/// Which data structure holds the generations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterBackend {
    RedisBloom,
    Bitmap,
}

/// One hash to probe or insert, with where it came from in the round.
pub(crate) struct Item<'a> {
    pub(crate) index: usize,
    /// The stream's index, for the memory of full generations.
    pub(crate) stream: usize,
    pub(crate) key_id: &'a str,
    pub(crate) plan: &'a GenerationPlan,
    pub(crate) hash: &'a SourceHash,
    pub(crate) at: Millis,
}

/// A RedisBloom generation known to be full, by (stream index, epoch):
/// its inserts go straight to the overflow part.
pub(crate) type Full = HashSet<(usize, i64)>;

/// RedisBloom generations whose overflow part a round found absent, by
/// (stream index, epoch): their probes leave it out.
pub(crate) type Clear = HashSet<(usize, i64)>;

/// Which parts of the live generations a probe checks.
pub(crate) enum Want<'a> {
    /// Every live generation, with its overflow part on RedisBloom where it
    /// is not known [`Clear`].
    Round(&'a Clear),
    /// Only the overflow parts of these generations: a round's follow-up.
    Overflow(&'a HashSet<(usize, i64)>),
}

impl Want<'_> {
    fn part(&self, generation: (usize, i64), part: Part) -> bool {
        match (self, part) {
            (Want::Round(clear), Part::Overflow) => !clear.contains(&generation),
            (Want::Round(_), _) => true,
            (Want::Overflow(these), Part::Overflow) => these.contains(&generation),
            (Want::Overflow(_), _) => false,
        }
    }
}

/// `EXISTS` of the overflow part of every RedisBloom generation the items'
/// probes check, each once, in (stream, epoch) order.
pub(crate) fn overflow_reads(
    backend: FilterBackend,
    prefix: &str,
    items: &[Item<'_>],
) -> (Vec<Keyed>, Vec<(usize, i64)>) {
    if backend != FilterBackend::RedisBloom {
        return (Vec::new(), Vec::new());
    }
    let mut generations: BTreeMap<(usize, i64), &str> = BTreeMap::new();
    for item in items {
        for epoch in item.plan.read_epochs(item.at) {
            generations
                .entry((item.stream, epoch))
                .or_insert(item.key_id);
        }
    }
    generations
        .into_iter()
        .map(|((stream, epoch), key_id)| {
            (
                exists_cmd(overflow_key(prefix, key_id, epoch)),
                (stream, epoch),
            )
        })
        .unzip()
}

/// `EXISTS key`, routed by its key.
pub(crate) fn exists_cmd(key: String) -> Keyed {
    let mut cmd = redis::cmd("EXISTS");
    cmd.arg(&key);
    Keyed {
        key: key.into_bytes(),
        cmd,
    }
}

/// An `EXISTS` answer.
pub(crate) fn exists(answer: RedisResult<Value>) -> Result<bool, StoreError> {
    match answer.map_err(|e| reply_error("overflow part check", e))? {
        Value::Int(n) => Ok(n > 0),
        other => Err(StoreError::Protocol(format!("EXISTS answered {other:?}"))),
    }
}

/// Maps each probe command's answers back to round indices: for every
/// command, the index of each item and how many answers it owns.
pub(crate) struct ProbeMap {
    per_command: Vec<Vec<(usize, usize)>>,
}

fn generation_key(prefix: &str, key_id: &str, kind: &str, epoch: i64) -> String {
    format!("{prefix}{key_id}:{kind}:{epoch}")
}

pub(crate) fn counter_key(prefix: &str, key_id: &str, epoch: i64) -> String {
    generation_key(prefix, key_id, "n", epoch)
}

fn overflow_key(prefix: &str, key_id: &str, epoch: i64) -> String {
    format!("{}:x", generation_key(prefix, key_id, "f", epoch))
}

/// Which key of a stream's generation: a round groups its items by
/// (key id, epoch, part) and writes each key's name once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// The RedisBloom filter.
    Filter,
    /// Its overflow part.
    Overflow,
    /// A bitmap shard.
    Shard(u64),
}

type Group<'a> = (&'a str, i64, Part);

fn part_key(prefix: &str, (key_id, epoch, part): Group<'_>) -> String {
    match part {
        Part::Filter => generation_key(prefix, key_id, "f", epoch),
        Part::Overflow => overflow_key(prefix, key_id, epoch),
        Part::Shard(shard) => format!("{}:{shard}", generation_key(prefix, key_id, "b", epoch)),
    }
}

/// Commands that check every live generation (the parts `want` names) for
/// every item.
pub(crate) fn probes<'a>(
    backend: FilterBackend,
    prefix: &str,
    items: &[Item<'a>],
    want: Want<'_>,
) -> (Vec<Keyed>, ProbeMap) {
    type Probe = (String, Vec<(usize, usize)>, redis::Cmd);
    let mut groups: BTreeMap<Group<'a>, Probe> = BTreeMap::new();
    let mut add =
        |stream: usize, group: Group<'a>, index: usize, args: &dyn Fn(&mut redis::Cmd) -> usize| {
            if !want.part((stream, group.1), group.2) {
                return;
            }
            let (_, owners, cmd) = groups.entry(group).or_insert_with(|| {
                let key = part_key(prefix, group);
                let mut cmd = redis::cmd(match backend {
                    FilterBackend::RedisBloom => "BF.MEXISTS",
                    FilterBackend::Bitmap => "BITFIELD_RO",
                });
                cmd.arg(&key);
                (key, Vec::new(), cmd)
            });
            let count = args(cmd);
            owners.push((index, count));
        };
    for item in items {
        for epoch in item.plan.read_epochs(item.at) {
            match backend {
                FilterBackend::RedisBloom => {
                    let hash = &item.hash.0[..];
                    let one = |cmd: &mut redis::Cmd| {
                        cmd.arg(hash);
                        1
                    };
                    add(
                        item.stream,
                        (item.key_id, epoch, Part::Filter),
                        item.index,
                        &one,
                    );
                    add(
                        item.stream,
                        (item.key_id, epoch, Part::Overflow),
                        item.index,
                        &one,
                    );
                }
                FilterBackend::Bitmap => {
                    let (shard, bits) = item.plan.bit_positions(item.hash);
                    add(
                        item.stream,
                        (item.key_id, epoch, Part::Shard(shard)),
                        item.index,
                        &|cmd: &mut redis::Cmd| {
                            for bit in &bits {
                                cmd.arg("GET").arg("u1").arg(*bit);
                            }
                            bits.len()
                        },
                    );
                }
            }
        }
    }
    let mut commands = Vec::with_capacity(groups.len());
    let mut per_command = Vec::with_capacity(groups.len());
    for (_, (key, owners, cmd)) in groups {
        commands.push(Keyed {
            key: key.into_bytes(),
            cmd,
        });
        per_command.push(owners);
    }
    (commands, ProbeMap { per_command })
}

/// Folds probe answers into one flag per round index: true where some live
/// generation holds every bit of the hash (or RedisBloom says it exists).
pub(crate) fn hits(
    map: &ProbeMap,
    answers: Vec<RedisResult<Value>>,
    total: usize,
) -> Result<Vec<bool>, StoreError> {
    let mut hit = vec![false; total];
    for (owners, answer) in map.per_command.iter().zip(answers) {
        let flags: Vec<i64> = match answer {
            Ok(Value::Array(values)) => values
                .into_iter()
                .map(|v| match v {
                    Value::Int(n) => Ok(n),
                    Value::Boolean(b) => Ok(i64::from(b)),
                    other => Err(StoreError::Protocol(format!("filter probe gave {other:?}"))),
                })
                .collect::<Result<_, _>>()?,
            Ok(other) => {
                return Err(StoreError::Protocol(format!("filter probe gave {other:?}")));
            }
            Err(error) => return Err(reply_error("filter probe", error)),
        };
        let mut flags = flags.into_iter();
        for (index, count) in owners {
            let mut all = *count > 0;
            for _ in 0..*count {
                all &= flags.next().is_some_and(|f| f != 0);
            }
            if all {
                if let Some(slot) = hit.get_mut(*index) {
                    *slot = true;
                }
            }
        }
    }
    Ok(hit)
}

/// A `BF.INSERT` into a non-scaling generation, kept so that the items it
/// carried can go to the overflow part if the generation answers full.
pub(crate) struct BloomWrite {
    pub(crate) stream: usize,
    pub(crate) epoch: i64,
    overflow: String,
    capacity: u64,
    fp_rate: f64,
    ttl_ms: i64,
    hashes: Vec<SourceHash>,
}

/// Commands that add every item to the generations it is written to, set
/// each new key's expiry, and count the inserts; beside each command, the
/// RedisBloom write to watch for a full generation.
pub(crate) fn inserts(
    backend: FilterBackend,
    prefix: &str,
    items: &[Item<'_>],
    full: &Full,
) -> Vec<(Keyed, Option<BloomWrite>)> {
    // group -> (key, command, expiry in ms from the first writer's clock,
    // watch)
    type Write = (String, redis::Cmd, i64, Option<BloomWrite>);
    let mut filters: BTreeMap<Group<'_>, Write> = BTreeMap::new();
    let mut counters: BTreeMap<(&str, i64), (i64, i64)> = BTreeMap::new();
    for item in items {
        for epoch in item.plan.write_epochs(item.at) {
            let ttl = (item.plan.expires_at(epoch) - item.at).max(1);
            let sizing = &item.plan.sizing;
            match backend {
                FilterBackend::RedisBloom if full.contains(&(item.stream, epoch)) => {
                    let group = (item.key_id, epoch, Part::Overflow);
                    let (_, cmd, _, _) = filters.entry(group).or_insert_with(|| {
                        let key = part_key(prefix, group);
                        let cmd = overflow_insert(&key, sizing.capacity, sizing.fp_rate);
                        (key, cmd, ttl, None)
                    });
                    cmd.arg(&item.hash.0[..]);
                }
                FilterBackend::RedisBloom => {
                    let group = (item.key_id, epoch, Part::Filter);
                    let (_, cmd, _, watch) = filters.entry(group).or_insert_with(|| {
                        let key = part_key(prefix, group);
                        let mut cmd = redis::cmd("BF.INSERT");
                        cmd.arg(&key)
                            .arg("CAPACITY")
                            .arg(sizing.capacity)
                            .arg("ERROR")
                            .arg(sizing.fp_rate)
                            .arg("NONSCALING")
                            .arg("ITEMS");
                        let watch = BloomWrite {
                            stream: item.stream,
                            epoch,
                            overflow: overflow_key(prefix, item.key_id, epoch),
                            capacity: sizing.capacity,
                            fp_rate: sizing.fp_rate,
                            ttl_ms: ttl,
                            hashes: Vec::new(),
                        };
                        (key, cmd, ttl, Some(watch))
                    });
                    cmd.arg(&item.hash.0[..]);
                    if let Some(watch) = watch {
                        watch.hashes.push(*item.hash);
                    }
                }
                FilterBackend::Bitmap => {
                    let (shard, bits) = item.plan.bit_positions(item.hash);
                    let group = (item.key_id, epoch, Part::Shard(shard));
                    let (_, cmd, _, _) = filters.entry(group).or_insert_with(|| {
                        let key = part_key(prefix, group);
                        let mut cmd = redis::cmd("BITFIELD");
                        cmd.arg(&key);
                        (key, cmd, ttl, None)
                    });
                    for bit in bits {
                        cmd.arg("SET").arg("u1").arg(bit).arg(1);
                    }
                }
            }
            let counter = counters.entry((item.key_id, epoch)).or_insert((0, ttl));
            counter.0 += 1;
        }
    }
    let mut commands = Vec::new();
    for (_, (key, cmd, ttl, watch)) in filters {
        commands.push((
            Keyed {
                key: key.clone().into_bytes(),
                cmd,
            },
            watch,
        ));
        commands.push((expire_once(key, ttl), None));
    }
    for ((key_id, epoch), (count, ttl)) in counters {
        let key = counter_key(prefix, key_id, epoch);
        let mut cmd = redis::cmd("INCRBY");
        cmd.arg(&key).arg(count);
        commands.push((
            Keyed {
                key: key.clone().into_bytes(),
                cmd,
            },
            None,
        ));
        commands.push((expire_once(key, ttl), None));
    }
    commands
}

/// `BF.INSERT` into an overflow part: scaling, so it never refuses an
/// item, and sized at a tenth of the generation (it only exists past an
/// under-sized plan, which the fill alarm has flagged already; it grows
/// from there).
fn overflow_insert(key: &str, capacity: u64, fp_rate: f64) -> redis::Cmd {
    let mut cmd = redis::cmd("BF.INSERT");
    cmd.arg(key)
        .arg("CAPACITY")
        .arg(capacity.div_ceil(10).max(100))
        .arg("ERROR")
        .arg(fp_rate)
        .arg("ITEMS");
    cmd
}

const FULL: &str = "non scaling filter is full";

/// Which of a `BF.INSERT`'s items a full generation refused: `None` where
/// it took them all. RedisBloom stops at the first refused item and
/// answers no further, so every item from the first refusal on counts as
/// refused, and all of them where the whole command was refused. Any
/// other error fails the round (it is sent again whole).
pub(crate) fn refused(
    write: &BloomWrite,
    answer: RedisResult<Value>,
) -> Result<Option<Vec<SourceHash>>, StoreError> {
    let is_full = |e: &redis::ServerError| e.details().is_some_and(|d| d.contains(FULL));
    let values = match answer {
        Ok(Value::Array(values)) => values,
        Ok(Value::ServerError(e)) if is_full(&e) => return Ok(Some(write.hashes.clone())),
        Err(e) if e.detail().is_some_and(|d| d.contains(FULL)) => {
            return Ok(Some(write.hashes.clone()))
        }
        Ok(Value::ServerError(e)) => return Err(server_error("filter insert", &e)),
        Ok(other) => {
            return Err(StoreError::Protocol(format!(
                "filter insert gave {other:?}"
            )))
        }
        Err(e) => return Err(reply_error("filter insert", e)),
    };
    for (taken, value) in values.iter().enumerate() {
        match value {
            Value::ServerError(e) if is_full(e) => {
                return Ok(Some(write.hashes[taken.min(write.hashes.len())..].to_vec()))
            }
            Value::ServerError(e) => return Err(server_error("filter insert", e)),
            _ => {}
        }
    }
    // Answers short of the items without an error are no answer at all.
    if values.len() < write.hashes.len() {
        return Err(StoreError::Protocol(format!(
            "filter insert of {} items answered {}",
            write.hashes.len(),
            values.len()
        )));
    }
    Ok(None)
}

/// The overflow insert of what a full generation refused, with its expiry.
pub(crate) fn overflow(write: &BloomWrite, hashes: &[SourceHash]) -> Vec<Keyed> {
    let mut cmd = overflow_insert(&write.overflow, write.capacity, write.fp_rate);
    for hash in hashes {
        cmd.arg(&hash.0[..]);
    }
    vec![
        Keyed {
            key: write.overflow.clone().into_bytes(),
            cmd,
        },
        expire_once(write.overflow.clone(), write.ttl_ms),
    ]
}

/// Any error answer of a tier-2 write (a counter, an expiry, a bitmap, an
/// overflow part) fails the round: a hash tier 2 lacks must never be
/// covered by a watermark.
pub(crate) fn check(answer: RedisResult<Value>) -> Result<(), StoreError> {
    match answer {
        Ok(Value::ServerError(e)) => Err(server_error("filter insert", &e)),
        Ok(Value::Array(values)) => match values.iter().find_map(|v| match v {
            Value::ServerError(e) => Some(e),
            _ => None,
        }) {
            Some(e) => Err(server_error("filter insert", e)),
            None => Ok(()),
        },
        Ok(_) => Ok(()),
        Err(e) => Err(reply_error("filter insert", e)),
    }
}

fn expire_once(key: String, ttl_ms: i64) -> Keyed {
    let mut cmd = redis::cmd("PEXPIRE");
    cmd.arg(&key).arg(ttl_ms).arg("NX");
    Keyed {
        key: key.into_bytes(),
        cmd,
    }
}

#[cfg(test)]
#[path = "tier2_tests.rs"]
mod tests;
