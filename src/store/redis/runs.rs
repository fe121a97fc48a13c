//! Records of finished runs on Redis (docs/design.md §7, `store/runs.rs`):
//! one string key each, on its partition's hash tag, so on a cluster the
//! record lives on the node that serves that tag.
//!
//! Key: `<prefix><key_id>:r{<tag>}<topic tag>:<partition>:<writer>:<sequence>`.

use redis::{Cmd, Value};

use super::conn::reply_error;
use super::{Keyed, RedisStore};
use crate::store::{millis, spec, RunsName, StoreError};

/// The partition's hash tag: one of the 64 the claims use.
fn tag(name: &RunsName) -> u8 {
    ((name.topic.0 ^ name.partition as u32) & 0x3f) as u8
}

pub(crate) fn key(prefix: &str, key_id: &str, name: &RunsName) -> Vec<u8> {
    format!(
        "{prefix}{key_id}:r{{{:02x}}}{:06x}:{}:{:08x}:{}",
        tag(name),
        name.topic.0,
        name.partition,
        name.writer.0,
        name.sequence
    )
    .into_bytes()
}

impl RedisStore {
    fn runs_key(&self, name: &RunsName) -> Result<Vec<u8>, StoreError> {
        Ok(key(
            &self.prefix,
            &spec(&self.streams, name.stream)?.key_id,
            name,
        ))
    }

    fn runs_ttl(&self, name: &RunsName) -> Result<i64, StoreError> {
        Ok(millis(spec(&self.streams, name.stream)?.watermark_ttl()))
    }

    /// One command's answer.
    async fn run_one(&self, key: Vec<u8>, cmd: Cmd, what: &str) -> Result<Value, StoreError> {
        let answer = self.conn.run(vec![Keyed { key, cmd }]).await?;
        answer
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::Protocol(format!("{what} unanswered")))?
            .map_err(|e| reply_error(what, e))
    }

    pub(super) async fn put_runs_at(
        &self,
        name: &RunsName,
        content: &[u8],
    ) -> Result<(), StoreError> {
        let key = self.runs_key(name)?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(&key)
            .arg(content)
            .arg("PX")
            .arg(self.runs_ttl(name)?);
        self.run_one(key, cmd, "runs record write").await?;
        Ok(())
    }

    pub(super) async fn get_runs_at(&self, name: &RunsName) -> Result<Option<Vec<u8>>, StoreError> {
        let key = self.runs_key(name)?;
        let mut cmd = redis::cmd("GET");
        cmd.arg(&key);
        match self.run_one(key, cmd, "runs record read").await? {
            Value::Nil => Ok(None),
            other => redis::from_redis_value::<Vec<u8>>(other)
                .map(Some)
                .map_err(super::unparsable),
        }
    }

    pub(super) async fn refresh_runs_at(&self, name: &RunsName) -> Result<bool, StoreError> {
        let key = self.runs_key(name)?;
        let mut cmd = redis::cmd("PEXPIRE");
        cmd.arg(&key).arg(self.runs_ttl(name)?);
        let answer = self.run_one(key, cmd, "runs record refresh").await?;
        redis::from_redis_value::<i64>(answer)
            .map(|set| set == 1)
            .map_err(super::unparsable)
    }

    /// One `DEL` per record (a cluster sends each to its slot's node).
    pub(super) async fn delete_runs_at(&self, names: &[RunsName]) -> Result<(), StoreError> {
        let mut commands = Vec::with_capacity(names.len());
        for name in names {
            let key = self.runs_key(name)?;
            let mut cmd = redis::cmd("DEL");
            cmd.arg(&key);
            commands.push(Keyed { key, cmd });
        }
        for answer in self.conn.run(commands).await? {
            answer.map_err(|e| reply_error("runs record delete", e))?;
        }
        Ok(())
    }
}
