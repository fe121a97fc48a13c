//! The `idemgate` command: thin on purpose. Parse the CLI, set up tracing,
//! hand the command over to the library (`idemgate::cli`, one module per
//! command), and write a fatal error the way the logs are written.

use std::process::ExitCode;

use clap::Parser;
use idemgate::cli::Cli;

/// A record is copied on the polling thread and freed on the loop's:
/// glibc's malloc spent close to half of the loop's CPU on such frees
/// (perf); mimalloc frees across threads cheaply.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = cli.log_format;
    idemgate::logging::init(format);
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            idemgate::logging::log_fatal(format, &error);
            ExitCode::FAILURE
        }
    }
}
