//! One round on Redis as plain data: the commands it sends, in the order
//! the contract fixes (tier-2 inserts; raises, done flags, releases; the
//! watermark read; the store identity beside the claims; claims with their
//! tier-2 probes, then whether the probed generations' overflow parts
//! exist), and how their answers come apart again. No I/O here:
//! `claims.rs` sends what this builds.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use redis::{RedisResult, Value};

use super::conn::{reply_error, Keyed};
use super::grouped::{Place, StreamLayout};
use super::grouped_script::sweep_every_s;
use super::identity::RoundReads;
use super::native::{self, Mark, Sweeps};
use super::tier1::{self, Scripts, TagGroups};
use super::tier2::{self, BloomWrite, Clear, FilterBackend, Full, Item, ProbeMap, Want};
use super::watermarks::{self, RaiseGroups};
use crate::store::value::{encode_owner, ClaimValue};
use crate::store::{
    millis, spec, Claim, Held, Publish, StoreError, StoreIdentity, StreamId, StreamSpec,
};

/// Everything a round sends, built once; the inserts are turned into
/// commands at send time, against what is known of full generations then.
pub(crate) struct Plan<'a> {
    pub(crate) inserts: Vec<Item<'a>>,
    pub(crate) raises: RaiseGroups,
    pub(crate) done: TagGroups,
    pub(crate) releases: TagGroups,
    /// Streams whose watermarks are read: those asked for and those of the
    /// claims, each once, in stream order.
    pub(crate) streams: Vec<StreamId>,
    reads: Vec<Keyed>,
    /// The store identity of the tags the claims touch, read just before
    /// them (docs/design.md §8.2).
    pub(crate) identities: RoundReads,
    /// One claim script per stream and hash tag, for the claims that do
    /// not go native.
    pub(crate) claims: TagGroups,
    /// The claims sent as native commands (`native.rs`), and their
    /// commands, one each.
    pub(crate) native: Vec<NativeClaim>,
    native_commands: Vec<Keyed>,
    /// The claims of tiered streams, for their probes (and a follow-up's).
    pub(crate) probed: Vec<Item<'a>>,
    probes: Vec<Keyed>,
    pub(crate) probe_map: ProbeMap,
    overflow_reads: Vec<Keyed>,
    /// The generations whose overflow part the round asks about, in
    /// command order.
    pub(crate) asked: Vec<(usize, i64)>,
}

/// A claim sent as a native command: its index in the round, its hash's
/// key and its stream's TTL.
pub(crate) struct NativeClaim {
    pub(crate) index: usize,
    pub(crate) group: Vec<u8>,
    pub(crate) ttl_ms: i64,
}

/// How many answers each part of the trip owns, in trip order.
struct Layout {
    inserts: usize,
    raises: usize,
    done: usize,
    releases: usize,
    reads: usize,
    identities: usize,
    claims: usize,
    native: usize,
    probes: usize,
}

/// A trip's answers, part by part.
pub(crate) struct Answers {
    pub(crate) inserts: Vec<RedisResult<Value>>,
    pub(crate) raises: Vec<RedisResult<Value>>,
    pub(crate) done: Vec<RedisResult<Value>>,
    pub(crate) releases: Vec<RedisResult<Value>>,
    pub(crate) reads: Vec<RedisResult<Value>>,
    pub(crate) identities: Vec<RedisResult<Value>>,
    pub(crate) claims: Vec<RedisResult<Value>>,
    pub(crate) native: Vec<RedisResult<Value>>,
    pub(crate) probes: Vec<RedisResult<Value>>,
    pub(crate) overflow_reads: Vec<RedisResult<Value>>,
}

/// What a round's plan needs of the store beside the round itself.
pub(crate) struct Setting<'a> {
    pub(crate) prefix: &'a str,
    pub(crate) backend: FilterBackend,
    pub(crate) streams: &'a [StreamSpec],
    /// The identities adopted at start, by stream index.
    pub(crate) adopted: &'a HashMap<usize, StoreIdentity>,
    /// Each stream's tier-1 layout, by stream index.
    pub(crate) layouts: &'a [StreamLayout],
    pub(crate) cluster: bool,
    /// This replica's floors of the progress marks, read beside the
    /// identities (`identity::RoundReads`).
    pub(crate) floors: &'a crate::store::marks::Floors,
    /// Generations known without an overflow part: probed without it;
    /// `None` where rounds do not ask (every part probed).
    pub(crate) clear: Option<&'a Clear>,
}

/// The hashes' sweeps learnt, and the time the round is planned at: which
/// claims go native.
pub(crate) struct Native<'s> {
    pub(crate) sweeps: &'s Sweeps,
    pub(crate) now: Instant,
}

