//! Claims `idemgate rebuild` writes back on Redis (docs/design.md §8.3):
//! `SET key value PXAT expires_at`, over whatever the key holds, in trips
//! of a thousand.

use super::round::values;
use super::{tier1, Keyed, RedisStore};
use crate::store::value::ClaimValue;
use crate::store::{spec, Restored, StoreError};

/// Claims per trip.
const CHUNK: usize = 1000;

impl RedisStore {
    pub(super) async fn restore_claims(&self, claims: &[Restored]) -> Result<(), StoreError> {
        for chunk in claims.chunks(CHUNK) {
            let commands = chunk
                .iter()
                .map(|restored| {
                    let spec = spec(&self.streams, restored.stream)?;
                    let key = tier1::key(&self.prefix, &spec.key_id, &restored.hash);
                    let mut cmd = redis::cmd("SET");
                    cmd.arg(&key)
                        .arg(&ClaimValue::restored(restored).encode()?[..])
                        .arg("PXAT")
                        .arg(restored.expires_at.max(1));
                    Ok(Keyed { key, cmd })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            values(self.conn.run(commands).await?, "restore")?;
        }
        Ok(())
    }
}
