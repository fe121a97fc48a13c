//! Progress marks on Redis (docs/design.md §8.2, `store/marks.rs`): one
//! integer key per stream and hash tag, `<prefix><key_id>:m{<tag>}`, in the
//! slot of that tag's claims and identity, without expiry (64 keys of
//! about 40 bytes per stream). One script reads, compares and bumps them,
//! so the comparison with the floor and the bump are one step: a replica
//! that never saw the floor cannot grow a mark back past what was lost
//! while a replica that did refuses.

use redis::Value;

use super::identity::{self, TAGS};
use super::{unparsable, RedisStore};
use crate::store::marks::Floors;
use crate::store::{spec, Marked, StoreError, StreamId, StreamLost};

pub(crate) fn key(prefix: &str, key_id: &str, tag: u8) -> Vec<u8> {
    format!("{prefix}{key_id}:m{{{tag:02x}}}").into_bytes()
}

/// KEYS: the tag's mark, the tag's identity. ARGV: the floor, then the
/// mode: `1` bump, `0` check, `r` raise to the floor (`idemgate rebuild`).
/// Below the floor (bump or check) the identity is marked gone back (the
/// prefix is `identity::WENT_BACK`), once, and the answer is `-1 - mark`;
/// otherwise the mark after the step. Marks stay below 2^53, exact as Lua
/// numbers. A bump is `SET`, not `INCR`: the store user needs no right
/// beyond the claims' (docs/configuration.md).
pub(crate) const SCRIPT: &str = r#"local m = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if ARGV[2] == 'r' then
  if m < floor then redis.call('SET', KEYS[1], ARGV[1]) return floor end
  return m
end
if m < floor then
  local id = redis.call('GET', KEYS[2])
  if id and string.sub(id, 1, 5) ~= 'back:' then
    redis.call('SET', KEYS[2], 'back:' .. id)
  end
  return -1 - m
end
if ARGV[2] == '1' then
  m = m + 1
  redis.call('SET', KEYS[1], string.format('%d', m))
end
return m"#;

/// What the script is asked to do.
#[derive(Clone, Copy)]
enum Step<'a> {
    Bump,
    Check,
    Raise(&'a [u64]),
}

/// The floors a Redis store keeps: a place per hash tag.
pub(crate) fn floors(streams: usize) -> Floors {
    Floors::new(streams, usize::from(TAGS))
}

/// The script's answers, per tag: `Behind` where any lies below.
fn judged(answers: Vec<Value>) -> Result<Marked, StoreError> {
    let mut marks = Vec::with_capacity(answers.len());
    for answer in answers {
        let mark: i64 = redis::from_redis_value(answer).map_err(unparsable)?;
        if mark < 0 {
            return Ok(Marked::Behind);
        }
        marks.push(mark.unsigned_abs());
    }
    Ok(Marked::At(marks))
}

impl RedisStore {
    async fn marks_step(&self, stream: StreamId, step: Step<'_>) -> Result<Marked, StoreError> {
        let key_id = &spec(&self.streams, stream)?.key_id;
        let floors = match step {
            Step::Raise(marks) => marks.to_vec(),
            Step::Bump | Step::Check => self.floors.of(stream.0),
        };
        let mode: &[u8] = match step {
            Step::Bump => b"1",
            Step::Check => b"0",
            Step::Raise(_) => b"r",
        };
        let answers = self
            .run_scripts(usize::from(TAGS), |i, cached| {
                let tag = i as u8;
                let keys = [
                    key(&self.prefix, key_id, tag),
                    identity::key(&self.prefix, key_id, tag),
                ];
                let floor = floors.get(i).copied().unwrap_or(0);
                let args = [floor.to_string().into_bytes(), mode.to_vec()];
                self.scripts.marks.invoke(cached, &keys, &args)
            })
            .await?;
        let marked = judged(answers)?;
        if let Marked::At(marks) = &marked {
            self.floors.raise(stream.0, marks);
        }
        Ok(marked)
    }

    pub(super) async fn advance_marks_at(&self, stream: StreamId) -> Result<Marked, StoreError> {
        self.marks_step(stream, Step::Bump).await
    }

    pub(super) async fn check_marks_at(&self, stream: StreamId) -> Result<Marked, StoreError> {
        self.marks_step(stream, Step::Check).await
    }

    pub(super) async fn restore_marks_at(
        &self,
        stream: StreamId,
        marks: &[u64],
    ) -> Result<(), StoreError> {
        self.marks_step(stream, Step::Raise(marks)).await.map(drop)
    }

    pub(super) fn raise_floors_to(&self, stream: StreamId, marks: &[u64]) {
        if self.floors.raise(stream.0, marks) {
            self.floors.ask_recheck();
        }
    }

    /// Before a round, where a floor rose or a trip failed since the last:
    /// the marks of every adopted stream, checked; those below a floor are
    /// answered lost. A check that fails is asked again before the next.
    pub(super) async fn recheck_marks(&self) -> Result<Vec<StreamLost>, StoreError> {
        if !self.floors.take_recheck() {
            return Ok(Vec::new());
        }
        let mut lost = Vec::new();
        let mut streams: Vec<usize> = self.adopted().into_keys().collect();
        streams.sort_unstable();
        for stream in streams {
            match self.check_marks_at(StreamId(stream)).await {
                Ok(Marked::Behind) => lost.push(StreamLost {
                    stream: StreamId(stream),
                    how: crate::store::Check::Behind,
                }),
                Ok(_) => {}
                Err(error) => {
                    self.floors.ask_recheck();
                    return Err(error);
                }
            }
        }
        Ok(lost)
    }

    /// Whether a trip's failure or a lost script cache may mean another
    /// server: the next round checks the marks first.
    pub(super) fn connection_may_have_changed(&self) {
        self.floors.ask_recheck();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_key_shares_its_tags_slot_with_the_identity() {
        let mark = key("ig:", "Ab", 5);
        assert_eq!(mark, b"ig:Ab:m{05}");
        assert_eq!(
            redis::cluster_routing::Slot::for_key(&mark),
            redis::cluster_routing::Slot::for_key(identity::key("ig:", "Ab", 5))
        );
    }

    #[test]
    fn any_tag_below_its_floor_makes_the_stream_behind() {
        let at = |v: &[i64]| v.iter().map(|&m| Value::Int(m)).collect::<Vec<_>>();
        assert_eq!(judged(at(&[3, 4])).unwrap(), Marked::At(vec![3, 4]));
        assert_eq!(judged(at(&[3, -5, 4])).unwrap(), Marked::Behind);
        assert!(judged(vec![Value::Nil]).is_err());
    }

    #[test]
    fn the_script_names_the_prefix_the_identity_check_reads() {
        let prefix = std::str::from_utf8(crate::store::WENT_BACK).unwrap();
        assert!(SCRIPT.contains(&format!("'{prefix}'")));
        assert_eq!(prefix.len(), 5, "the script compares five bytes");
    }
}