impl<'a> Plan<'a> {
    pub(crate) fn new(
        setting: Setting<'a>,
        publish: &'a Publish,
        claims: &'a [Claim],
        read: &[StreamId],
        native: Native<'_>,
    ) -> Result<Plan<'a>, StoreError> {
        let Setting {
            prefix,
            backend,
            streams,
            adopted,
            layouts,
            cluster,
            floors,
            clear,
        } = setting;
        let Native { sweeps, now } = native;
        let mut inserts = Vec::new();
        for (index, insert) in publish.inserts.iter().enumerate() {
            let spec = spec(streams, insert.stream)?;
            if let Some(plan) = &spec.filter {
                inserts.push(Item {
                    index,
                    stream: insert.stream.0,
                    key_id: &spec.key_id,
                    plan,
                    hash: &insert.hash,
                    at: insert.at,
                });
            }
        }
        let raises = RaiseGroups::new(prefix, &publish.raises, |id| spec(streams, id))?;
        let done = cas_groups(prefix, streams, layouts, &publish.done)?;
        let releases = cas_groups(prefix, streams, layouts, &publish.releases)?;

        let mut ids: Vec<StreamId> = read
            .iter()
            .chain(claims.iter().map(|c| &c.stream))
            .copied()
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let reads = ids
            .iter()
            .map(|id| Ok(watermarks::read(prefix, spec(streams, *id)?)))
            .collect::<Result<_, StoreError>>()?;

        let mut native = Vec::new();
        let mut native_commands = Vec::new();
        let mut scripted = Vec::new();
        for (index, claim) in claims.iter().enumerate() {
            match native_claim(prefix, streams, layouts, (sweeps, now), index, claim)? {
                Some((sent, command)) => {
                    native.push(sent);
                    native_commands.push(command);
                }
                None => scripted.push(index),
            }
        }
        let sets = claim_groups(prefix, streams, layouts, claims, scripted)?;
        let mut probed = Vec::new();
        for (index, claim) in claims.iter().enumerate() {
            let spec = spec(streams, claim.stream)?;
            if let Some(plan) = &spec.filter {
                probed.push(Item {
                    index,
                    stream: claim.stream.0,
                    key_id: &spec.key_id,
                    plan,
                    hash: &claim.hash,
                    at: claim.at,
                });
            }
        }
        let none = Clear::new();
        let (probes, probe_map) = tier2::probes(
            backend,
            prefix,
            &probed,
            Want::Round(clear.unwrap_or(&none)),
        );
        let (overflow_reads, asked) = match clear {
            Some(_) => tier2::overflow_reads(backend, prefix, &probed),
            None => (Vec::new(), Vec::new()),
        };
        Ok(Plan {
            inserts,
            raises,
            done,
            releases,
            streams: ids,
            reads,
            identities: RoundReads::new(prefix, streams, claims, adopted, floors, cluster)?,
            claims: sets,
            native,
            native_commands,
            probed,
            probes,
            probe_map,
            overflow_reads,
            asked,
        })
    }

    /// The round's commands in contract order; `inserts` are those of this
    /// trip (none where they went ahead on their own). The claims, the
    /// probes and the overflow checks go with it (moved, not copied).
    pub(crate) fn trip(
        &mut self,
        scripts: &Scripts,
        inserts: Vec<Keyed>,
    ) -> (Vec<Keyed>, impl FnOnce(Vec<RedisResult<Value>>) -> Answers) {
        let layout = Layout {
            inserts: inserts.len(),
            raises: self.raises.len(),
            done: self.done.groups.len(),
            releases: self.releases.groups.len(),
            reads: self.reads.len(),
            identities: self.identities.commands().len(),
            claims: self.claims.groups.len(),
            native: self.native_commands.len(),
            probes: self.probes.len(),
        };
        let mut commands = inserts;
        commands.extend(self.raises.invocations(&scripts.raise, true));
        commands.extend(self.done.invocations(&scripts.done, true));
        commands.extend(self.releases.invocations(&scripts.release, true));
        commands.extend(self.reads.iter().cloned());
        commands.extend(self.identities.commands().iter().cloned());
        commands.extend(self.claims.invocations(&scripts.claim, true));
        commands.extend(std::mem::take(&mut self.native_commands));
        commands.extend(std::mem::take(&mut self.probes));
        commands.extend(std::mem::take(&mut self.overflow_reads));
        (commands, move |answers| layout.split(answers))
    }

    /// The generations this round probed without their overflow part that
    /// the round found has one now.
    pub(crate) fn skipped_overflow(&self, clear: &Clear, found: &[bool]) -> HashSet<(usize, i64)> {
        self.asked
            .iter()
            .zip(found)
            .filter(|(generation, exists)| **exists && clear.contains(generation))
            .map(|(generation, _)| *generation)
            .collect()
    }

    /// Reads the watermarks again, after scripts that had to be sent again
    /// as `EVAL`: a claim is judged against the watermarks after the
    /// round's raises, never before.
    pub(crate) fn reads(&self) -> Vec<Keyed> {
        self.reads.clone()
    }
}

