//! Tier 1 on Redis: a claim is a key (`keys` layout) or a field of a small
//! hash (`grouped`, see `grouped.rs`), claimed by one script per stream and
//! hash tag (`SET NX PX GET` over the key, or the field written where
//! neither is there), settled and freed by compare-and-set scripts on the
//! value's first 16 bytes (holder and owner token, see `value.rs`).
//!
//! Key: `<prefix><key_id>{<tag>}<first 16 bytes of the hash>`. The tag (two
//! hex digits, 64 values) only matters on a cluster: it gathers a round's
//! keys into at most 64 slots, so its claims and scripts go out as at most
//! 64 pipelines in parallel instead of one per key, and a script's keys
//! always share a slot. 128 bits of hash keep collisions out of reach
//! (birthday bound near 2^64 keys).

use std::collections::BTreeMap;

use redis::{Cmd, Script};

use super::conn::Keyed;
use super::grouped::Place;
use super::grouped_script;
use crate::fingerprint::SourceHash;
use crate::store::StoreError;

/// Which of the 64 hash tags a hash's key carries.
pub(crate) fn tag(hash: &SourceHash) -> u8 {
    hash.0[16] & 0x3f
}

pub(crate) fn key(prefix: &str, key_id: &str, hash: &SourceHash) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + key_id.len() + 20);
    key.extend_from_slice(prefix.as_bytes());
    key.extend_from_slice(key_id.as_bytes());
    let mut hex = [0u8; 2];
    // One byte always fits two hex digits.
    let _ = hex::encode_to_slice([tag(hash)], &mut hex);
    key.push(b'{');
    key.extend_from_slice(&hex);
    key.push(b'}');
    key.extend_from_slice(&hash.0[..16]);
    key
}

/// A Lua script with its source kept beside its SHA-1, for the `EVAL`
/// fallback.
pub(crate) struct LuaScript {
    sha: String,
    source: String,
}

impl LuaScript {
    fn new(source: String) -> LuaScript {
        LuaScript {
            sha: Script::new(&source).get_hash().to_string(),
            source,
        }
    }

    /// `EVALSHA` over keys in one slot (one hash tag, or a single key);
    /// `EVAL` when the server has not seen the script yet (after a restart,
    /// a failover or `SCRIPT FLUSH`).
    pub(crate) fn invoke(&self, cached: bool, keys: &[Vec<u8>], args: &[Vec<u8>]) -> Keyed {
        let mut cmd: Cmd = if cached {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&self.sha);
            cmd
        } else {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(&self.source);
            cmd
        };
        cmd.arg(keys.len());
        for key in keys {
            cmd.arg(key);
        }
        for arg in args {
            cmd.arg(&arg[..]);
        }
        Keyed {
            key: keys.first().cloned().unwrap_or_default(),
            cmd,
        }
    }
}

/// The tier-1 scripts, over both layouts (`grouped_script.rs`), and the
/// watermark and early-insert scripts beside them.
pub(crate) struct Scripts {
    /// Claims of one stream and hash tag, in the stream's write layout.
    pub(crate) claim: LuaScript,
    pub(crate) done: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) restamp: LuaScript,
    /// Rebuilt claims written as fields.
    pub(crate) restore: LuaScript,
    pub(crate) raise: LuaScript,
    /// Notes early-insert runs beside earlier owners' (`early.rs`).
    pub(crate) early: LuaScript,
    /// Bumps, checks or raises a tag's progress mark (`marks.rs`).
    pub(crate) marks: LuaScript,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        // Raise a stream's watermarks (one hash, one slot; ARGV: the hash's
        // TTL, then field, start, end per raise): W = HGET or start; only
        // where W >= start does it move, to max(W, end). Offsets stay
        // strings (compared as numbers, exact below 2^53), so no Lua float
        // formatting ever reaches the hash. Answers the watermarks after.
        let raise = r#"local out = {}
for i = 2, #ARGV, 3 do
  local field, s, e = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local w = redis.call('HGET', KEYS[1], field) or s
  if tonumber(w) >= tonumber(s) and tonumber(e) > tonumber(w) then w = e end
  redis.call('HSET', KEYS[1], field, w)
  out[#out + 1] = w
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return out"#
            .to_string();
        Scripts {
            claim: LuaScript::new(grouped_script::claim()),
            done: LuaScript::new(grouped_script::done()),
            release: LuaScript::new(grouped_script::release()),
            restamp: LuaScript::new(grouped_script::restamp()),
            restore: LuaScript::new(grouped_script::restore()),
            raise: LuaScript::new(raise),
            early: LuaScript::new(super::early::NOTE.to_string()),
            marks: LuaScript::new(super::marks::SCRIPT.to_string()),
        }
    }
}

/// One script call's requests, all in one slot: their indices in request
/// order, each one's key, the distinct hashes their fields live in, and
/// the operands (per request: its operand, its field, its hash's index).
#[derive(Default)]
pub(crate) struct Group {
    pub(crate) indices: Vec<usize>,
    pub(crate) keys: Vec<Vec<u8>>,
    hashes: Vec<Vec<u8>>,
    /// Each hash's `Place::slot`.
    slots: Vec<u32>,
    args: Vec<Vec<u8>>,
}

impl Group {
    fn push(&mut self, index: usize, place: Place, operand: Vec<u8>) {
        let at = match self.hashes.iter().position(|h| *h == place.group) {
            Some(at) => at,
            None => {
                self.hashes.push(place.group);
                self.slots.push(place.slot);
                self.hashes.len() - 1
            }
        };
        self.indices.push(index);
        self.keys.push(place.key);
        self.args.push(operand);
        self.args.push(place.field);
        self.args.push((at + 1).to_string().into_bytes());
    }

