//! TTL policies: the evidence a stream's claim TTL is derived from
//! (docs/design.md §9).
//!
//! A claim that expires before the sender's last retry lets that retry
//! through as a new record, silently and hours after any test has finished.
//! So a TTL is never a round number picked for memory: it is written down as
//! the evidence it comes from, and the arithmetic lives here, in one place.
//!
//! In TOML each policy is a table whose keys say which one it is:
//!
//! ```toml
//! ttl = { explicit = "12h" }
//! ttl = { retention_years = 7 }
//! ttl = { p99 = "40m", retry_ladder = ["1m", "5m", "30m"], fallback = "2h", margin = 0.25 }
//! ttl = { horizon = "9h20m", outage = "2h" }
//! ```
//!
//! Unknown keys, keys of two policies in one table, and missing keys are
//! refused when the config is read; the values themselves (a zero result, a
//! negative margin) are checked by [`TtlPolicy::ttl`].

use std::time::Duration;

use serde::Deserialize;

use super::serde_duration;

/// Seconds in a Julian year of 365.25 days, the year retention rules count in:
/// 365.25 x 86,400 = 31,557,600.
pub(super) const SECONDS_PER_YEAR: u64 = 31_557_600;

/// The job margin is honoured to this many parts (nine decimal places), so
/// that a margin written as `0.15` means exactly 15 % and not the binary
/// float just below it, which would round a whole-second result down by one.
const MARGIN_PARTS: u128 = 1_000_000_000;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Where a stream's claim TTL comes from.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "RawTtlPolicy")]
pub enum TtlPolicy {
    /// A duration decided elsewhere and written down, e.g. a contractual
    /// replay window.
    Explicit(Duration),
    /// Claims kept as long as the records must be kept, counted in years of
    /// 365.25 days, whole seconds.
    Retention { years: u32 },
    /// A retried job: its key must outlive the slowest run (p99), every rung
    /// of the retry ladder and the fallback replay window, plus a safety
    /// margin (0.25 = 25 %), rounded down to whole seconds.
    Job {
        p99: Duration,
        retry_ladder: Vec<Duration>,
        fallback: Duration,
        margin: f64,
    },
    /// A sender's retry horizon measured from a recorded topic (see
    /// [`measure_horizon`](super::measure_horizon)) plus how long the store
    /// or the pipeline may be down while the sender keeps retrying.
    Horizon { horizon: Duration, outage: Duration },
}

/// Why a policy yields no usable TTL.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TtlError {
    #[error(
        "{policy} ttl is zero: every claim would expire at once and let every redelivery through"
    )]
    Zero { policy: &'static str },
    #[error("job margin {margin} must be a finite number >= 0")]
    InvalidMargin { margin: f64 },
    #[error("{policy} ttl overflows the largest representable duration")]
    Overflow { policy: &'static str },
}

impl TtlPolicy {
    /// The TTL this evidence requires. Refuses a zero TTL, a negative or
    /// non-finite job margin, and a result too large for a `Duration`.
    pub fn ttl(&self) -> Result<Duration, TtlError> {
        let policy = self.kind();
        let overflow = TtlError::Overflow { policy };
        let ttl = match self {
            TtlPolicy::Explicit(ttl) => *ttl,
            TtlPolicy::Retention { years } => {
                // u32::MAX years is about 1.4e17 s, far below u64::MAX.
                Duration::from_secs(u64::from(*years) * SECONDS_PER_YEAR)
            }
            TtlPolicy::Job {
                p99,
                retry_ladder,
                fallback,
                margin,
            } => {
                let total = retry_ladder
                    .iter()
                    .try_fold(p99.checked_add(*fallback), |sum, rung| {
                        sum.map(|sum| sum.checked_add(*rung))
                    })
                    .flatten()
                    .ok_or(overflow.clone())?;
                with_margin(total, *margin)?.ok_or(overflow)?
            }
            TtlPolicy::Horizon { horizon, outage } => {
                horizon.checked_add(*outage).ok_or(overflow)?
            }
        };
        if ttl.is_zero() {
            return Err(TtlError::Zero { policy });
        }
        Ok(ttl)
    }

    /// The policy's name as the config and error messages spell it.
    fn kind(&self) -> &'static str {
        match self {
            TtlPolicy::Explicit(_) => "explicit",
            TtlPolicy::Retention { .. } => "retention",
            TtlPolicy::Job { .. } => "job",
            TtlPolicy::Horizon { .. } => "horizon",
        }
    }
}

