//! Tier 1 on Redis: one key per hash, claimed with a single atomic
//! `SET key value NX PX lease GET`, settled with compare-and-set scripts.
//!
//! Key: `<prefix><stream>:c:{<tag>}<first 16 bytes of the hash>`. The tag
//! (two hex digits, 64 values) only matters on a cluster: it gathers a
//! batch's keys into at most 64 slots, so the batch goes out as at most 64
//! pipelines in parallel instead of one per key. 128 bits of hash keep
//! collisions out of reach (birthday bound near 2^64 keys).

use redis::{Cmd, Script};

use super::conn::Keyed;
use crate::fingerprint::SourceHash;
use crate::store::value::{encode_holder, ClaimValue, LUA_HOLDER_RANGE};
use crate::store::Coordinates;

/// Which of the 64 hash tags a hash's key carries.
pub(crate) fn tag(hash: &SourceHash) -> u8 {
    hash.0[16] & 0x3f
}

pub(crate) fn key(prefix: &str, stream: &str, hash: &SourceHash) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + stream.len() + 24);
    key.extend_from_slice(prefix.as_bytes());
    key.extend_from_slice(stream.as_bytes());
    key.extend_from_slice(format!(":c:{{{:02x}}}", tag(hash)).as_bytes());
    key.extend_from_slice(&hash.0[..16]);
    key
}

/// Wins the claim or returns the holder's value, in one atomic command.
pub(crate) fn claim(key: Vec<u8>, value: &ClaimValue, lease_ms: i64) -> Keyed {
    let mut cmd = redis::cmd("SET");
    cmd.arg(&key)
        .arg(&value.encode()[..])
        .arg("NX")
        .arg("PX")
        .arg(lease_ms.max(1))
        .arg("GET");
    Keyed { key, cmd }
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

    /// `EVALSHA` over keys that share a hash tag (one slot on a cluster);
    /// `EVAL` when the server has not seen the script yet (after a restart,
    /// a failover or `SCRIPT FLUSH`).
    pub(crate) fn invoke(&self, cached: bool, keys: &[Vec<u8>], args: &[&[u8]]) -> Keyed {
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
            cmd.arg(*arg);
        }
        Keyed {
            key: keys.first().cloned().unwrap_or_default(),
            cmd,
        }
    }
}

/// The scripts compare the holder bytes at a fixed position of the value
/// (see `value.rs`), so they never decode the rest.
pub(crate) struct Scripts {
    pub(crate) finalize: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) take_over: LuaScript,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        let (from, to) = LUA_HOLDER_RANGE;
        // Finalize, per key (ARGV: holder, done value, ttl for each): 0 =
        // another record holds it, 1 = now done, 2 = already done by this
        // record (its TTL is left as it was: fixed from the write, never
        // extended). A lapsed key nobody took is written done: the output
        // was delivered.
        let finalize = format!(
            r#"local out = {{}}
for i, key in ipairs(KEYS) do
  local holder, done, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local v = redis.call('GET', key)
  local r = 1
  if v then
    if string.sub(v, {from}, {to}) ~= holder then r = 0
    elseif string.sub(v, 1, 1) == 'D' then r = 2 end
  end
  if r == 1 then redis.call('SET', key, done, 'PX', ttl) end
  out[i] = r
end
return out"#
        );
        // Release, per key (ARGV: holder): 1 = deleted, 0 = not ours or
        // not pending.
        let release = format!(
            r#"local out = {{}}
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  out[i] = 0
  if v and string.sub(v, 1, 1) == 'P' and string.sub(v, {from}, {to}) == ARGV[i] then
    redis.call('DEL', key)
    out[i] = 1
  end
end
return out"#
        );
        // Take over a value that has lapsed on the caller's clock but not
        // yet on the server's: only if it is still exactly that value.
        // Returns 1 when taken, else the value now there.
        let take_over = r#"local v = redis.call('GET', KEYS[1])
if (not v) or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return v"#
            .to_string();
        Scripts {
            finalize: LuaScript::new(finalize),
            release: LuaScript::new(release),
            take_over: LuaScript::new(take_over),
        }
    }
}

pub(crate) fn holder_arg(holder: &Coordinates) -> [u8; 16] {
    encode_holder(holder)
}
