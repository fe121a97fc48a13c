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
use crate::store::value::ClaimValue;

/// Which of the 64 hash tags a hash's key carries.
pub(crate) fn tag(hash: &SourceHash) -> u8 {
    hash.0[16] & 0x3f
}

pub(crate) fn key(prefix: &str, stream: &str, hash: &SourceHash) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + stream.len() + 24);
    key.extend_from_slice(prefix.as_bytes());
    key.extend_from_slice(stream.as_bytes());
    key.extend_from_slice(format!("{{{:02x}}}", tag(hash)).as_bytes());
    key.extend_from_slice(&hash.0[..16]);
    key
}

/// Wins the claim or returns the holder's value, in one atomic command.
pub(crate) fn claim(key: Vec<u8>, value: &ClaimValue, lease_ms: i64) -> Keyed {
    let mut cmd = redis::cmd("SET");
    cmd.arg(&key)
        .arg(&value.encode().unwrap_or_default()[..])
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

