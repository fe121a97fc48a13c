//! The tier-1 scripts over both layouts (`grouped.rs`): every one reads a
//! claim's key first, then its field, in one atomic call (they share a
//! slot), so a claim lives in exactly one of them and a replica writing
//! either layout sees the other's claims.
//!
//! A field's value is 28 bytes: the claim value's first 24 (`value.rs`:
//! holder and token in 1-16, the payload digest in 17-24), then the done
//! flag in byte 25's high bit, as in a key's value, over the field's
//! expiry in the other 31 bits: whole seconds since 2020-01-01 on the
//! server's clock (`TIME`, so replicas' clocks never matter), rounded up,
//! never earlier than the TTL from the write. The claim time a key's value
//! ends with is not kept (nothing reads it): a field's claim answers with
//! a claim time of 0, and compare and set on a field compares the rest.
//! A field past its expiry counts as absent and a new claim writes over
//! it; later writes keep the expiry, as `KEEPTTL` keeps a key's. A hash lives
//! at least as long as its longest field (`PEXPIRE` `NX`, then `GT`: only
//! ever moved later).
//!
//! Expired fields are swept by the claim script that writes their hash,
//! when the hash's sweep mark (field `~`: the next sweep time, then the
//! expiry that sweep gave the hash, which only moves later) is due: the
//! whole hash is read once per tenth of the TTL, so the expired fields
//! still lying there stay around a twentieth of the live ones on average
//! (a tenth at most), for a read of about ten fields per claim written.

/// Lua shared by the scripts: the server's time and the field's expiry.
const PRELUDE: &str = r#"local T = redis.call('TIME')
local NOW = tonumber(T[1]) + tonumber(T[2]) / 1000000
local BASE = 1577836800
local function secs(v, at)
  local a, b, c, d = string.byte(v, at, at + 3)
  return BASE + (((a % 128) * 256 + b) * 256 + c) * 256 + d
end
local function live(v)
  return v and #v == 28 and secs(v, 25) > NOW
end
local function enc(s)
  s = s - BASE
  return string.char(math.floor(s / 16777216) % 256, math.floor(s / 65536) % 256,
    math.floor(s / 256) % 256, s % 256)
end
local function done_bit(v)
  if string.byte(v, 25) >= 128 then return 128 end
  return 0
end
local function field(v, until_s)
  local e = enc(until_s)
  return string.sub(v, 1, 24) .. string.char(string.byte(e, 1) + done_bit(v)) .. string.sub(e, 2)
end
local function rewrite(v, fv)
  return string.sub(v, 1, 24) .. string.char(string.byte(fv, 25) % 128 + done_bit(v)) .. string.sub(fv, 26)
end
local function value(fv)
  return string.sub(fv, 1, 24) .. string.char(done_bit(fv)) .. '\0\0\0'
end
local function extend(h, until_s)
  local ms = math.max(1, math.ceil(until_s * 1000 - NOW * 1000))
  redis.call('PEXPIRE', h, ms, 'NX')
  redis.call('PEXPIRE', h, ms, 'GT')
end
"#;

/// Claims of one stream and hash tag (KEYS: each claim's key, then the
/// distinct hashes; ARGV: the write layout `k` or `g`, the TTL in ms, the
/// sweep interval in s, then per claim its value (pending: the done flag
/// clear), its field and its hash's index). A new field goes in with
/// `HSETNX`, one walk of the listpack where the field is absent, as it
/// mostly is. A hash's expiry moves only at its sweeps, to cover every
/// field written before the next one (written before the sweep mark, so
/// expiring before the mark plus a TTL): one `HGET` of the mark a hash a
/// call, not two `PEXPIRE`s a claim. Answers per claim 0 where it was
/// written, else the holder's value; then the most live claims any hash it
/// swept held (each hash is counted at every sweep, a tenth of a TTL apart;
/// its entries are those and the sweep mark); then the server's time (`TIME`:
/// seconds, microseconds); then, per hash it wrote, the hash's index, its
/// next sweep and the least expiry its last sweep gave it (seconds since
/// the epoch; 0 where unknown), which let later claims in it go as native
/// commands (`native.rs`). The sweep mark holds both, 4 bytes each.
const CLAIM: &str = r#"local mode, ttl, every = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n = (#ARGV - 3) / 3
local until_s = math.ceil(NOW + ttl / 1000)
local exp = enc(until_s)
local out, touched = {}, {}
for i = 1, n do
  local v, f, g = ARGV[3 * i + 1], ARGV[3 * i + 2], tonumber(ARGV[3 * i + 3])
  local h = KEYS[n + g]
  if mode == 'g' then
    local held = redis.call('GET', KEYS[i])
    if held then
      out[i] = held
    else
      local nf = string.sub(v, 1, 24) .. exp
      if redis.call('HSETNX', h, f, nf) == 1 then
        touched[g] = true
        out[i] = 0
      else
        local fv = redis.call('HGET', h, f)
        if live(fv) then
          out[i] = value(fv)
        else
          redis.call('HSET', h, f, nf)
          touched[g] = true
          out[i] = 0
        end
      end
    end
  else
    local fv = redis.call('HGET', h, f)
    if live(fv) then
      out[i] = value(fv)
    else
      local held = redis.call('SET', KEYS[i], v, 'NX', 'PX', ttl, 'GET')
      if held then out[i] = held else out[i] = 0 end
    end
  end
