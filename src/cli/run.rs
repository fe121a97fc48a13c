//! `idemgate run`: a worker replica until SIGTERM or SIGINT.

use std::path::PathBuf;

use crate::config::{Config, ENV_CONFIG};

#[derive(clap::Args)]
pub struct RunArgs {
    /// The TOML configuration (see docs/configuration.md and config/).
    #[arg(long, env = ENV_CONFIG)]
    pub config: PathBuf,
}

impl RunArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let config = Config::load(&self.config)?;
        crate::logging::log_settings(&config);
        super::runtime()?.block_on(crate::app::run(config, crate::app::shutdown_signal()))
    }
}
