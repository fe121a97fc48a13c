//! Claims `idemgate rebuild` writes back on Redis (docs/design.md §8.3),
//! over whatever their places hold, in trips of a thousand: in the
//! stream's write layout, `SET key value PXAT expires_at`, or a script per
//! stream and hash tag writing fields (`grouped_script.rs`).

use super::grouped::Tier1Layout;
use super::grouped_script::field_value;
use super::round::{self, values};
use super::tier1::TagGroups;
use super::{tier1, Keyed, RedisStore};
use crate::store::value::ClaimValue;
use crate::store::{spec, Restored, StoreError};

/// Claims per trip.
const CHUNK: usize = 1000;

impl RedisStore {
    pub(super) async fn restore_claims(&self, claims: &[Restored]) -> Result<(), StoreError> {
        for chunk in claims.chunks(CHUNK) {
            let mut commands = Vec::new();
            let mut grouped = Vec::new();
            for restored in chunk {
                let spec = spec(&self.streams, restored.stream)?;
                let value = ClaimValue::restored(restored).encode()?;
                let layout = round::layout(&self.layouts, restored.stream)?;
                if layout.write == Tier1Layout::Grouped {
                    let place = round::place(
                        &self.prefix,
                        &self.streams,
                        &self.layouts,
                        restored.stream,
                        &restored.hash,
                    )?;
                    let slot = (restored.stream.0, tier1::tag(&restored.hash));
                    let operand = field_value(&value, restored.expires_at).to_vec();
                    grouped.push((slot, place, operand, Vec::new()));
                    continue;
                }
                let key = tier1::key(&self.prefix, &spec.key_id, &restored.hash);
                let mut cmd = redis::cmd("SET");
                cmd.arg(&key)
                    .arg(&value[..])
                    .arg("PXAT")
                    .arg(restored.expires_at.max(1));
                commands.push(Keyed { key, cmd });
            }
            let groups = TagGroups::by(grouped.into_iter());
            // As `EVAL`: a rebuild's connection may meet a server that never
            // saw the script.
            commands.extend(groups.invocations(&self.scripts.restore, false));
            values(self.conn.run(commands).await?, "restore")?;
        }
        Ok(())
    }
}
