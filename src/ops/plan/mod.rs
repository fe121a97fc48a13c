//! What a stream costs before it runs: tier-1 keys and their bytes in
//! Redis (or, exact, on PostgreSQL's disk), tier-2 generations, exact and
//! tiered side by side. Pure arithmetic over plain numbers; `text`
//! writes it out.

pub mod text;

use std::time::Duration;

use crate::config::{StoreConfig, StreamConfig};
use crate::store::{FilterSizing, Mode};

/// Bytes one live tier-1 claim costs in Redis as a field of a grouped hash
/// (docs/design.md §4.1), the layout of a stream first started by this
/// version: 58, measured, not computed.
///
/// From `idemgate-bench claims` ("tier 1 live, grouped"): growth of
/// redis-server 7.0's `used_memory` over the claims still within their
/// TTL, an exact stream written at a steady 5,000 claims/s for two
/// 30-second TTLs, the expired fields no sweep has reached yet and the
/// hashes' own bytes included.
pub const TIER1_BYTES_PER_CLAIM: u64 = 58;

/// Bytes one tier-1 key costs in Redis (a stream that writes its claims
/// as keys): 163, measured, not computed.
///
/// From `BENCHMARKS.md`, "tier-1 bytes per key" of the latest bench run
/// (`scripts/bench.sh`): growth of redis-server 7.0's `used_memory` per
/// claim in exact mode, with the 28-byte value of docs/design.md §4.1, the
/// 25-byte key under the default prefix `ig:`, the expiry entry and the
/// hash tables' share. A prefix longer than 6 bytes costs a size class more;
/// another value layout or Redis version needs a new run.
pub const TIER1_BYTES_PER_KEY: u64 = 163;

/// Bytes one claim costs on PostgreSQL's disk in steady state: 182,
/// measured, not computed.
///
/// From `BENCHMARKS-claims.md`, "PostgreSQL: bytes per claim over
/// generations" (`idemgate-bench claims --only postgres`): the claims table
/// with its indexes over its live rows once claims expire as they come,
/// every claim settled by a done flag (a row rewritten) and autovacuum at
/// PostgreSQL 15's defaults, the most a claim costs there; claims settled
/// by the watermark alone cost 155, and a first generation 137
/// (docs/design.md §6.1). A vacuum that lags costs more.
pub const POSTGRES_BYTES_PER_CLAIM: u64 = 182;

/// What a plan is computed from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanInput {
    /// Distinct events per second at peak.
    pub rate: u64,
    /// How long a hash must be remembered: the whole TTL in exact mode, the
    /// filter's horizon in tiered mode.
    pub horizon: Duration,
    /// Tiered: how long a hash stays an exact key. `None` plans exact only.
    pub tier1_ttl: Option<Duration>,
    /// Tiered: false-positive rate of one generation.
    pub fp_rate: f64,
    /// Tiered: live generations.
    pub slots: u32,
}

/// Which figures a plan holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanMode {
    Exact,
    Tiered,
    /// Both, side by side; exact only where no tier-1 TTL is given (the
    /// text says how to get the tiered figures).
    Both,
}

/// Every hash an exact key for the whole horizon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExactPlan {
    pub keys: u64,
    /// In Redis's memory.
    pub bytes: u64,
    /// Or on PostgreSQL's disk (`store.kind = "postgres"`, exact only).
    pub disk_bytes: u64,
}

/// Exact keys for the tier-1 TTL, Bloom generations for the horizon.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TieredPlan {
    pub tier1_keys: u64,
    pub tier1_bytes: u64,
    /// -ln(p) / ln(2)^2: 14.38 at 1e-3.
    pub bits_per_key: f64,
    /// One generation, as the store sizes it: rate x horizon keys.
    pub generation: FilterSizing,
    pub generation_bytes: u64,
    pub slots: u32,
    /// `slots` generations.
    pub filter_bytes: u64,
    /// Tier 1 and tier 2 together.
    pub total_bytes: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub input: PlanInput,
    pub exact: Option<ExactPlan>,
    pub tiered: Option<TieredPlan>,
    /// Both were asked for without a tier-1 TTL: the tiered figures are
    /// left out, and the text says what they need.
    pub tiered_needs_tier1: bool,
}

/// Where a configured stream's claims live: what its plan leads with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimsIn {
    /// In the replica's memory (`store.kind = "memory"`).
    Memory,
    /// In Redis's memory (a server or a cluster).
    Redis,
    /// On PostgreSQL's disk (exact streams only).
    Postgres,
}

impl ClaimsIn {
    pub fn of(store: &StoreConfig) -> ClaimsIn {
        match store {
            StoreConfig::Memory { .. } => ClaimsIn::Memory,
            StoreConfig::Redis(_) => ClaimsIn::Redis,
            StoreConfig::Postgres(_) => ClaimsIn::Postgres,
        }
    }
}