/// `total * (1 + margin)` rounded down to whole seconds, in integers so that
/// a decimal margin gives the decimal answer; `Ok(None)` on overflow.
fn with_margin(total: Duration, margin: f64) -> Result<Option<Duration>, TtlError> {
    if !margin.is_finite() || margin < 0.0 {
        return Err(TtlError::InvalidMargin { margin });
    }
    // Rounding to the nearest part snaps 0.15 (stored as 0.1499999...) back
    // to 150,000,000 parts. Margins beyond u128 parts overflow any non-zero
    // total, and `as` on a value checked to be in range does not truncate.
    let parts = (margin * MARGIN_PARTS as f64).round();
    if parts >= u128::MAX as f64 {
        return Ok(if total.is_zero() {
            Some(Duration::ZERO)
        } else {
            None
        });
    }
    let factor = MARGIN_PARTS.checked_add(parts as u128);
    let secs = factor
        .and_then(|factor| total.as_nanos().checked_mul(factor))
        .map(|scaled| scaled / (MARGIN_PARTS * NANOS_PER_SEC))
        .and_then(|secs| u64::try_from(secs).ok());
    Ok(secs.map(Duration::from_secs))
}

/// The config shape of a [`TtlPolicy`]: every key of every policy, optional,
/// so that a table can be told apart by its keys and a mistake can be named
/// precisely ("job ttl is missing `fallback`") instead of serde's "data did
/// not match any variant".
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTtlPolicy {
    #[serde(default, with = "super::serde_duration_opt")]
    explicit: Option<Duration>,
    #[serde(default)]
    retention_years: Option<u32>,
    #[serde(default, with = "super::serde_duration_opt")]
    p99: Option<Duration>,
    #[serde(default)]
    retry_ladder: Option<Vec<Rung>>,
    #[serde(default, with = "super::serde_duration_opt")]
    fallback: Option<Duration>,
    #[serde(default)]
    margin: Option<f64>,
    #[serde(default, with = "super::serde_duration_opt")]
    horizon: Option<Duration>,
    #[serde(default, with = "super::serde_duration_opt")]
    outage: Option<Duration>,
}