impl Layout {
    fn split(&self, answers: Vec<RedisResult<Value>>) -> Answers {
        let mut rest = answers.into_iter();
        let mut take = |n: usize| rest.by_ref().take(n).collect::<Vec<_>>();
        let inserts = take(self.inserts);
        let raises = take(self.raises);
        let done = take(self.done);
        let releases = take(self.releases);
        let reads = take(self.reads);
        let identities = take(self.identities);
        let claims = take(self.claims);
        let native = take(self.native);
        let probes = take(self.probes);
        let overflow_reads = rest.collect();
        Answers {
            inserts,
            raises,
            done,
            releases,
            reads,
            identities,
            claims,
            native,
            probes,
            overflow_reads,
        }
    }
}

/// A claim's native command (`native.rs`), where its stream was born
/// grouped and its hash's sweep is known and not near.
fn native_claim(
    prefix: &str,
    streams: &[StreamSpec],
    layouts: &[StreamLayout],
    (sweeps, now): (&Sweeps, Instant),
    index: usize,
    claim: &Claim,
) -> Result<Option<(NativeClaim, Keyed)>, StoreError> {
    let layout = layout(layouts, claim.stream)?;
    if !layout.fields_only {
        return Ok(None);
    }
    let spec = spec(streams, claim.stream)?;
    let place = Place::of(prefix, &spec.key_id, layout.buckets, &claim.hash);
    let ttl = millis(spec.tier1_ttl).max(1);
    let learnt = Sweeps::key(claim.stream.0, place.slot);
    let Some(expires_at) = sweeps.native_expiry(learnt, ttl, now) else {
        return Ok(None);
    };
    let value = ClaimValue::pending(claim.holder, claim.token, claim.digest, claim.at);
    let command = native::command(&place, &value.encode()?, expires_at);
    let sent = NativeClaim {
        index,
        group: place.group,
        ttl_ms: ttl,
    };
    Ok(Some((sent, command)))
}

