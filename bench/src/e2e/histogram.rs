//! Latency histogram: microseconds in buckets 1 % wide, so the passthrough
//! and the baseline can record every record's latency in O(1) and the
//! harness can read quantiles (the worker's runs read the worker's own
//! histogram instead, `scrape.rs`).

use serde::{Deserialize, Serialize};

/// Bucket `b` (b >= 1) holds values in `[GROWTH^(b-1), GROWTH^b)` µs;
/// bucket 0 holds 0.
const GROWTH: f64 = 1.01;
/// 1.01^2600 µs is far beyond any latency a run can see.
const BUCKETS: usize = 2600;

#[derive(Clone, Debug)]
pub(crate) struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max_us: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max_us: 0,
        }
    }
}

fn bucket(us: u64) -> usize {
    if us == 0 {
        return 0;
    }
    let b = ((us as f64).ln() / GROWTH.ln()).floor() as usize + 1;
    b.min(BUCKETS - 1)
}

fn lower_bound(b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        GROWTH.powi(b as i32 - 1)
    }
}

impl Histogram {
    pub fn record(&mut self, us: u64) {
        self.counts[bucket(us)] += 1;
        self.total += 1;
        self.max_us = self.max_us.max(us);
    }

    #[cfg(test)]
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max_us = self.max_us.max(other.max_us);
    }

    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value below which a fraction `q` of the samples lie, in µs (the
    /// middle of its bucket, so within 0.5 %).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let middle = (lower_bound(b) + lower_bound(b + 1)) / 2.0;
                return Some(middle.min(self.max_us as f64));
            }
        }
        Some(self.max_us as f64)
    }
}

/// On the wire between a replica and the harness: only the buckets in use.
#[derive(Serialize, Deserialize)]
struct Sparse {
    buckets: Vec<(usize, u64)>,
    max_us: u64,
}

impl Serialize for Histogram {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Sparse {
            buckets: self
                .counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(b, c)| (b, *c))
                .collect(),
            max_us: self.max_us,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Histogram {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Histogram, D::Error> {
        let sparse = Sparse::deserialize(deserializer)?;
        let mut histogram = Histogram::default();
        for (b, count) in sparse.buckets {
            if let Some(slot) = histogram.counts.get_mut(b) {
                *slot += count;
                histogram.total += count;
            }
        }
        histogram.max_us = sparse.max_us;
        Ok(histogram)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_percent_and_survive_a_round_trip() {
        let mut histogram = Histogram::default();
        for us in 1..=10_000 {
            histogram.record(us);
        }
        let p50 = histogram.quantile(0.5).unwrap();
        let p99 = histogram.quantile(0.99).unwrap();
        assert!((p50 - 5_000.0).abs() < 60.0, "{p50}");
        assert!((p99 - 9_900.0).abs() < 110.0, "{p99}");
        let text = serde_json::to_string(&histogram).unwrap();
        let back: Histogram = serde_json::from_str(&text).unwrap();
        assert_eq!(back.count(), 10_000);
        assert_eq!(back.quantile(0.99), histogram.quantile(0.99));
    }

    #[test]
    fn merged_replicas_count_every_sample() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        a.record(100);
        b.record(200);
        b.record(0);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert!((a.quantile(1.0).unwrap() - 200.0).abs() < 2.0);
    }
}
