//! The `idemgate` command line: the top-level [`Cli`] and its [`Command`]s,
//! one module per command holding its arguments and its `run`. This is the
//! top of the program, so it speaks `anyhow`: each command turns the typed
//! errors of the library into a message for the operator.
//!
//! Flags that may come from the environment (a flag on the command line
//! wins) are what a container sets once for every command it runs:
//! [`ENV_CONFIG`](crate::config::ENV_CONFIG) and [`ENV_LOG_FORMAT`]. A
//! command's target (`--stream`, offsets) never does, so an inherited
//! variable cannot aim a reset or a rebuild.

use clap::{Parser, Subcommand};

use crate::logging::LogFormat;

pub mod check;
pub mod demo;
pub mod hash;
pub mod horizon;
pub mod plan;
pub mod rebuild;
pub mod reset;
pub mod run;
pub mod ttl;

/// The environment variable `--log-format` falls back to.
pub const ENV_LOG_FORMAT: &str = "IDEMGATE_LOG_FORMAT";

#[derive(Parser)]
#[command(name = "idemgate", version, about = "Deduplication gateway for Kafka")]
pub struct Cli {
    /// `text` (colour only on a terminal) or `json` (one object a line).
    #[arg(long, global = true, value_enum, default_value = "text", env = ENV_LOG_FORMAT)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run a worker replica: consume the raw topics, write clean and audit
    /// topics, until SIGTERM or SIGINT.
    Run(run::RunArgs),
    /// Run the whole product on an in-process Kafka cluster with a realistic
    /// workload and print what it decided.
    Demo(demo::DemoArgs),
    /// Read one record's payload on stdin and print its hex source hash
    /// (with --digest, a tab and its payload digest).
    Hash(hash::HashArgs),
    /// Print a TTL in seconds from the evidence it is derived from.
    Ttl(ttl::TtlArgs),
    /// Measure retry horizons from a delivery log: JSON lines with
    /// `delivery_id`, `sender` and `received_at` on stdin, or a recorded
    /// topic read from the brokers (`--brokers`, `--topic`).
    Horizon(horizon::HorizonArgs),
    /// Check a config as `run` loads it, then (unless --offline) the brokers
    /// and the store it names; prints a report, fails on any refusal.
    Check(check::CheckArgs),
    /// Memory a stream needs: tier-1 keys and bytes, tier-2 generations,
    /// exact and tiered side by side; from flags or from each stream of a
    /// config.
    Plan(plan::PlanArgs),
    /// Reset a stream's input offsets for the group, with the scenarios of
    /// kafka-consumer-groups --reset-offsets (and its CSV); prints the plan
    /// and, as Kafka's tool, changes nothing without --execute (refused
    /// while the group has members). A forward skip needs --skipped; a
    /// replay produces nothing again unless --re-emit.
    Reset(reset::ResetCli),
    /// Write back a stream's store after it lost its state (a Redis
    /// restarted without persistence, flushed, or replaced): settled claims
    /// and tier-2 inserts from the clean topic over the TTL window, the
    /// watermarks from the group's committed offsets, then the store
    /// identity. Refused while the group has members.
    Rebuild(rebuild::RebuildArgs),
}

impl Command {
    /// Runs the command to its end; an error is for the operator.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Run(args) => args.run(),
            Command::Demo(args) => args.run(),
            Command::Hash(args) => args.run(),
            Command::Ttl(args) => args.run(),
            Command::Horizon(args) => args.run(),
            Command::Check(args) => args.run(),
            Command::Plan(args) => args.run(),
            Command::Reset(args) => args.run(),
            Command::Rebuild(args) => args.run(),
        }
    }
}

/// The runtime a command that talks to servers runs on.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// A duration flag, its name in the refusal.
fn duration(flag: &str, text: &str) -> anyhow::Result<std::time::Duration> {
    use anyhow::Context;
    crate::ttl::parse_duration(text).with_context(|| format!("--{flag}"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Clap's own consistency check: every `conflicts_with`, `requires`
    /// and group names an argument that exists, no two flags share a name.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// A container sets the config and the log format once, for every
    /// command it runs.
    #[test]
    fn the_config_and_the_log_format_come_from_the_environment() {
        let command = Cli::command();
        let env_of = |sub: Option<&str>, id: &str| {
            let command = match sub {
                Some(name) => command.find_subcommand(name).expect("a subcommand"),
                None => &command,
            };
            let arg = command.get_arguments().find(|a| a.get_id() == id);
            arg.and_then(|a| a.get_env())
                .map(|e| e.to_string_lossy().to_string())
        };
        assert_eq!(env_of(None, "log_format").as_deref(), Some(ENV_LOG_FORMAT));
        for sub in ["run", "check", "reset", "rebuild"] {
            assert_eq!(
                env_of(Some(sub), "config").as_deref(),
                Some(crate::config::ENV_CONFIG),
                "{sub}"
            );
        }
    }
}