/// The claim scripts of the claims at `indices` (one per stream and hash
/// tag), each led by its stream's write layout, TTL and sweep interval.
pub(crate) fn claim_groups(
    prefix: &str,
    streams: &[StreamSpec],
    layouts: &[StreamLayout],
    claims: &[Claim],
    indices: Vec<usize>,
) -> Result<TagGroups, StoreError> {
    let entries = indices
        .into_iter()
        .map(|index| {
            let claim = claims
                .get(index)
                .ok_or_else(|| StoreError::Protocol("claim index out of range".into()))?;
            let spec = spec(streams, claim.stream)?;
            let layout = layout(layouts, claim.stream)?;
            let ttl = millis(spec.tier1_ttl).max(1);
            let head = vec![
                layout.write.script_arg().to_vec(),
                ttl.to_string().into_bytes(),
                sweep_every_s(ttl).to_string().into_bytes(),
            ];
            let value = ClaimValue::pending(claim.holder, claim.token, claim.digest, claim.at);
            let place = Place::of(prefix, &spec.key_id, layout.buckets, &claim.hash);
            Ok((
                index,
                (claim.stream.0, tier1::tag(&claim.hash)),
                place,
                value.encode()?.to_vec(),
                head,
            ))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(TagGroups::indexed(entries.into_iter()))
}

/// A stream's tier-1 layout.
pub(crate) fn layout(layouts: &[StreamLayout], id: StreamId) -> Result<StreamLayout, StoreError> {
    layouts
        .get(id.0)
        .copied()
        .ok_or_else(|| StoreError::Protocol(format!("no tier-1 layout for stream {}", id.0)))
}

/// A claim's places.
pub(crate) fn place(
    prefix: &str,
    streams: &[StreamSpec],
    layouts: &[StreamLayout],
    id: StreamId,
    hash: &crate::fingerprint::SourceHash,
) -> Result<Place, StoreError> {
    let spec = spec(streams, id)?;
    Ok(Place::of(
        prefix,
        &spec.key_id,
        layout(layouts, id)?.buckets,
        hash,
    ))
}

fn cas_groups(
    prefix: &str,
    streams: &[StreamSpec],
    layouts: &[StreamLayout],
    held: &[Held],
) -> Result<TagGroups, StoreError> {
    let entries = held
        .iter()
        .map(|h| {
            let place = place(prefix, streams, layouts, h.stream, &h.hash)?;
            Ok((h.hash, place, encode_owner(&h.holder, h.token)?.to_vec()))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(TagGroups::new(entries.into_iter()))
}

/// Which script invocations met `NOSCRIPT` (the server lost its script
/// cache): they are sent again as `EVAL`.
pub(crate) fn noscript(answers: &[RedisResult<Value>]) -> Vec<usize> {
    answers
        .iter()
        .enumerate()
        .filter(|(_, a)| matches!(a, Err(e) if e.code() == Some("NOSCRIPT")))
        .map(|(i, _)| i)
        .collect()
}

/// A script's answers, where any error (after the `EVAL` retry) fails the
/// round: it is sent again whole, every write in it being idempotent.
pub(crate) fn values(
    answers: Vec<RedisResult<Value>>,
    what: &str,
) -> Result<Vec<Value>, StoreError> {
    answers
        .into_iter()
        .map(|a| a.map_err(|e| reply_error(what, e)))
        .collect()
}

/// What a claim script found when it swept the hashes it wrote: the most
/// live claims one of them held, for its stream.
pub(crate) struct Swept {
    pub(crate) stream: usize,
    pub(crate) fields: u64,
}

/// What the claim scripts said beside the claims: per script that swept
/// a hash, what it found; the server's time; each written hash's sweep.
#[derive(Default)]
pub(crate) struct Learnt {
    pub(crate) swept: Vec<Swept>,
    /// The server's `TIME`, by the hash tag whose script read it.
    pub(crate) times: Vec<(u8, (i64, i64))>,
    pub(crate) marks: Vec<(u64, Mark)>,
}

/// What the claim scripts answered, spread back to request order: per
/// claim `None` where it was written, else the holder's value (claims no
/// script carried stay `None`); and what they said beside.
pub(crate) fn existing(
    groups: &TagGroups,
    answers: Vec<RedisResult<Value>>,
    total: usize,
) -> Result<(Vec<Option<ClaimValue>>, Learnt), StoreError> {
    if answers.len() != groups.groups.len() {
        return Err(StoreError::Protocol("claim scripts answered short".into()));
    }
    let mut out = vec![None; total];
    let mut learnt = Learnt::default();
    for ((group, (stream, tag)), answer) in groups.groups.iter().zip(&groups.slots).zip(answers) {
        let Value::Array(mut values) = answer.map_err(|e| reply_error("claim", e))? else {
            return Err(StoreError::Protocol(
                "claim script answered no array".into(),
            ));
        };
        let n = group.indices.len();
        if values.len() < n + 3 || (values.len() - n - 3) % 3 != 0 {
            return Err(StoreError::Protocol("claim script answered short".into()));
        }
        let tail = values.split_off(n);
        let int = |v: &Value| match v {
            Value::Int(i) => Ok(*i),
            other => Err(StoreError::Protocol(format!(
                "claim script's figures gave {other:?}"
            ))),
        };
        // 0 where the script swept nothing: most calls.
        if let fields @ 1.. = int(&tail[0])? {
            learnt.swept.push(Swept {
                stream: *stream,
                fields: u64::try_from(fields).unwrap_or(0),
            });
        }
        learnt.times.push((*tag, (int(&tail[1])?, int(&tail[2])?)));
        for seen in tail[3..].chunks(3) {
            let g = usize::try_from(int(&seen[0])?).unwrap_or(0);
            if let Some(slot) = group.hash_slot(g) {
                let (due, lasts) = (int(&seen[1])?, int(&seen[2])?);
                learnt
                    .marks
                    .push((Sweeps::key(*stream, slot), Mark { due, lasts }));
            }
        }
        for (&index, value) in group.indices.iter().zip(values) {
            let held = match value {
                Value::Int(0) => None,
                Value::BulkString(bytes) => Some(ClaimValue::decode(&bytes)?),
                other => return Err(StoreError::Protocol(format!("claim script gave {other:?}"))),
            };
            if let Some(slot) = out.get_mut(index) {
                *slot = held;
            }
        }
    }
    Ok((out, learnt))
}

/// The bloom writes of a trip's inserts, in command order.
pub(crate) fn insert_commands(
    backend: FilterBackend,
    prefix: &str,
    items: &[Item<'_>],
    full: &Full,
) -> (Vec<Keyed>, Vec<Option<BloomWrite>>) {
    tier2::inserts(backend, prefix, items, full)
        .into_iter()
        .unzip()
}
