//! Progress marks on PostgreSQL (docs/design.md §8.2, `store/marks.rs`):
//! one mark per stream, a row of `identities` beside the stream's identity
//! (`<key_id>/m`: a key id never holds a `/`), so a restored dump or a
//! promoted standby brings both back as they were, and no table is added
//! for an administrator to create. One place: the database answers for
//! every claim. The row is written once per commit and replica (the
//! pre-commit step), not per round, so sharing it serializes no claim.
//!
//! One statement compares the mark with the floor, bumps it, and below the
//! floor marks the identity gone back, as the Redis script does. A check
//! writes nothing else (the timed check runs it every few seconds).

use super::round::{boxed, pipeline};
use super::{PostgresStore, Session};
use crate::store::marks::Floors;
use crate::store::{spec, Check, Marked, StoreError, StreamId, StreamLost};

/// The row holding a stream's mark.
pub(super) fn row(key_id: &str) -> String {
    format!("{key_id}/m")
}

/// `$1` the mark's row, `$2` the floor, `$3` the mode (`1` bump, `0`
/// check, `r` raise to the floor), `$4` the identity's row: answers the
/// mark after the step; below the floor (bump or check) it is unchanged,
/// and the identity is prefixed with `back:` (`identity::WENT_BACK`).
pub(super) fn statement(identities: &str) -> String {
    // `cur` is the mark before the statement; `up` writes only a bump at
    // or above the floor, a raise above the mark, or a first row (a check
    // writes nothing unless it marks the identity).
    format!(
        "WITH cur AS (SELECT identity::bigint AS mark FROM {identities} WHERE stream = $1), \
         up AS (\
           INSERT INTO {identities} AS i (stream, identity) \
           SELECT $1, CASE WHEN $3::text = 'r' THEN $2::bigint::text \
                           WHEN $3::text = '1' AND $2::bigint <= 0 THEN '1' ELSE '0' END \
           WHERE $3::text <> '0' \
           ON CONFLICT (stream) DO UPDATE SET identity = CASE \
             WHEN $3::text = 'r' THEN $2::bigint::text \
             ELSE (i.identity::bigint + 1)::text END \
           WHERE ($3::text = 'r' AND i.identity::bigint < $2::bigint) \
              OR ($3::text = '1' AND i.identity::bigint >= $2::bigint) \
           RETURNING identity::bigint AS mark), \
         now AS (SELECT COALESCE((SELECT mark FROM up), (SELECT mark FROM cur), 0) AS mark), \
         back AS (\
           UPDATE {identities} SET identity = 'back:' || identity \
           WHERE stream = $4 AND identity NOT LIKE 'back:%' AND $3::text <> 'r' \
             AND (SELECT mark FROM now) < $2::bigint RETURNING 1) \
         SELECT mark FROM now"
    )
}

/// A PostgreSQL store's floors: one place a stream.
pub(super) fn floors(streams: usize) -> Floors {
    Floors::new(streams, 1)
}

#[derive(Clone, Copy)]
pub(super) enum Step<'a> {
    Bump,
    Check,
    Raise(&'a [u64]),
}

impl PostgresStore {
    pub(super) async fn marks_on(
        &self,
        session: &Session,
        stream: StreamId,
        step: Step<'_>,
    ) -> Result<Marked, StoreError> {
        let key_id = spec(&self.streams, stream)?.key_id.clone();
        let (floor, mode) = match step {
            Step::Bump => (self.floors.of(stream.0), "1"),
            Step::Check => (self.floors.of(stream.0), "0"),
            Step::Raise(marks) => (marks.to_vec(), "r"),
        };
        let floor = i64::try_from(floor.first().copied().unwrap_or(0)).unwrap_or(i64::MAX);
        let query = super::round::Step::new(
            &self.sql.progress,
            vec![
                boxed(row(&key_id)),
                boxed(floor),
                boxed(mode.to_string()),
                boxed(key_id),
            ],
        );
        let rows = pipeline(session, &[query]).await?;
        let mark: i64 = rows
            .first()
            .and_then(|rows| rows.first())
            .ok_or_else(|| StoreError::Protocol("progress mark unanswered".into()))?
            .try_get(0)
            .map_err(|e| super::connect::store_error("progress mark", e))?;
        if matches!(step, Step::Raise(_)) {
            return Ok(Marked::At(vec![mark.unsigned_abs()]));
        }
        if mark < floor {
            return Ok(Marked::Behind);
        }
        let marks = vec![mark.unsigned_abs()];
        self.floors.raise(stream.0, &marks);
        Ok(Marked::At(marks))
    }

    /// Before a round, where a floor rose or a round failed since the
    /// last: every adopted stream's mark, checked (one below marks the
    /// identity gone back, which the round then reads).
    pub(super) async fn recheck_on(&self, session: &Session) -> Result<(), StoreError> {
        if !self.floors.take_recheck() {
            return Ok(());
        }
        let mut streams: Vec<usize> = self.adopted().into_keys().collect();
        streams.sort_unstable();
        for stream in streams {
            if let Err(error) = self.marks_on(session, StreamId(stream), Step::Check).await {
                self.floors.ask_recheck();
                return Err(error);
            }
        }
        Ok(())
    }

    /// The timed check's marks: the adopted streams in `streams` not found
    /// lost already whose mark lies below the floor.
    pub(super) async fn behind_on(
        &self,
        session: &Session,
        streams: &[StreamId],
        lost: &mut Vec<StreamLost>,
    ) -> Result<(), StoreError> {
        let adopted = self.adopted();
        for &stream in streams {
            if !adopted.contains_key(&stream.0) || lost.iter().any(|l| l.stream == stream) {
                continue;
            }
            if self.marks_on(session, stream, Step::Check).await? == Marked::Behind {
                lost.push(StreamLost {
                    stream,
                    how: Check::Behind,
                });
            }
        }
        Ok(())
    }
}
