//! The `idemgate` command: thin on purpose. Parse the CLI, set up tracing,
//! hand over to the library.

use std::io::Read;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use idemgate::fingerprint::{fingerprint, Profile, RecordView};
use idemgate::ttl::{format_duration, measure_horizon, parse_duration, Delivery, TtlPolicy};

#[derive(Parser)]
#[command(name = "idemgate", version, about = "Deduplication gateway for Kafka")]
struct Cli {
    /// `text` (colour only on a terminal) or `json` (one object a line).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: idemgate::logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a worker replica: consume the raw topics, write clean and audit
    /// topics, until SIGTERM or SIGINT.
    Run {
        /// The TOML configuration (see README.md and config/).
        #[arg(long)]
        config: std::path::PathBuf,
    },
    /// Run the whole product on an in-process Kafka cluster with a realistic
    /// workload and print what it decided.
    Demo {
        /// Bank transactions to generate.
        #[arg(long, default_value_t = 1500)]
        transactions: u64,
        /// Vehicles sending telemetry.
        #[arg(long, default_value_t = 20)]
        vehicles: u64,
        /// Minutes of telemetry per vehicle (one reading a minute).
        #[arg(long, default_value_t = 90)]
        minutes: u64,
    },
    /// Read one JSON record on stdin and print its hex source hash.
    Hash(HashArgs),
    /// Print a TTL in seconds from the evidence it is derived from.
    Ttl(TtlArgs),
    /// Measure retry horizons from a delivery log: JSON lines with
    /// `delivery_id`, `sender` and `received_at` (RFC 3339 or unix ms) on
    /// stdin.
    Horizon,
}

#[derive(Args)]
struct HashArgs {
    /// header, fields, payload, payload-raw, bank-txn or spatial-job.
    #[arg(long)]
    profile: String,
    /// For `fields`: `name:normaliser` pairs, comma separated.
    #[arg(long)]
    fields: Option<String>,
    /// For `header`: the header's name (default x-idempotency-key).
    #[arg(long, requires = "key")]
    header: Option<String>,
    /// For `header`: the header's value (stdin is then the payload).
    #[arg(long, allow_hyphen_values = true)]
    key: Option<String>,
    /// Records larger than this are invalid.
    #[arg(long, default_value_t = 1 << 20)]
    max_bytes: usize,
}

#[derive(Args)]
struct TtlArgs {
    /// An explicit duration.
    #[arg(long, allow_hyphen_values = true, conflicts_with_all = ["retention_years", "p99", "horizon"])]
    explicit: Option<String>,
    /// Retention policy: years of 365.25 days.
    #[arg(long, conflicts_with_all = ["p99", "horizon"])]
    retention_years: Option<u32>,
    /// Job policy: p99 job duration ...
    #[arg(long, requires_all = ["retry_ladder", "fallback", "margin"], conflicts_with = "horizon", allow_hyphen_values = true)]
    p99: Option<String>,
    /// ... the retry ladder's waits, comma separated ...
    #[arg(
        long,
        value_delimiter = ',',
        requires = "p99",
        allow_hyphen_values = true
    )]
    retry_ladder: Vec<String>,
    /// ... the fallback replay window ...
    #[arg(long, requires = "p99", allow_hyphen_values = true)]
    fallback: Option<String>,
    /// ... and a safety margin as a fraction of their sum (required, as in
    /// the config: 0 says "no margin" on purpose).
    #[arg(long, requires = "p99", conflicts_with_all = ["explicit", "retention_years", "horizon"], allow_hyphen_values = true)]
    margin: Option<f64>,
    /// Measured horizon ...
    #[arg(long, requires = "outage", allow_hyphen_values = true)]
    horizon: Option<String>,
    /// ... plus outage tolerance.
    #[arg(long, requires = "horizon", allow_hyphen_values = true)]
    outage: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    idemgate::logging::init(cli.log_format);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("idemgate: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run { config } => {
            let config = idemgate::config::Config::load(&config)?;
            let streams: Vec<&str> = config
                .streams
                .iter()
                .map(|s| s.spec.name.as_str())
                .collect();
            tracing::info!(store = ?config.store, streams = ?streams, "starting");
            runtime()?.block_on(idemgate::app::run(config, idemgate::app::shutdown_signal()))
        }
        Command::Demo {
            transactions,
            vehicles,
            minutes,
        } => {
            let report =
                runtime()?.block_on(idemgate::demo::run(transactions, vehicles, minutes))?;
            println!("{}", report.table());
            if !report.ok() {
                bail!("the demo's check failed");
            }
            Ok(())
        }
        Command::Hash(args) => hash(args),
        Command::Ttl(args) => {
            let ttl = ttl_policy(args)?.ttl()?;
            // Seconds first, for scripts; then as a config would write it.
            println!("{}\t{}", ttl.as_secs(), format_duration(ttl));
            Ok(())
        }
        Command::Horizon => horizon(),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn hash(args: HashArgs) -> Result<()> {
    let profile = Profile::resolve(
        &args.profile,
        args.fields.as_deref(),
        args.header.as_deref(),
    )?;
    let mut payload = Vec::new();
    std::io::stdin()
        .read_to_end(&mut payload)
        .context("reading the record from stdin")?;
    let header_name = match &profile {
        Profile::Header { name } => name.clone(),
        _ if args.key.is_some() => bail!(
            "--key is the header's value for --profile header; profile {} reads stdin only",
            args.profile
        ),
        _ => String::new(),
    };
    let headers: Vec<(&str, Option<&[u8]>)> = match &args.key {
        Some(value) => vec![(header_name.as_str(), Some(value.as_bytes()))],
        None => Vec::new(),
    };
    let record = RecordView {
        payload: Some(trim_newline(&payload)),
        headers: &headers,
    };
    let print = fingerprint(&profile, args.max_bytes, &record)?;
    println!("{}", print.hash);
    Ok(())
}

