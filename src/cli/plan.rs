//! `idemgate plan`: the memory a stream needs, from flags or a config.

use std::path::PathBuf;

use anyhow::bail;

use super::duration;
use crate::config::Config;
use crate::ops::plan::text as plan_text;
use crate::ops::plan::{for_stream, plan, ClaimsIn, PlanInput, PlanMode};

#[derive(clap::Args)]
pub struct PlanArgs {
    /// Plan every stream of this config at its peak_rate, figures of its
    /// store first (an exact stream without one at --rate, else per
    /// event/s).
    #[arg(long, conflicts_with_all = ["horizon", "tier1_ttl", "fp_rate", "slots"])]
    pub config: Option<PathBuf>,
    /// Distinct events per second; with --config, the rate of exact streams
    /// that set no peak_rate.
    #[arg(long)]
    pub rate: Option<u64>,
    /// How long a hash is remembered (exact: all of it in tier 1).
    #[arg(long, allow_hyphen_values = true)]
    pub horizon: Option<String>,
    /// Tiered: how long a hash stays an exact key.
    #[arg(long, allow_hyphen_values = true)]
    pub tier1_ttl: Option<String>,
    /// Tiered: false-positive rate of one generation [default: 0.001].
    #[arg(long, allow_hyphen_values = true)]
    pub fp_rate: Option<f64>,
    /// Tiered: live generations [default: 2].
    #[arg(long)]
    pub slots: Option<u32>,
    /// Which figures: exact, tiered, or both side by side (without
    /// --tier1-ttl, both is exact alone and a line on what tiered needs).
    #[arg(long, value_enum, default_value = "both")]
    pub mode: PlanMode,
}

impl PlanArgs {
    pub fn run(self) -> anyhow::Result<()> {
        if let Some(path) = self.config {
            let config = Config::load(&path)?;
            let claims_in = ClaimsIn::of(&config.store);
            for (index, stream) in config.streams.iter().enumerate() {
                if index > 0 {
                    println!();
                }
                print!(
                    "{}",
                    plan_text::stream(&for_stream(stream, claims_in, self.rate, self.mode)?)
                );
            }
            return Ok(());
        }
        let (Some(rate), Some(horizon)) = (self.rate, self.horizon) else {
            bail!("give --rate and --horizon (and --tier1-ttl for a tiered plan), or --config");
        };
        let input = PlanInput {
            rate,
            horizon: duration("horizon", &horizon)?,
            tier1_ttl: self
                .tier1_ttl
                .map(|text| duration("tier1-ttl", &text))
                .transpose()?,
            fp_rate: self.fp_rate.unwrap_or(0.001),
            slots: self.slots.unwrap_or(2),
        };
        print!("{}", plan_text::plan(&plan(input, self.mode)?));
        Ok(())
    }
}
