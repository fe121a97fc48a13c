//! `idemgate check`: a config as `run` loads it, then its servers.

use std::path::PathBuf;

use crate::config::ENV_CONFIG;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The TOML configuration `run` would read.
    #[arg(long, env = ENV_CONFIG)]
    pub config: PathBuf,
    /// Check the config and the metrics address only; contact no server.
    #[arg(long)]
    pub offline: bool,
}

impl CheckArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let report =
            super::runtime()?.block_on(crate::ops::check::check(&self.config, self.offline));
        print!("{}", report.text());
        if report.failures() > 0 {
            anyhow::bail!("check found {} refusal(s)", report.failures());
        }
        Ok(())
    }
}