end
local most, seen = 0, {}
for g in pairs(touched) do
  local h = KEYS[n + g]
  local mark = redis.call('HGET', h, '~')
  local due = mark and secs(mark, 1)
  local lasts = 0
  if mark and #mark == 8 then lasts = secs(mark, 5) end
  if not due or due <= NOW then
    local all = redis.call('HGETALL', h)
    local dead, kept = {}, 0
    for j = 1, #all, 2 do
      if #all[j] == 16 then
        if live(all[j + 1]) then kept = kept + 1 else dead[#dead + 1] = all[j] end
      end
    end
    if #dead > 0 then redis.call('HDEL', h, unpack(dead)) end
    local next_s = math.ceil(NOW + every)
    lasts = next_s + math.ceil(ttl / 1000)
    redis.call('HSET', h, '~', enc(next_s) .. enc(lasts))
    extend(h, lasts)
    if kept > most then most = kept end
    due = next_s
  end
  seen[#seen + 1] = g
  seen[#seen + 1] = due
  seen[#seen + 1] = lasts
end
out[n + 1] = most
out[n + 2] = tonumber(T[1])
out[n + 3] = tonumber(T[2])
for j = 1, #seen do out[n + 3 + j] = seen[j] end
return out"#;

/// Done flags (KEYS: each claim's key, then the distinct hashes; ARGV per
/// claim: the owner bytes, its field, its hash's index): 1 where the claim
/// carries this owner (now done, or done before), 0 where it is gone or
/// another owner's. The expiry stays.
const DONE: &str = r#"local n = #ARGV / 3
local out = {}
for i = 1, n do
  local owner, f, h = ARGV[3 * i - 2], ARGV[3 * i - 1], KEYS[n + tonumber(ARGV[3 * i])]
  out[i] = 0
  local v = redis.call('GET', KEYS[i])
  if v then
    if string.sub(v, 1, 16) == owner then
      local b = string.byte(v, 25)
      if b < 128 then
        redis.call('SET', KEYS[i], string.sub(v, 1, 24) .. string.char(b + 128) .. string.sub(v, 26), 'KEEPTTL')
      end
      out[i] = 1
    end
  else
    local fv = redis.call('HGET', h, f)
    if live(fv) and string.sub(fv, 1, 16) == owner then
      local b = string.byte(fv, 25)
      if b < 128 then
        redis.call('HSET', h, f, string.sub(fv, 1, 24) .. string.char(b + 128) .. string.sub(fv, 26))
      end
      out[i] = 1
    end
  end
end
return out"#;

/// Releases (operands as `DONE`): deletes a pending claim of this owner
/// (1); a done one, or another owner's, stays (0).
const RELEASE: &str = r#"local n = #ARGV / 3
local out = {}
for i = 1, n do
  local owner, f, h = ARGV[3 * i - 2], ARGV[3 * i - 1], KEYS[n + tonumber(ARGV[3 * i])]
  out[i] = 0
  local v = redis.call('GET', KEYS[i])
  if v then
    if string.sub(v, 1, 16) == owner and string.byte(v, 25) < 128 then
      redis.call('DEL', KEYS[i])
      out[i] = 1
    end
  else
    local fv = redis.call('HGET', h, f)
    if live(fv) and string.sub(fv, 1, 16) == owner and string.byte(fv, 25) < 128 then
      redis.call('HDEL', h, f)
      out[i] = 1
    end
  end
end
return out"#;

/// Re-stamp or take-over (KEYS: the claim's key and hash; ARGV: the value
/// as judged, the value to write, the TTL in ms, the field, the write
/// layout): writes only over exactly the value judged, keeping its expiry;
/// where the claim vanished meanwhile, writes it anew in the write layout.
/// Answers 1 when written, else the value now there, to be judged again.
const RESTAMP: &str = r#"local v = redis.call('GET', KEYS[1])
if v then
  if v == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
    return 1
  end
  return v
end
local fv = redis.call('HGET', KEYS[2], ARGV[4])
if live(fv) then
  if value(fv) == ARGV[1] then
    redis.call('HSET', KEYS[2], ARGV[4], rewrite(ARGV[2], fv))
    return 1
  end
  return value(fv)
end
if ARGV[5] == 'k' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
local until_s = math.ceil(NOW + tonumber(ARGV[3]) / 1000)
redis.call('HSET', KEYS[2], ARGV[4], field(ARGV[2], until_s))
extend(KEYS[2], until_s)
return 1"#;

/// `idemgate rebuild`'s claims written as fields (KEYS: each claim's key,
/// then the distinct hashes; ARGV per claim: its field's value, expiry
/// included, its field, its hash's index): over whatever the claim's
/// places hold, the key deleted so it does not shadow the field.
const RESTORE: &str = r#"local n = #ARGV / 3
for i = 1, n do
  local fv, f, h = ARGV[3 * i - 2], ARGV[3 * i - 1], KEYS[n + tonumber(ARGV[3 * i])]
  redis.call('DEL', KEYS[i])
  redis.call('HSET', h, f, fv)
  extend(h, secs(fv, 25))
end
return n"#;

fn with_prelude(body: &str) -> String {
    format!("{PRELUDE}{body}")
}

pub(crate) fn claim() -> String {
    with_prelude(CLAIM)
}

pub(crate) fn done() -> String {
    with_prelude(DONE)
}

pub(crate) fn release() -> String {
    with_prelude(RELEASE)
}

pub(crate) fn restamp() -> String {
    with_prelude(RESTAMP)
}

pub(crate) fn restore() -> String {
    with_prelude(RESTORE)
}

/// The field holding claim value `value` until `expires_at_ms` (ms since
/// the epoch, rounded up to whole seconds since 2020): the Lua `field`.
pub(crate) fn field_value(value: &[u8; VALUE_LEN], expires_at_ms: i64) -> [u8; VALUE_LEN] {
    let seconds = (expires_at_ms.max(0) + 999) / 1000 - BASE_S;
    let mut word = seconds.clamp(0, i64::from(i32::MAX)) as u32;
    word |= u32::from(value[LUA_DONE_BYTE - 1] & 0x80) << 24;
    let mut out = *value;
    out[24..].copy_from_slice(&word.to_be_bytes());
    out
}

/// 2020-01-01T00:00:00Z, where field expiries count from (Lua `BASE`).
const BASE_S: i64 = 1_577_836_800;

/// The sweep interval for a TTL: a tenth of it, at least a second.
pub(crate) fn sweep_every_s(ttl_ms: i64) -> i64 {
    (ttl_ms / 10_000).max(1)
}

use crate::store::value::{LUA_DONE_BYTE, VALUE_LEN};

#[cfg(test)]
mod tests {
    use super::field_value;
    use crate::store::value::{LUA_DONE_BYTE, OWNER_LEN, VALUE_LEN};

    #[test]
    fn a_restored_field_keeps_the_done_flag_over_its_expiry() {
        let mut value = [7u8; VALUE_LEN];
        value[24] = 0x80;
        // 2020-01-01T00:00:01.5Z: rounded up to 2 s.
        let field = field_value(&value, 1_577_836_801_500);
        assert_eq!(&field[..24], &value[..24]);
        assert_eq!(field[24..], [0x80, 0, 0, 2]);
    }

    #[test]
    fn the_scripts_offsets_are_the_values() {
        // The Lua above hard-codes these: holder and token in 1-16, the
        // done byte 25, the value 28 bytes.
        assert_eq!((OWNER_LEN, LUA_DONE_BYTE, VALUE_LEN), (16, 25, 28));
    }
}
