//! The store identity on PostgreSQL (docs/design.md §8.2): one row per
//! stream in `identities`, the one place a round reads it (beside its
//! claims, in the same transaction). And the two operator writes beside
//! it: the claims `idemgate rebuild` restores (§8.3) and what `idemgate
//! reset` records (§4.9); both run only while the group has no members.

use std::collections::HashMap;

use super::round::{boxed, pipeline, Step};
use super::{PostgresStore, Session};
use crate::store::value::ClaimValue;
use crate::store::{
    add_abandoned, spec, IdentityFound, PartitionReset, Restored, StoreError, StoreIdentity,
    StreamId, StreamLost,
};

/// Claims per restore statement.
const CHUNK: usize = 1000;

impl PostgresStore {
    pub(super) async fn find_identity_on(
        &self,
        session: &Session,
        stream: StreamId,
    ) -> Result<IdentityFound, StoreError> {
        let key_id = spec(&self.streams, stream)?.key_id.clone();
        let rows = pipeline(
            session,
            &[Step::new(&self.sql.identity, vec![boxed(key_id)])],
        )
        .await?;
        let held: Option<String> = rows
            .first()
            .and_then(|rows| rows.first())
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(|e| super::connect::store_error("identity", e))?;
        Ok(IdentityFound {
            places: vec![held.map(String::into_bytes)],
        })
    }

    /// The timed check (docs/design.md §8.2): the identity rows of the
    /// streams given that adopted one, in one statement.
    pub(super) async fn verify_identity_on(
        &self,
        session: &Session,
        streams: &[StreamId],
    ) -> Result<Vec<StreamLost>, StoreError> {
        let adopted = self.adopted();
        let mut checked = Vec::new();
        let mut key_ids = Vec::new();
        for &stream in streams {
            if adopted.contains_key(&stream.0) {
                key_ids.push(spec(&self.streams, stream)?.key_id.clone());
                checked.push(stream.0);
            }
        }
        if checked.is_empty() {
            return Ok(Vec::new());
        }
        let read = Step::new(&self.sql.identities, vec![boxed(key_ids)]);
        let rows = pipeline(session, &[read]).await?;
        let mut lost = self.lost(
            rows.into_iter().next().unwrap_or_default(),
            &checked,
            &adopted,
            None,
        )?;
        // And the marks: a store that came back older while quiet.
        self.behind_on(session, streams, &mut lost).await?;
        Ok(lost)
    }

    /// Without `replace` a row already there stays (replicas starting at
    /// once agree on the first one written).
    pub(super) async fn write_identity_on(
        &self,
        session: &Session,
        stream: StreamId,
        identity: StoreIdentity,
        replace: bool,
    ) -> Result<IdentityFound, StoreError> {
        let key_id = spec(&self.streams, stream)?.key_id.clone();
        let write = Step::new(
            &self.sql.write_identity,
            vec![boxed(key_id), boxed(identity.to_hex()), boxed(replace)],
        );
        pipeline(session, &[write]).await?;
        self.find_identity_on(session, stream).await
    }

    /// Over whatever the table holds for each hash, in statements of a
    /// thousand claims (the last of two for one hash wins).
    pub(super) async fn restore_on(
        &self,
        session: &Session,
        claims: &[Restored],
    ) -> Result<(), StoreError> {
        let mut by_stream: HashMap<usize, HashMap<Vec<u8>, &Restored>> = HashMap::new();
        for restored in claims {
            spec(&self.streams, restored.stream)?;
            by_stream
                .entry(restored.stream.0)
                .or_default()
                .insert(restored.hash.0[..16].to_vec(), restored);
        }
        for (stream, restored) in by_stream {
            let restored: Vec<_> = restored.into_iter().collect();
            for chunk in restored.chunks(CHUNK) {
                let mut expiries = Vec::with_capacity(chunk.len());
                let mut hashes = Vec::with_capacity(chunk.len());
                let mut values = Vec::with_capacity(chunk.len());
                for (hash, r) in chunk {
                    expiries.push(r.expires_at);
                    hashes.push(hash.clone());
                    values.push(ClaimValue::restored(r).encode()?.to_vec());
                }
                let step = Step::new(
                    &self.sql.claims[stream].restore,
                    vec![boxed(expiries), boxed(hashes), boxed(values)],
                );
                pipeline(session, &[step]).await?;
            }
        }
        Ok(())
    }

    /// Raises (from 0: always applies, never lowers), then the ranges:
    /// an abandoned range adds to those recorded before; the replay range
    /// replaces the one before (none clears it). A partition left with no
    /// range keeps no row.
    pub(super) async fn reset_on(
        &self,
        session: &Session,
        resets: &[PartitionReset],
    ) -> Result<(), StoreError> {
        for r in resets {
            let key_id = spec(&self.streams, r.stream)?.key_id.clone();
            let topic = r.topic.0 as i32;
            let mut steps = Vec::new();
            if let Some(to) = r.raise_to {
                steps.push(Step::new(
                    &self.sql.raise,
                    vec![
                        boxed(key_id.clone()),
                        boxed(topic),
                        boxed(r.partition),
                        boxed(0i64),
                        boxed(to),
                    ],
                ));
            }
            steps.push(Step::new(
                &self.sql.ranges,
                vec![boxed(vec![key_id.clone()])],
            ));
            let answers = pipeline(session, &steps).await?;
            let before = self
                .parse_ranges(answers.last().cloned().unwrap_or_default())?
                .into_iter()
                .find(|p| p.topic == r.topic && p.partition == r.partition);
            let mut abandoned = before.map(|p| p.abandoned).unwrap_or_default();
            if let Some(range) = r.abandon {
                add_abandoned(&mut abandoned, range);
            }
            let write = if abandoned.is_empty() && r.replay.is_none() {
                Step::new(
                    &self.sql.delete_ranges,
                    vec![boxed(key_id), boxed(topic), boxed(r.partition)],
                )
            } else {
                let flat: Vec<i64> = abandoned.iter().flat_map(|&(a, b)| [a, b]).collect();
                Step::new(
                    &self.sql.write_ranges,
                    vec![
                        boxed(key_id),
                        boxed(topic),
                        boxed(r.partition),
                        boxed(flat),
                        boxed(r.replay.map(|(from, _)| from)),
                        boxed(r.replay.map(|(_, to)| to)),
                    ],
                )
            };
            pipeline(session, &[write]).await?;
        }
        Ok(())
    }
}
