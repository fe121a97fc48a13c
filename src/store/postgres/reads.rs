//! What a round reads beside its claims, from rows into the contract's
//! types: watermarks, reset ranges, and the streams whose identity the
//! store no longer holds (docs/design.md §8.2).

use std::collections::HashMap;

use tokio_postgres::Row;

use super::connect::store_error;
use super::PostgresStore;
use crate::coordinates::TopicTag;
use crate::store::{
    lost_among, Check, IdentityFound, PartitionRanges, StoreError, StoreIdentity, StreamId,
    StreamLost, Watermark,
};

impl PostgresStore {
    pub(super) fn parse_marks(&self, rows: Vec<Row>) -> Result<Vec<Watermark>, StoreError> {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let parse = || -> Result<_, tokio_postgres::Error> {
                Ok((
                    row.try_get::<_, String>(0)?,
                    row.try_get::<_, i32>(1)?,
                    row.try_get::<_, i32>(2)?,
                    row.try_get::<_, i64>(3)?,
                ))
            };
            let (key_id, topic, partition, below) =
                parse().map_err(|e| store_error("watermarks", e))?;
            if let Some(stream) = self.stream_of(&key_id) {
                out.push(Watermark {
                    stream,
                    topic: TopicTag(topic as u32),
                    partition,
                    below,
                });
            }
        }
        out.sort_by_key(|w| (w.stream, w.topic, w.partition));
        Ok(out)
    }

    pub(super) fn parse_ranges(&self, rows: Vec<Row>) -> Result<Vec<PartitionRanges>, StoreError> {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let parse = || -> Result<_, tokio_postgres::Error> {
                Ok((
                    row.try_get::<_, String>(0)?,
                    row.try_get::<_, i32>(1)?,
                    row.try_get::<_, i32>(2)?,
                    row.try_get::<_, Vec<i64>>(3)?,
                    row.try_get::<_, Option<i64>>(4)?,
                    row.try_get::<_, Option<i64>>(5)?,
                ))
            };
            let (key_id, topic, partition, flat, from, to) =
                parse().map_err(|e| store_error("reset ranges", e))?;
            let Some(stream) = self.stream_of(&key_id) else {
                continue;
            };
            out.push(PartitionRanges {
                stream,
                topic: TopicTag(topic as u32),
                partition,
                abandoned: flat.chunks_exact(2).map(|p| (p[0], p[1])).collect(),
                replay: from.zip(to),
            });
        }
        out.sort_by_key(|r| (r.stream, r.topic, r.partition));
        Ok(out)
    }

    /// The streams whose adopted identity the table no longer holds, and,
    /// where `floors` are given (a round's read, whose rows hold each
    /// stream's progress mark too), those whose mark lies below its floor.
    /// The floors are those taken before the read was sent: one raised
    /// while it was on its way (the timer, another commit's bump) may lie
    /// above what a live store answered then.
    pub(super) fn lost(
        &self,
        rows: Vec<Row>,
        checked: &[usize],
        adopted: &HashMap<usize, StoreIdentity>,
        floors: Option<&[u64]>,
    ) -> Result<Vec<StreamLost>, StoreError> {
        let mut held: HashMap<String, String> = HashMap::new();
        for row in rows {
            let pair = (row.try_get(0), row.try_get(1));
            let (Ok(key_id), Ok(identity)) = pair else {
                return Err(StoreError::Protocol("identity row".into()));
            };
            held.insert(key_id, identity);
        }
        let marks: Vec<Option<String>> = checked
            .iter()
            .map(|&stream| held.remove(&super::marks::row(&self.streams[stream].key_id)))
            .collect();
        let found = checked.iter().map(|&stream| {
            let found = held.remove(&self.streams[stream].key_id);
            let places = vec![found.map(String::into_bytes)];
            (StreamId(stream), IdentityFound { places })
        });
        let mut lost = lost_among(adopted, found);
        // Where the read holds marks (a round's read): one below the floor
        // is a store that came back older. The next round's check marks
        // the identity gone back, for the other replicas.
        let Some(floors) = floors else {
            return Ok(lost);
        };
        for ((&stream, mark), &floor) in checked.iter().zip(marks).zip(floors) {
            let below = match mark {
                Some(mark) => mark.parse::<u64>().map_or(true, |m| m < floor),
                None => floor > 0,
            };
            if below && lost.iter().all(|l| l.stream.0 != stream) {
                lost.push(StreamLost {
                    stream: StreamId(stream),
                    how: Check::Behind,
                });
                self.floors.ask_recheck();
            }
        }
        Ok(lost)
    }
}