/// Where a stream's rate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateSource {
    /// The stream's `peak_rate` (always there for a tiered stream).
    PeakRate,
    /// `--rate`, for an exact stream without a `peak_rate`.
    Given,
    /// Neither: the figures are per event/s (a rate of 1).
    PerEventPerSecond,
}

/// One configured stream's plan and the TTLs it derives from.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamPlan {
    pub name: String,
    pub mode: Mode,
    pub tier1_ttl: Duration,
    /// The filter's horizon (tiered); the tier-1 TTL in exact mode.
    pub horizon: Duration,
    pub rate: RateSource,
    pub claims_in: ClaimsIn,
    pub plan: Plan,
}

/// A plan that cannot be made; names the flag.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    #[error("--{flag}: {reason}")]
    Invalid { flag: &'static str, reason: String },
}

fn invalid(flag: &'static str, reason: impl Into<String>) -> PlanError {
    PlanError::Invalid {
        flag,
        reason: reason.into(),
    }
}

/// -ln(p) / ln(2)^2: the bits a Bloom filter spends per key at
/// false-positive rate `p`, with the best number of hashes.
pub fn bits_per_key(fp_rate: f64) -> f64 {
    let ln2 = std::f64::consts::LN_2;
    -fp_rate.ln() / (ln2 * ln2)
}

fn keys(rate: u64, span: Duration, flag: &'static str) -> Result<u64, PlanError> {
    rate.checked_mul(span.as_secs())
        .ok_or_else(|| invalid(flag, "rate x duration overflows"))
}

fn bytes(keys: u64, flag: &'static str) -> Result<u64, PlanError> {
    bytes_at(keys, TIER1_BYTES_PER_CLAIM, flag)
}

fn bytes_at(keys: u64, each: u64, flag: &'static str) -> Result<u64, PlanError> {
    keys.checked_mul(each)
        .ok_or_else(|| invalid(flag, "too many keys to count their bytes"))
}

/// The plan for `input`, with the figures `mode` asks for. Refuses what
/// the config would refuse (a zero rate or horizon, `fp_rate` outside
/// (0, 0.5), fewer than 2 slots, a tier-1 TTL not shorter than the horizon).
pub fn plan(input: PlanInput, mode: PlanMode) -> Result<Plan, PlanError> {
    if input.rate == 0 {
        return Err(invalid("rate", "must be above zero"));
    }
    if input.horizon.as_secs() == 0 {
        return Err(invalid("horizon", "must be at least 1s"));
    }
    let tiered_needs_tier1 = mode == PlanMode::Both && input.tier1_ttl.is_none();
    let exact = match mode {
        PlanMode::Tiered => None,
        PlanMode::Exact | PlanMode::Both => {
            let keys = keys(input.rate, input.horizon, "horizon")?;
            Some(ExactPlan {
                keys,
                bytes: bytes(keys, "horizon")?,
                disk_bytes: bytes_at(keys, POSTGRES_BYTES_PER_CLAIM, "horizon")?,
            })
        }
    };
    let tiered = match mode {
        PlanMode::Exact => None,
        PlanMode::Both if tiered_needs_tier1 => None,
        PlanMode::Tiered | PlanMode::Both => Some(tiered(input)?),
    };
    Ok(Plan {
        input,
        exact,
        tiered,
        tiered_needs_tier1,
    })
}

fn tiered(input: PlanInput) -> Result<TieredPlan, PlanError> {
    let tier1 = input.tier1_ttl.ok_or_else(|| {
        invalid(
            "tier1-ttl",
            "needed for a tiered plan (or plan --mode exact)",
        )
    })?;
    if tier1.as_secs() == 0 {
        return Err(invalid("tier1-ttl", "must be at least 1s"));
    }
    if tier1 >= input.horizon {
        return Err(invalid(
            "tier1-ttl",
            "must be shorter than the horizon (or the stream is exact)",
        ));
    }
    if !(input.fp_rate > 0.0 && input.fp_rate < 0.5) {
        return Err(invalid("fp-rate", "must be above 0 and below 0.5"));
    }
    if input.slots < 2 {
        return Err(invalid(
            "slots",
            "at least 2, or a key written just before a rotation is forgotten just after it",
        ));
    }
    let tier1_keys = keys(input.rate, tier1, "tier1-ttl")?;
    let tier1_bytes = bytes(tier1_keys, "tier1-ttl")?;
    // Checked first: the store's sizing saturates instead.
    keys(input.rate, input.horizon, "horizon")?;
    let generation = FilterSizing::for_rate(input.rate, input.horizon, input.fp_rate);
    let generation_bytes = generation.bits.div_ceil(8);
    let filter_bytes = generation_bytes
        .checked_mul(u64::from(input.slots))
        .ok_or_else(|| invalid("slots", "too many generations to count their bytes"))?;
    Ok(TieredPlan {
        tier1_keys,
        tier1_bytes,
        bits_per_key: bits_per_key(input.fp_rate),
        generation,
        generation_bytes,
        slots: input.slots,
        filter_bytes,
        total_bytes: tier1_bytes.saturating_add(filter_bytes),
    })
}

