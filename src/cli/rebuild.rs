//! `idemgate rebuild`: a stream's store written back after it lost its
//! state.

use std::path::PathBuf;

use crate::config::{Config, ENV_CONFIG};
use crate::ops::rebuild::run as rebuild_run;

#[derive(clap::Args)]
pub struct RebuildArgs {
    /// The TOML configuration `run` reads (brokers, group, store, streams).
    #[arg(long, env = ENV_CONFIG)]
    pub config: PathBuf,
    /// The stream whose store is rebuilt.
    #[arg(long)]
    pub stream: String,
    /// Write the store identity only, vouching that the store kept the
    /// stream's claims: the first start after upgrading from a version
    /// without store identities. Refused where the store holds one.
    #[arg(long)]
    pub adopt: bool,
}

impl RebuildArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let config = Config::load(&self.config)?;
        let request = rebuild_run::RebuildArgs {
            stream: self.stream,
            adopt: self.adopt,
        };
        let report = super::runtime()?.block_on(rebuild_run::rebuild(&config, request))?;
        print!("{report}");
        Ok(())
    }
}