/// One retry delay, so a ladder can be a list of duration strings.
#[derive(Deserialize)]
#[serde(transparent)]
struct Rung(#[serde(with = "serde_duration")] Duration);

/// A policy table that names no policy, several, or one with keys missing.
#[derive(Debug, thiserror::Error)]
enum ShapeError {
    #[error("ttl policy names no evidence: give `explicit`, `retention_years`, `p99` with `retry_ladder`, `fallback` and `margin`, or `horizon` with `outage`")]
    Empty,
    #[error("ttl policy mixes the {0} policies: give the keys of exactly one")]
    Mixed(String),
    #[error("{policy} ttl is missing `{key}`")]
    Missing {
        policy: &'static str,
        key: &'static str,
    },
}

impl TryFrom<RawTtlPolicy> for TtlPolicy {
    type Error = ShapeError;

    fn try_from(raw: RawTtlPolicy) -> Result<Self, ShapeError> {
        let job = raw.p99.is_some()
            || raw.retry_ladder.is_some()
            || raw.fallback.is_some()
            || raw.margin.is_some();
        let horizon = raw.horizon.is_some() || raw.outage.is_some();
        let named: Vec<&str> = [
            ("explicit", raw.explicit.is_some()),
            ("retention", raw.retention_years.is_some()),
            ("job", job),
            ("horizon", horizon),
        ]
        .into_iter()
        .filter_map(|(name, present)| present.then_some(name))
        .collect();
        if named.len() > 1 {
            return Err(ShapeError::Mixed(named.join(" and ")));
        }

        fn need<T>(
            value: Option<T>,
            policy: &'static str,
            key: &'static str,
        ) -> Result<T, ShapeError> {
            value.ok_or(ShapeError::Missing { policy, key })
        }
        if let Some(ttl) = raw.explicit {
            Ok(TtlPolicy::Explicit(ttl))
        } else if let Some(years) = raw.retention_years {
            Ok(TtlPolicy::Retention { years })
        } else if job {
            Ok(TtlPolicy::Job {
                p99: need(raw.p99, "job", "p99")?,
                retry_ladder: need(raw.retry_ladder, "job", "retry_ladder")?
                    .into_iter()
                    .map(|Rung(rung)| rung)
                    .collect(),
                fallback: need(raw.fallback, "job", "fallback")?,
                margin: need(raw.margin, "job", "margin")?,
            })
        } else if horizon {
            Ok(TtlPolicy::Horizon {
                horizon: need(raw.horizon, "horizon", "horizon")?,
                outage: need(raw.outage, "horizon", "outage")?,
            })
        } else {
            Err(ShapeError::Empty)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn job(total_secs: u64, margin: f64) -> TtlPolicy {
        TtlPolicy::Job {
            p99: secs(total_secs),
            retry_ladder: vec![],
            fallback: Duration::ZERO,
            margin,
        }
    }

    #[test]
    fn a_decimal_margin_is_exact_not_one_second_short() {
        // 100 s x 1.15 = 115 s; in binary floats 100.0 * 1.15 is
        // 114.99999999999999, which a naive floor would turn into 114.
        assert_eq!(job(100, 0.15).ttl(), Ok(secs(115)));
        assert_eq!(job(10, 0.3).ttl(), Ok(secs(13)));
    }

    #[test]
    fn a_zero_margin_keeps_the_total_and_drops_sub_second_parts() {
        let policy = TtlPolicy::Job {
            p99: Duration::from_millis(1_999),
            retry_ladder: vec![],
            fallback: Duration::ZERO,
            margin: 0.0,
        };
        assert_eq!(policy.ttl(), Ok(secs(1)));
    }

    #[test]
    fn invalid_margins_are_refused() {
        for margin in [-0.1, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(matches!(
                job(60, margin).ttl(),
                Err(TtlError::InvalidMargin { .. })
            ));
        }
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let overflow = Err(TtlError::Overflow { policy: "job" });
        assert_eq!(job(u64::MAX, 0.5).ttl(), overflow);
        assert_eq!(job(1, 1e300).ttl(), overflow);
        let ladder = TtlPolicy::Job {
            p99: secs(u64::MAX),
            retry_ladder: vec![secs(1)],
            fallback: Duration::ZERO,
            margin: 0.0,
        };
        assert_eq!(ladder.ttl(), overflow);
        let horizon = TtlPolicy::Horizon {
            horizon: Duration::MAX,
            outage: secs(1),
        };
        assert_eq!(horizon.ttl(), Err(TtlError::Overflow { policy: "horizon" }));
        assert_eq!(job(u64::MAX, 0.0).ttl(), Ok(secs(u64::MAX)));
    }

    #[test]
    fn every_policy_refuses_a_zero_result() {
        let zero = [
            TtlPolicy::Explicit(Duration::ZERO),
            TtlPolicy::Retention { years: 0 },
            job(0, 1e300),
            TtlPolicy::Horizon {
                horizon: Duration::ZERO,
                outage: Duration::ZERO,
            },
        ];
        for policy in zero {
            let err = policy.ttl().unwrap_err();
            assert!(matches!(err, TtlError::Zero { .. }), "{policy:?}");
            assert!(err.to_string().contains("ttl is zero"));
        }
        // Sub-second totals round down to zero whole seconds.
        assert!(matches!(
            TtlPolicy::Job {
                p99: Duration::from_millis(900),
                retry_ladder: vec![],
                fallback: Duration::ZERO,
                margin: 0.1,
            }
            .ttl(),
            Err(TtlError::Zero { policy: "job" })
        ));
    }

    #[test]
    fn shape_errors_name_the_problem() {
        let err = |text: &str| toml::from_str::<TtlPolicy>(text).unwrap_err().to_string();
        assert!(err("").contains("names no evidence"));
        assert!(err(r#"explicit = "1h"
            horizon = "2h""#)
        .contains("mixes the explicit and horizon policies"));
        assert!(err(r#"p99 = "1h"
            retry_ladder = []
            margin = 0.1"#)
        .contains("job ttl is missing `fallback`"));
        assert!(err(r#"horizon = "9h20m""#).contains("horizon ttl is missing `outage`"));
        assert!(err(r#"explicit = "1h"
            years = 7"#)
        .contains("unknown field `years`"));
    }
}