    /// The script's keys: each request's key, then the hashes.
    fn script_keys(&self) -> Vec<Vec<u8>> {
        self.keys.iter().chain(&self.hashes).cloned().collect()
    }

    /// The slot (`Place::slot`) of the group's hash with script index `g`
    /// (`KEYS[n + g]`).
    pub(crate) fn hash_slot(&self, g: usize) -> Option<u32> {
        self.slots.get(g.checked_sub(1)?).copied()
    }
}

/// A group's `(stream, tag)`.
type Slot = (usize, u8);
/// The operands a group's invocation starts with.
type Head = Vec<Vec<u8>>;

/// Operations over tier-1 claims grouped by slot: one script invocation
/// per group. Compare-and-set operations group by hash tag; claims by
/// stream and hash tag (their TTL and layout are the stream's).
pub(crate) struct TagGroups {
    pub(crate) groups: Vec<Group>,
    /// Operands every invocation of a group starts with, by group.
    heads: Vec<Head>,
    /// Each group's `(stream, tag)` (stream 0 where grouped by tag alone).
    pub(crate) slots: Vec<Slot>,
}

impl TagGroups {
    /// `entries` yields, per request, its hash, its places and its
    /// operand, in request order.
    pub(crate) fn new(entries: impl Iterator<Item = (SourceHash, Place, Vec<u8>)>) -> TagGroups {
        TagGroups::by(
            entries.map(|(hash, place, operand)| ((0, tag(&hash)), place, operand, Vec::new())),
        )
    }

    /// Groups by `(stream, tag)`, each group's invocation led by `head`
    /// (the same for every request of a stream).
    pub(crate) fn by(entries: impl Iterator<Item = (Slot, Place, Vec<u8>, Head)>) -> TagGroups {
        TagGroups::indexed(
            entries
                .enumerate()
                .map(|(index, (slot, place, operand, head))| (index, slot, place, operand, head)),
        )
    }

    /// As `by`, each request with its own index in the requests.
    pub(crate) fn indexed(
        entries: impl Iterator<Item = (usize, Slot, Place, Vec<u8>, Head)>,
    ) -> TagGroups {
        let mut by_slot: BTreeMap<Slot, (Group, Head)> = BTreeMap::new();
        for (index, slot, place, operand, head) in entries {
            by_slot
                .entry(slot)
                .or_insert_with(|| (Group::default(), head))
                .0
                .push(index, place, operand);
        }
        let slots = by_slot.keys().copied().collect();
        let (groups, heads) = by_slot.into_values().unzip();
        TagGroups {
            groups,
            heads,
            slots,
        }
    }

    pub(crate) fn invocations(&self, script: &LuaScript, cached: bool) -> Vec<Keyed> {
        (0..self.groups.len())
            .filter_map(|g| self.invocation(script, g, cached))
            .collect()
    }

    /// Group `g`'s invocation, to send it again as `EVAL`.
    pub(crate) fn invocation(&self, script: &LuaScript, g: usize, cached: bool) -> Option<Keyed> {
        let group = self.groups.get(g)?;
        let head = self.heads.get(g)?;
        let args: Vec<Vec<u8>> = head.iter().chain(&group.args).cloned().collect();
        Some(script.invoke(cached, &group.script_keys(), &args))
    }

    /// Spreads the per-group answers (arrays of 0/1) back to request order.
    pub(crate) fn answers(
        &self,
        answers: Vec<redis::Value>,
        total: usize,
    ) -> Result<Vec<bool>, StoreError> {
        if answers.len() != self.groups.len() {
            return Err(StoreError::Protocol(
                "compare-and-set scripts answered short".into(),
            ));
        }
        let mut out = vec![false; total];
        for (Group { indices, .. }, answer) in self.groups.iter().zip(answers) {
            let redis::Value::Array(values) = answer else {
                return Err(StoreError::Protocol(format!(
                    "compare-and-set script answered {answer:?}"
                )));
            };
            if values.len() != indices.len() {
                return Err(StoreError::Protocol(
                    "compare-and-set script answered short".into(),
                ));
            }
            for (&index, value) in indices.iter().zip(values) {
                let set = match value {
                    redis::Value::Int(n) => n == 1,
                    other => {
                        return Err(StoreError::Protocol(format!(
                            "compare-and-set script gave {other:?}"
                        )))
                    }
                };
                if let Some(slot) = out.get_mut(index) {
                    *slot = set;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_prefix_key_id_tag_and_sixteen_hash_bytes() {
        let mut hash = SourceHash([0xaa; 32]);
        hash.0[16] = 0xc5;
        let key = key("idemgate:", "Xy", &hash);
        assert_eq!(&key[..15], b"idemgate:Xy{05}");
        assert_eq!(&key[15..], &[0xaa; 16]);
        assert_eq!(key.len(), "idemgate:".len() + 2 + 4 + 16);
    }

    #[test]
    fn compare_and_set_answers_come_back_in_request_order() {
        let hash = |t: u8| {
            let mut h = SourceHash([0; 32]);
            h.0[16] = t;
            h
        };
        let groups = TagGroups::new(
            [hash(2), hash(1), hash(2)]
                .into_iter()
                .map(|h| (h, Place::of("p:", "id", 1, &h), vec![])),
        );
        assert_eq!(groups.groups.len(), 2);
        // Tag 1 first (request 1), then tag 2 (requests 0 and 2).
        let answers = vec![
            redis::Value::Array(vec![redis::Value::Int(1)]),
            redis::Value::Array(vec![redis::Value::Int(0), redis::Value::Int(1)]),
        ];
        assert_eq!(groups.answers(answers, 3).unwrap(), vec![false, true, true]);
    }
}
