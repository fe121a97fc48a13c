//! Tier 1 on Redis: one key per hash, claimed with a single atomic
//! `SET key value NX PX tier1_ttl GET`, settled and freed by
//! compare-and-set scripts on the value's first 16 bytes (holder and owner
//! token, see `value.rs`).
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
use crate::fingerprint::SourceHash;
use crate::store::value::{ClaimValue, LUA_DONE_BYTE, OWNER_LEN, VALUE_LEN};
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

/// Wins the claim or returns the holder's value, in one atomic command.
/// The key's expiry is fixed here, at the write; every later write keeps
/// it.
pub(crate) fn claim(key: Vec<u8>, value: &ClaimValue, ttl_ms: i64) -> Result<Keyed, StoreError> {
    // Sized once (one per record in a round): the name, the key, the
    // value, the flags and up to 20 digits of TTL.
    let mut cmd = Cmd::with_capacity(7, key.len() + VALUE_LEN + 35);
    cmd.arg("SET")
        .arg(&key)
        .arg(&value.encode()?[..])
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms.max(1))
        .arg("GET");
    Ok(Keyed { key, cmd })
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

/// The compare-and-set scripts. They compare the owner bytes at the head of
/// the value and flip the done bit in place, so they never decode the rest
/// (see `value.rs`), and every write keeps the key's expiry (`KEEPTTL`).
pub(crate) struct Scripts {
    pub(crate) done: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) restamp: LuaScript,
    pub(crate) raise: LuaScript,
    /// Notes early-insert runs beside earlier owners' (`early.rs`).
    pub(crate) early: LuaScript,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        let owner = OWNER_LEN;
        let byte = LUA_DONE_BYTE;
        // Done flags, per key (ARGV: the owner bytes): 1 where the claim
        // carries this owner (now done, or done before), 0 where it is gone
        // or another owner's.
        let done = format!(
            r#"local out = {{}}
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  out[i] = 0
  if v and string.sub(v, 1, {owner}) == ARGV[i] then
    local b = string.byte(v, {byte})
    if b < 128 then
      v = string.sub(v, 1, {before}) .. string.char(b + 128) .. string.sub(v, {after})
      redis.call('SET', key, v, 'KEEPTTL')
    end
    out[i] = 1
  end
end
return out"#,
            before = byte - 1,
            after = byte + 1,
        );
        // Release, per key (ARGV: the owner bytes): deletes a pending claim
        // of this owner (1); a done one, or another owner's, stays (0).
        let release = format!(
            r#"local out = {{}}
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  out[i] = 0
  if v and string.sub(v, 1, {owner}) == ARGV[i] and string.byte(v, {byte}) < 128 then
    redis.call('DEL', key)
    out[i] = 1
  end
end
return out"#
        );
        // Re-stamp (ARGV: the value as the claim read it, the re-stamped
        // value, the TTL for a key that vanished meanwhile): writes only
        // over exactly the value that was judged, so a done flag or another
        // owner's re-stamp in between is never overwritten. Answers 1 when
        // written, else the value now there, to be judged again.
        let restamp = r#"local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
if not v then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return v"#
            .to_string();
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
            done: LuaScript::new(done),
            release: LuaScript::new(release),
            restamp: LuaScript::new(restamp),
            raise: LuaScript::new(raise),
            early: LuaScript::new(super::early::NOTE.to_string()),
        }
    }
}

/// One hash tag's requests: their indices, keys and owner operands.
type Group = (Vec<usize>, Vec<Vec<u8>>, Vec<Vec<u8>>);

/// Compare-and-set operations over tier-1 keys, grouped by hash tag: one
/// script invocation per group, its keys in one slot.
pub(crate) struct TagGroups {
    pub(crate) groups: Vec<Group>,
}

impl TagGroups {
    /// `entries` yields, per request, its hash, its key and its owner
    /// operand, in request order.
    pub(crate) fn new(entries: impl Iterator<Item = (SourceHash, Vec<u8>, Vec<u8>)>) -> TagGroups {
        let mut by_tag: BTreeMap<u8, Group> = BTreeMap::new();
        for (index, (hash, key, owner)) in entries.enumerate() {
            let (indices, keys, owners) = by_tag.entry(tag(&hash)).or_default();
            indices.push(index);
            keys.push(key);
            owners.push(owner);
        }
        TagGroups {
            groups: by_tag.into_values().collect(),
        }
    }

    pub(crate) fn invocations(&self, script: &LuaScript, cached: bool) -> Vec<Keyed> {
        (0..self.groups.len())
            .filter_map(|g| self.invocation(script, g, cached))
            .collect()
    }

    /// Group `g`'s invocation, to send it again as `EVAL`.
    pub(crate) fn invocation(&self, script: &LuaScript, g: usize, cached: bool) -> Option<Keyed> {
        let (_, keys, owners) = self.groups.get(g)?;
        Some(script.invoke(cached, keys, owners))
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
        for ((indices, _, _), answer) in self.groups.iter().zip(answers) {
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
                .map(|h| (h, vec![h.0[16]], vec![])),
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
