//! What a commit costs when its finished runs above the committed offset do
//! not fit in its metadata (docs/design.md §7): the metadata's bytes, the
//! record's bytes, and the store writes the commit waits for, timed on each
//! backend. A partition builds such runs only where records wait on a
//! holder while later ones finish; in steady state every commit's runs fit
//! inline and the mechanism costs nothing.
//!
//! The runs are the worst shape for their count: one finished record, then
//! one waiting, repeated (a waiting copy between every two malformed
//! records, as the overflow tests build them), high in a partition whose
//! offsets have nine digits.

use std::time::Instant;

use anyhow::{ensure, Context};
use idemgate::store::{ClaimStore, OwnerToken, StreamId};

/// Finished runs above the committed offset, per figure.
pub const RUN_COUNTS: [usize; 4] = [100, 1_000, 5_000, 50_000];

/// One count of runs on one backend.
#[derive(Clone, Debug)]
pub struct Row {
    pub backend: String,
    pub runs: usize,
    pub metadata_bytes: usize,
    /// None where the runs fit inline (no store write).
    pub record_bytes: Option<usize>,
    /// Median microseconds of each store call, over `repeats` commits:
    /// the put the commit waits for, the refresh a commit of unchanged
    /// runs waits for instead, the assignment's read, and the delete once
    /// a later commit is known committed (off the commit's path).
    pub put_us: Option<f64>,
    pub refresh_us: Option<f64>,
    pub get_us: Option<f64>,
    pub delete_us: Option<f64>,
}

fn runs(count: usize) -> Vec<(i64, i64)> {
    let base = 123_456_789i64;
    (0..count as i64)
        .map(|i| (base + 2 * i + 1, base + 2 * i + 2))
        .collect()
}

fn median(mut samples: Vec<f64>) -> Option<f64> {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied()
}

/// Every count of runs, `repeats` commits each, on `store`.
pub async fn measure(
    backend: &str,
    store: &dyn ClaimStore,
    stream: StreamId,
    repeats: usize,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for count in RUN_COUNTS {
        let runs = runs(count);
        let mut row = Row {
            backend: backend.to_string(),
            runs: count,
            metadata_bytes: 0,
            record_bytes: None,
            put_us: None,
            refresh_us: None,
            get_us: None,
            delete_us: None,
        };
        let (mut put, mut refresh, mut get, mut delete) = (vec![], vec![], vec![], vec![]);
        for i in 0..repeats {
            // A writer token and sequence of this run's own per commit.
            let token = OwnerToken::new(0x00be_0000 | i as u32, 1);
            let (text, write) = idemgate::worker::commit_cost(
                "bench",
                stream,
                token,
                ("bench-runs.raw", 0, 123_456_789),
                &runs,
            );
            row.metadata_bytes = text.len();
            let Some((name, content)) = write else {
                continue;
            };
            row.record_bytes = Some(content.len());
            let at = crate::claims::throughput::now_ms();
            let t = Instant::now();
            store.put_runs(&name, &content, at).await.context("put")?;
            put.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            let kept = store.refresh_runs(&name, at).await.context("refresh")?;
            refresh.push(t.elapsed().as_secs_f64() * 1e6);
            ensure!(kept, "the record just put was not there to refresh");
            let t = Instant::now();
            let read = store.get_runs(&name, at).await.context("get")?;
            get.push(t.elapsed().as_secs_f64() * 1e6);
            ensure!(read.as_deref() == Some(&content[..]), "read back differs");
            let t = Instant::now();
            store.delete_runs(&[name]).await.context("delete")?;
            delete.push(t.elapsed().as_secs_f64() * 1e6);
            ensure!(
                store.get_runs(&name, at).await?.is_none(),
                "deleted, yet read back"
            );
        }
        row.put_us = median(put);
        row.refresh_us = median(refresh);
        row.get_us = median(get);
        row.delete_us = median(delete);
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_alternates_finished_and_waiting_records() {
        let r = runs(3);
        assert_eq!(r.len(), 3);
        assert!(r.iter().all(|(from, to)| to - from == 1));
        assert!(r.windows(2).all(|w| w[1].0 - w[0].1 == 1));
    }
}
