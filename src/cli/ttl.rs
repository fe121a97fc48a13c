//! `idemgate ttl`: a TTL from the evidence it is derived from.

use anyhow::{bail, Context};

use super::duration;
use crate::ttl::{format_duration, TtlPolicy};

#[derive(clap::Args)]
pub struct TtlArgs {
    /// An explicit duration.
    #[arg(long, allow_hyphen_values = true, conflicts_with_all = ["retention_years", "p99", "horizon"])]
    pub explicit: Option<String>,
    /// Retention policy: years of 365.25 days.
    #[arg(long, conflicts_with_all = ["p99", "horizon"])]
    pub retention_years: Option<u32>,
    /// Job policy: p99 job duration ...
    #[arg(long, requires_all = ["retry_ladder", "fallback", "margin"], conflicts_with = "horizon", allow_hyphen_values = true)]
    pub p99: Option<String>,
    /// ... the retry ladder's waits, comma separated ...
    #[arg(
        long,
        value_delimiter = ',',
        requires = "p99",
        allow_hyphen_values = true
    )]
    pub retry_ladder: Vec<String>,
    /// ... the fallback replay window ...
    #[arg(long, requires = "p99", allow_hyphen_values = true)]
    pub fallback: Option<String>,
    /// ... and a safety margin as a fraction of their sum (required, as in
    /// the config: 0 says "no margin" on purpose).
    #[arg(long, requires = "p99", conflicts_with_all = ["explicit", "retention_years", "horizon"], allow_hyphen_values = true)]
    pub margin: Option<f64>,
    /// Measured horizon ...
    #[arg(long, requires = "outage", allow_hyphen_values = true)]
    pub horizon: Option<String>,
    /// ... plus outage tolerance.
    #[arg(long, requires = "horizon", allow_hyphen_values = true)]
    pub outage: Option<String>,
}

impl TtlArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let ttl = self.policy()?.ttl()?;
        // Seconds first, for scripts; then as a config would write it.
        println!("{}\t{}", ttl.as_secs(), format_duration(ttl));
        Ok(())
    }

    fn policy(self) -> anyhow::Result<TtlPolicy> {
        if let Some(text) = self.explicit {
            return Ok(TtlPolicy::Explicit(duration("explicit", &text)?));
        }
        if let Some(years) = self.retention_years {
            return Ok(TtlPolicy::Retention { years });
        }
        if let Some(p99) = self.p99 {
            let retry_ladder = self
                .retry_ladder
                .iter()
                .map(|step| duration("retry-ladder", step))
                .collect::<anyhow::Result<_>>()?;
            let fallback = self.fallback.context("--fallback is needed with --p99")?;
            let margin = self.margin.context("--margin is needed with --p99")?;
            return Ok(TtlPolicy::Job {
                p99: duration("p99", &p99)?,
                retry_ladder,
                fallback: duration("fallback", &fallback)?,
                margin,
            });
        }
        if let (Some(horizon), Some(outage)) = (self.horizon, self.outage) {
            return Ok(TtlPolicy::Horizon {
                horizon: duration("horizon", &horizon)?,
                outage: duration("outage", &outage)?,
            });
        }
        bail!("give --explicit, --retention-years, --p99 with --retry-ladder and --fallback, or --horizon with --outage")
    }
}
