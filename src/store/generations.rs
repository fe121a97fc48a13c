//! Tier-2 arithmetic shared by every backend: which Bloom generations are
//! live at a given time, which one a hash is written to, and how big each
//! one is (docs/design.md §5).
//!
//! Generation `e` covers epoch `floor(t / horizon) = e` and expires at
//! `(e + slots) * horizon + skew`. A reader checks every generation that can
//! still be alive; a writer writes the current one and, within `skew` of the
//! next boundary, the next one too, so a replica whose clock runs up to
//! `skew` apart never opens a hole at a rotation.

use std::ops::RangeInclusive;
use std::time::Duration;

use super::millis;
use crate::clock::Millis;
use crate::fingerprint::SourceHash;

/// How one stream's filter generations rotate and are sized.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationPlan {
    /// Length of one epoch: the window the filter must cover.
    pub horizon: Duration,
    /// Live generations; 2 or more so every key is covered for at least a
    /// full horizon wherever in the cycle it was written.
    pub slots: u32,
    /// Largest clock difference between replicas that rotations tolerate.
    pub skew: Duration,
    pub sizing: FilterSizing,
}

/// Bloom filter dimensions for one generation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilterSizing {
    /// Keys one generation holds at the configured false-positive rate:
    /// peak rate x horizon. A Bloom filter cannot grow in place, so inserts
    /// are counted against this and an alarm fires as they approach it.
    pub capacity: u64,
    pub fp_rate: f64,
    /// m = -n ln p / (ln 2)^2, rounded up.
    pub bits: u64,
    /// k = (m / n) ln 2, rounded, at least 1.
    pub hashes: u32,
}

impl FilterSizing {
    pub fn new(capacity: u64, fp_rate: f64) -> FilterSizing {
        let n = capacity.max(1) as f64;
        let ln2 = std::f64::consts::LN_2;
        let bits = (-n * fp_rate.ln() / (ln2 * ln2)).ceil().max(64.0);
        let hashes = ((bits / n) * ln2).round().max(1.0);
        FilterSizing {
            capacity: capacity.max(1),
            fp_rate,
            bits: bits as u64,
            hashes: hashes as u32,
        }
    }

    /// Sized from the expected peak rate over one horizon.
    pub fn for_rate(peak_per_second: u64, horizon: Duration, fp_rate: f64) -> FilterSizing {
        let capacity = peak_per_second.saturating_mul(horizon.as_secs().max(1));
        FilterSizing::new(capacity, fp_rate)
    }

    pub fn bits_per_key(&self) -> f64 {
        self.bits as f64 / self.capacity as f64
    }
}

/// Plain bitmaps are split into shards of at most this many bits (1 MiB
/// each), so a generation spreads over a cluster's nodes and no single
/// string grows past what Redis handles comfortably.
pub(crate) const SHARD_BITS: u64 = 1 << 23;

impl GenerationPlan {
    fn horizon_ms(&self) -> i64 {
        millis(self.horizon).max(1)
    }

    pub(crate) fn epoch(&self, at: Millis) -> i64 {
        at.div_euclid(self.horizon_ms())
    }

    /// Generations a reader at `at` must check.
    pub(crate) fn read_epochs(&self, at: Millis) -> RangeInclusive<i64> {
        let skew = millis(self.skew);
        let oldest = self.epoch(at.saturating_sub(skew)) - i64::from(self.slots) + 1;
        let newest = self.epoch(at.saturating_add(skew.saturating_mul(2)));
        oldest..=newest
    }

    /// Generations a writer at `at` adds a hash to: the current one, and the
    /// next one when the boundary is within `skew`.
    pub(crate) fn write_epochs(&self, at: Millis) -> Vec<i64> {
        let now = self.epoch(at);
        let ahead = self.epoch(at.saturating_add(millis(self.skew)));
        if ahead == now {
            vec![now]
        } else {
            vec![now, ahead]
        }
    }

    /// When generation `epoch` stops counting.
    pub(crate) fn expires_at(&self, epoch: i64) -> Millis {
        (epoch + i64::from(self.slots))
            .saturating_mul(self.horizon_ms())
            .saturating_add(millis(self.skew))
    }

    pub(crate) fn shards(&self) -> u64 {
        self.sizing.bits.div_ceil(SHARD_BITS).max(1)
    }

    fn shard_bits(&self) -> u64 {
        self.sizing.bits.div_ceil(self.shards())
    }

    /// Where a hash lives in a bitmap generation: its shard and its k bit
    /// offsets within that shard (double hashing over the source hash, which
    /// is already uniformly distributed).
    pub(crate) fn bit_positions(&self, hash: &SourceHash) -> (u64, Vec<u64>) {
        let word = |i: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&hash.0[i * 8..i * 8 + 8]);
            u64::from_be_bytes(bytes)
        };
        let shard = word(0) % self.shards();
        let width = self.shard_bits();
        let (h1, h2) = (word(1), word(2) | 1);
        let bits = (0..u64::from(self.sizing.hashes))
            .map(|i| h1.wrapping_add(i.wrapping_mul(h2)) % width)
            .collect();
        (shard, bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(horizon_s: u64, slots: u32, skew_s: u64) -> GenerationPlan {
        GenerationPlan {
            horizon: Duration::from_secs(horizon_s),
            slots,
            skew: Duration::from_secs(skew_s),
            sizing: FilterSizing::new(1000, 1e-3),
        }
    }

    #[test]
    fn one_in_a_thousand_costs_about_fourteen_point_four_bits_per_key() {
        let sizing = FilterSizing::new(1_000_000, 1e-3);
        assert!((sizing.bits_per_key() - 14.38).abs() < 0.01, "{sizing:?}");
        assert_eq!(sizing.hashes, 10);
    }

    #[test]
    fn a_generation_is_read_for_as_long_as_it_lives() {
        let plan = plan(3600, 2, 0);
        let written = 3599 * 1000; // last second of epoch 0
        assert_eq!(plan.write_epochs(written), vec![0]);
        let expiry = plan.expires_at(0);
        assert_eq!(expiry, 2 * 3600 * 1000);
        assert!(plan.read_epochs(expiry - 1).contains(&0));
        assert!(!plan.read_epochs(expiry).contains(&0));
    }

    #[test]
    fn every_key_is_covered_for_at_least_a_horizon() {
        let plan = plan(600, 2, 5);
        for written in (0..1_200_000).step_by(7_001) {
            for epoch in plan.write_epochs(written) {
                assert!(plan.expires_at(epoch) >= written + 600_000);
            }
            let later = written + 600_000 - 1;
            assert!(plan
                .write_epochs(written)
                .iter()
                .any(|e| plan.read_epochs(later).contains(e)));
        }
    }

    #[test]
    fn near_a_boundary_the_next_generation_is_written_too() {
        let plan = plan(600, 2, 5);
        assert_eq!(plan.write_epochs(597_000), vec![0, 1]);
        assert_eq!(plan.write_epochs(590_000), vec![0]);
    }

    #[test]
    fn bit_positions_stay_inside_the_shard() {
        let plan = GenerationPlan {
            sizing: FilterSizing::new(2_000_000, 1e-3),
            ..plan(600, 2, 5)
        };
        assert!(plan.shards() > 1);
        let hash = SourceHash([0xab; 32]);
        let (shard, bits) = plan.bit_positions(&hash);
        assert!(shard < plan.shards());
        assert_eq!(bits.len(), plan.sizing.hashes as usize);
        assert!(bits.iter().all(|b| *b < plan.shard_bits()));
    }
}