/// A configured stream's plan, its claims in `claims_in`: a tiered stream
/// at its `peak_rate` (exact and tiered, or what `mode` asks for), an
/// exact stream at its `peak_rate`, else at `rate` if given, else per
/// event/s. The config has been validated, so only an overflow can fail.
pub fn for_stream(
    stream: &StreamConfig,
    claims_in: ClaimsIn,
    rate: Option<u64>,
    mode: PlanMode,
) -> Result<StreamPlan, PlanError> {
    let spec = &stream.spec;
    let (input, source, mode) = match (&spec.filter, stream.peak_rate) {
        (Some(filter), Some(peak)) => (
            PlanInput {
                rate: peak,
                horizon: filter.horizon,
                tier1_ttl: Some(spec.tier1_ttl),
                fp_rate: filter.sizing.fp_rate,
                slots: filter.slots,
            },
            RateSource::PeakRate,
            mode,
        ),
        (_, peak) => (
            PlanInput {
                rate: peak.or(rate).unwrap_or(1),
                horizon: spec.tier1_ttl,
                tier1_ttl: None,
                fp_rate: 0.0,
                slots: 0,
            },
            match (peak, rate) {
                (Some(_), _) => RateSource::PeakRate,
                (None, Some(_)) => RateSource::Given,
                (None, None) => RateSource::PerEventPerSecond,
            },
            PlanMode::Exact,
        ),
    };
    Ok(StreamPlan {
        name: spec.name.clone(),
        mode: spec.mode,
        tier1_ttl: spec.tier1_ttl,
        horizon: input.horizon,
        rate: source,
        claims_in,
        plan: plan(input, mode)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3600;

    fn scenario() -> PlanInput {
        PlanInput {
            rate: 40_000,
            horizon: Duration::from_secs(12 * HOUR),
            tier1_ttl: Some(Duration::from_secs(2 * HOUR)),
            fp_rate: 0.001,
            slots: 2,
        }
    }

    #[test]
    fn exact_keeps_forty_thousand_a_second_for_twelve_hours_in_100_gb() {
        let exact = plan(scenario(), PlanMode::Both).unwrap().exact.unwrap();
        assert_eq!(exact.keys, 40_000 * 43_200);
        assert_eq!(exact.keys, 1_728_000_000);
        assert_eq!(exact.bytes, 1_728_000_000 * 58);
        assert_eq!(exact.bytes, 100_224_000_000);
        assert_eq!(exact.disk_bytes, 1_728_000_000 * 182);
    }

    #[test]
    fn seven_years_of_a_ten_a_second_bank_feed_is_402_gb_on_postgres_disk() {
        // `ttl --retention-years 7`: 7 x 365.25 days.
        let input = PlanInput {
            rate: 10,
            horizon: Duration::from_secs(220_903_200),
            tier1_ttl: None,
            fp_rate: 0.0,
            slots: 0,
        };
        let exact = plan(input, PlanMode::Exact).unwrap().exact.unwrap();
        assert_eq!(exact.keys, 2_209_032_000);
        assert_eq!(exact.disk_bytes, 402_043_824_000);
        assert_eq!(exact.bytes, 128_123_856_000);
    }

    #[test]
    fn tiered_keeps_two_hours_of_keys_and_two_generations_of_three_gb() {
        let tiered = plan(scenario(), PlanMode::Both).unwrap().tiered.unwrap();
        assert_eq!(tiered.tier1_keys, 288_000_000);
        assert_eq!(tiered.tier1_bytes, 16_704_000_000);
        assert!(
            (tiered.bits_per_key - 14.3775).abs() < 1e-4,
            "{}",
            tiered.bits_per_key
        );
        assert_eq!(tiered.generation.capacity, 1_728_000_000);
        // 1.728e9 x 14.3775 bits = 24.84e9 bits = 3.106 GB.
        let generation_gb = tiered.generation_bytes as f64 / 1e9;
        assert!((generation_gb - 3.106).abs() < 0.001, "{generation_gb}");
        assert_eq!(tiered.slots, 2);
        assert_eq!(tiered.filter_bytes, 2 * tiered.generation_bytes);
        assert_eq!(tiered.total_bytes, tiered.tier1_bytes + tiered.filter_bytes);
    }

    #[test]
    fn a_configured_stream_is_planned_at_its_peak_rate_or_per_event_per_second() {
        let text = include_str!("../../../config/example.toml");
        let config = crate::config::Config::parse_with_vars(text, |name| {
            (name == "IDEMGATE_KAFKA_BROKERS").then(|| "b:9092".to_string())
        })
        .unwrap();
        let stream = |name: &str| config.streams.iter().find(|s| s.spec.name == name).unwrap();
        // docs/design.md §5: 5,000/s over 24 h.
        let on = ClaimsIn::Redis;
        let telemetry = for_stream(stream("telemetry"), on, Some(7), PlanMode::Both).unwrap();
        assert_eq!(telemetry.rate, RateSource::PeakRate);
        let tiered = telemetry.plan.tiered.unwrap();
        assert_eq!(tiered.generation.capacity, 432_000_000);
        assert_eq!(tiered.generation.bits, 6_211_117_829);
        assert!(telemetry.plan.exact.is_some());

        let bank = stream("bank");
        let per_event = for_stream(bank, on, None, PlanMode::Both).unwrap();
        assert_eq!(per_event.rate, RateSource::PerEventPerSecond);
        assert!(per_event.plan.tiered.is_none());
        let seconds = bank.spec.tier1_ttl.as_secs();
        assert_eq!(per_event.plan.exact.unwrap().keys, seconds);
        let given = for_stream(bank, on, Some(200), PlanMode::Both).unwrap();
        assert_eq!(given.rate, RateSource::Given);
        assert_eq!(given.plan.exact.unwrap().keys, 200 * seconds);
        // An exact stream's own peak_rate wins over --rate, as a tiered one's.
        let rated = StreamConfig {
            peak_rate: Some(10),
            ..bank.clone()
        };
        let own = for_stream(&rated, ClaimsIn::Postgres, Some(200), PlanMode::Both).unwrap();
        assert_eq!(own.rate, RateSource::PeakRate);
        assert_eq!(own.claims_in, ClaimsIn::Postgres);
        assert_eq!(own.plan.exact.unwrap().keys, 10 * seconds);
    }

    #[test]
    fn both_without_a_tier1_ttl_plans_exact_and_says_what_tiered_needs() {
        let untiered = PlanInput {
            tier1_ttl: None,
            ..scenario()
        };
        let both = plan(untiered, PlanMode::Both).unwrap();
        assert!(both.exact.is_some() && both.tiered.is_none());
        assert!(both.tiered_needs_tier1);
        let exact = plan(untiered, PlanMode::Exact).unwrap();
        assert!(!exact.tiered_needs_tier1, "exact was asked for alone");
        assert!(!plan(scenario(), PlanMode::Both).unwrap().tiered_needs_tier1);
    }

    #[test]
    fn a_mode_leaves_the_other_figures_out() {
        assert!(plan(scenario(), PlanMode::Exact).unwrap().tiered.is_none());
        assert!(plan(scenario(), PlanMode::Tiered).unwrap().exact.is_none());
    }

    #[test]
    fn bits_per_key_follow_the_false_positive_rate() {
        assert!((bits_per_key(0.01) - 9.585).abs() < 1e-3);
        assert!((bits_per_key(0.0001) - 19.170).abs() < 1e-3);
    }

    #[test]
    fn what_the_config_would_refuse_is_refused_naming_the_flag() {
        let refused = |input: PlanInput, mode: PlanMode| match plan(input, mode) {
            Err(PlanError::Invalid { flag, .. }) => flag,
            Ok(plan) => panic!("accepted: {plan:?}"),
        };
        let base = scenario();
        assert_eq!(
            refused(PlanInput { rate: 0, ..base }, PlanMode::Exact),
            "rate"
        );
        let long_tier1 = PlanInput {
            tier1_ttl: Some(base.horizon),
            ..base
        };
        assert_eq!(refused(long_tier1, PlanMode::Both), "tier1-ttl");
        let no_tier1 = PlanInput {
            tier1_ttl: None,
            ..base
        };
        assert_eq!(refused(no_tier1, PlanMode::Tiered), "tier1-ttl");
        assert!(plan(no_tier1, PlanMode::Exact).is_ok());
        let one_slot = PlanInput { slots: 1, ..base };
        assert_eq!(refused(one_slot, PlanMode::Tiered), "slots");
        let bad_fp = PlanInput {
            fp_rate: 0.5,
            ..base
        };
        assert_eq!(refused(bad_fp, PlanMode::Tiered), "fp-rate");
        let huge = PlanInput {
            rate: u64::MAX,
            ..base
        };
        assert_eq!(refused(huge, PlanMode::Exact), "horizon");
    }
}