/// A record piped with `echo` ends in a newline that is not part of it.
fn trim_newline(bytes: &[u8]) -> &[u8] {
    bytes.strip_suffix(b"\n").unwrap_or(bytes)
}

fn duration(flag: &str, text: &str) -> Result<std::time::Duration> {
    parse_duration(text).with_context(|| format!("--{flag}"))
}

fn ttl_policy(args: TtlArgs) -> Result<TtlPolicy> {
    if let Some(text) = args.explicit {
        return Ok(TtlPolicy::Explicit(duration("explicit", &text)?));
    }
    if let Some(years) = args.retention_years {
        return Ok(TtlPolicy::Retention { years });
    }
    if let Some(p99) = args.p99 {
        let retry_ladder = args
            .retry_ladder
            .iter()
            .map(|step| duration("retry-ladder", step))
            .collect::<Result<_>>()?;
        let fallback = args.fallback.context("--fallback is needed with --p99")?;
        let margin = args.margin.context("--margin is needed with --p99")?;
        return Ok(TtlPolicy::Job {
            p99: duration("p99", &p99)?,
            retry_ladder,
            fallback: duration("fallback", &fallback)?,
            margin,
        });
    }
    if let (Some(horizon), Some(outage)) = (args.horizon, args.outage) {
        return Ok(TtlPolicy::Horizon {
            horizon: duration("horizon", &horizon)?,
            outage: duration("outage", &outage)?,
        });
    }
    bail!("give --explicit, --retention-years, --p99 with --retry-ladder and --fallback, or --horizon with --outage")
}

#[derive(serde::Deserialize)]
struct LoggedDelivery {
    delivery_id: String,
    sender: String,
    received_at: serde_json::Value,
}

fn horizon() -> Result<()> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text)?;
    let mut entries = Vec::new();
    for (number, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let entry: LoggedDelivery =
            serde_json::from_str(line).with_context(|| format!("line {}", number + 1))?;
        let at = received_at_ms(&entry.received_at)
            .with_context(|| format!("line {}: received_at", number + 1))?;
        entries.push((entry.delivery_id, entry.sender, at));
    }
    let measured = measure_horizon(entries.iter().map(|(id, sender, at)| Delivery {
        delivery_id: id,
        sender,
        received_at_ms: *at,
    }));
    for (sender, span) in &measured.per_sender {
        println!("{sender}\t{}", span.as_secs());
    }
    println!("max\t{}", measured.max.as_secs());
    Ok(())
}

fn received_at_ms(value: &serde_json::Value) -> Result<i64> {
    if let Some(ms) = value.as_i64() {
        return Ok(ms);
    }
    let text = value.as_str().context("a string or a number")?;
    let parsed = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)?;
    Ok(i64::try_from(parsed.unix_timestamp_nanos() / 1_000_000)?)
}
