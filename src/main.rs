//! The `idemgate` command: thin on purpose. Parse the CLI, set up tracing,
//! hand over to the library.

use std::io::Read;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use idemgate::fingerprint::{fingerprint, Identity, Profile, RecordView};
use idemgate::ops;
use idemgate::ops::check::check;
use idemgate::ops::horizon::{measure, report, rfc3339_ms, NumericTimes};
use idemgate::ops::horizon_topic::{Locator, TopicSource};
use idemgate::ops::plan::{for_stream, plan as make_plan, PlanInput, PlanMode};
use idemgate::ops::plan_text;
use idemgate::ttl::{format_duration, parse_duration, TtlPolicy};

/// A record is copied on the polling thread and freed on the loop's:
/// glibc's malloc spent close to half of the loop's CPU on such frees
/// (perf); mimalloc frees across threads cheaply.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Flags that may come from the environment (a flag on the command line
/// wins): what a container sets once for every command it runs. A
/// command's target (`--stream`, offsets) never does, so an inherited
/// variable cannot aim a reset or a rebuild.
use idemgate::config::ENV_CONFIG;
const ENV_LOG_FORMAT: &str = "IDEMGATE_LOG_FORMAT";

#[derive(Parser)]
#[command(name = "idemgate", version, about = "Deduplication gateway for Kafka")]
struct Cli {
    /// `text` (colour only on a terminal) or `json` (one object a line).
    #[arg(long, global = true, value_enum, default_value = "text", env = ENV_LOG_FORMAT)]
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
        #[arg(long, env = ENV_CONFIG)]
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
    /// Read one record's payload on stdin and print its hex source hash
    /// (with --digest, a tab and its payload digest).
    Hash(HashArgs),
    /// Print a TTL in seconds from the evidence it is derived from.
    Ttl(TtlArgs),
    /// Measure retry horizons from a delivery log: JSON lines with
    /// `delivery_id`, `sender` and `received_at` on stdin, or a recorded
    /// topic read from the brokers (`--brokers`, `--topic`).
    Horizon(HorizonArgs),
    /// Check a config as `run` loads it, then (unless --offline) the brokers
    /// and the store it names; prints a report, fails on any refusal.
    Check {
        /// The TOML configuration `run` would read.
        #[arg(long, env = ENV_CONFIG)]
        config: std::path::PathBuf,
        /// Check the config and the metrics address only; contact no server.
        #[arg(long)]
        offline: bool,
    },
    /// Memory a stream needs: tier-1 keys and bytes, tier-2 generations,
    /// exact and tiered side by side; from flags or from each stream of a
    /// config.
    Plan(PlanArgs),
    /// Reset a stream's input offsets for the group, with the scenarios of
    /// kafka-consumer-groups --reset-offsets (and its CSV), while the group
    /// has no members; prints every partition's offsets before and after.
    /// A forward skip needs --skipped; a replay produces nothing again
    /// unless --re-emit.
    Reset(idemgate::ops::reset_args::ResetCli),
    /// Write back a stream's store after it lost its state (a Redis
    /// restarted without persistence, flushed, or replaced): settled claims
    /// and tier-2 inserts from the clean topic over the TTL window, the
    /// watermarks from the group's committed offsets, then the store
    /// identity. Refused while the group has members.
    Rebuild(RebuildArgs),
}

#[derive(Args)]
struct RebuildArgs {
    /// The TOML configuration `run` reads (brokers, group, store, streams).
    #[arg(long, env = ENV_CONFIG)]
    config: std::path::PathBuf,
    /// The stream whose store is rebuilt.
    #[arg(long)]
    stream: String,
    /// Write the store identity only, vouching that the store kept the
    /// stream's claims: the first start after upgrading from a version
    /// without store identities. Refused where the store holds one.
    #[arg(long)]
    adopt: bool,
}

#[derive(Args)]
struct PlanArgs {
    /// Plan every stream of this config (tiered ones at their peak_rate).
    #[arg(long, conflicts_with_all = ["horizon", "tier1_ttl", "fp_rate", "slots"])]
    config: Option<std::path::PathBuf>,
    /// Distinct events per second; with --config, the rate of exact streams
    /// (which have none in the config).
    #[arg(long)]
    rate: Option<u64>,
    /// How long a hash is remembered (exact: all of it in tier 1).
    #[arg(long, allow_hyphen_values = true)]
    horizon: Option<String>,
    /// Tiered: how long a hash stays an exact key.
    #[arg(long, allow_hyphen_values = true)]
    tier1_ttl: Option<String>,
    /// Tiered: false-positive rate of one generation [default: 0.001].
    #[arg(long, allow_hyphen_values = true)]
    fp_rate: Option<f64>,
    /// Tiered: live generations [default: 2].
    #[arg(long)]
    slots: Option<u32>,
    /// Which figures: exact, tiered, or both side by side.
    #[arg(long, value_enum, default_value = "both")]
    mode: PlanMode,
}

#[derive(Args)]
struct HorizonArgs {
    /// Stdin: the unit of a numeric `received_at` (RFC 3339 strings need
    /// none); a number without it is refused.
    #[arg(long, value_enum, conflicts_with = "topic")]
    numeric_times: Option<NumericTimes>,
    /// Read a recorded topic on these brokers instead of stdin.
    #[arg(long, requires = "topic")]
    brokers: Option<String>,
    /// The recorded topic: every partition, from the beginning (or --from)
    /// until no record has arrived for --quiet.
    #[arg(long, requires = "brokers")]
    topic: Option<String>,
    /// JSON field (dotted path) of the delivery id [default: delivery_id].
    #[arg(long, requires = "topic", conflicts_with = "id_header")]
    id_field: Option<String>,
    /// Header of the delivery id.
    #[arg(long, requires = "topic")]
    id_header: Option<String>,
    /// JSON field (dotted path) of the sender [default: sender].
    #[arg(long, requires = "topic", conflicts_with = "sender_header")]
    sender_field: Option<String>,
    /// Header of the sender.
    #[arg(long, requires = "topic")]
    sender_header: Option<String>,
    /// Only records timestamped at or after this RFC 3339 time.
    #[arg(long, requires = "topic")]
    from: Option<String>,
    /// Only records timestamped before this RFC 3339 time.
    #[arg(long, requires = "topic")]
    to: Option<String>,
    /// Reading ends once no record has arrived for this long (at most 10m)
    /// [default: 5s].
    #[arg(long, requires = "topic")]
    quiet: Option<String>,
    /// Further librdkafka properties for reading the topic (TLS, SASL).
    #[arg(long = "kafka", value_name = "KEY=VALUE", requires = "topic")]
    kafka: Vec<String>,
}

#[derive(Args)]
struct HashArgs {
    /// header, record-key, fields, payload, payload-raw, bank-txn or
    /// spatial-job.
    #[arg(long)]
    profile: String,
    /// For `fields`: `name:normaliser` pairs, comma separated.
    #[arg(long)]
    fields: Option<String>,
    /// For `header`: the header's name (default x-idempotency-key).
    #[arg(long, requires = "key")]
    header: Option<String>,
    /// For `header`: the header's value; for `record-key`: the record's
    /// key, as text (stdin is then the payload).
    #[arg(long, allow_hyphen_values = true)]
    key: Option<String>,
    /// Payload fields left out of the digest (and under `payload` the
    /// hash), comma separated: a stream's `ignore`.
    #[arg(long, value_delimiter = ',')]
    ignore: Vec<String>,
    /// Also print the payload digest, after a tab: two records with one
    /// hash are a `duplicate` when their digests match, a `conflict` when
    /// they differ. Without it the output is the hash alone.
    #[arg(long)]
    digest: bool,
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
    let format = cli.log_format;
    idemgate::logging::init(format);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            idemgate::logging::log_fatal(format, &error);
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run { config } => {
            let config = idemgate::config::Config::load(&config)?;
            idemgate::logging::log_settings(&config);
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
        Command::Horizon(args) => horizon(args),
        Command::Check { config, offline } => {
            let report = runtime()?.block_on(check(&config, offline));
            print!("{}", report.text());
            if report.failures() > 0 {
                bail!("check found {} refusal(s)", report.failures());
            }
            Ok(())
        }
        Command::Plan(args) => plan(args),
        Command::Reset(args) => reset(args),
        Command::Rebuild(args) => {
            let config = idemgate::config::Config::load(&args.config)?;
            let request = idemgate::ops::rebuild_run::RebuildArgs {
                stream: args.stream,
                adopt: args.adopt,
            };
            let report =
                runtime()?.block_on(idemgate::ops::rebuild_run::rebuild(&config, request))?;
            print!("{report}");
            Ok(())
        }
    }
}

fn reset(cli: idemgate::ops::reset_args::ResetCli) -> Result<()> {
    let now_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?;
    let args = cli.args(now_ms).map_err(anyhow::Error::msg)?;
    let config = idemgate::config::Config::load(&cli.config)?;
    let printed = runtime()?.block_on(idemgate::ops::reset_run::reset(&config, args))?;
    print!("{}", printed.stdout);
    eprint!("{}", printed.stderr);
    Ok(())
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
    )?
    .ignoring(&args.ignore)?;
    let mut payload = Vec::new();
    std::io::stdin()
        .read_to_end(&mut payload)
        .context("reading the record from stdin")?;
    let key = args.key.as_deref().map(str::as_bytes);
    let mut headers: Vec<(&str, Option<&[u8]>)> = Vec::new();
    let mut record_key = None;
    match profile.identity() {
        Identity::Header { name } => headers.extend(key.map(|v| (name.as_str(), Some(v)))),
        Identity::RecordKey => record_key = key,
        _ if key.is_some() => bail!(
            "--key is the header's value for --profile header and the record's key for \
             --profile record-key; profile {} reads stdin only",
            args.profile
        ),
        _ => {}
    }
    let record = RecordView {
        key: record_key,
        payload: Some(trim_newline(&payload)),
        headers: &headers,
    };
    let print = fingerprint(&profile, args.max_bytes, &record)?;
    if args.digest {
        println!("{}\t{}", print.hash, print.digest);
    } else {
        println!("{}", print.hash);
    }
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

fn plan(args: PlanArgs) -> Result<()> {
    if let Some(path) = args.config {
        let config = idemgate::config::Config::load(&path)?;
        for (index, stream) in config.streams.iter().enumerate() {
            if index > 0 {
                println!();
            }
            print!(
                "{}",
                plan_text::stream(&for_stream(stream, args.rate, args.mode)?)
            );
        }
        return Ok(());
    }
    let (Some(rate), Some(horizon)) = (args.rate, args.horizon) else {
        bail!("give --rate and --horizon (and --tier1-ttl for a tiered plan), or --config");
    };
    let input = PlanInput {
        rate,
        horizon: duration("horizon", &horizon)?,
        tier1_ttl: args
            .tier1_ttl
            .map(|text| duration("tier1-ttl", &text))
            .transpose()?,
        fp_rate: args.fp_rate.unwrap_or(0.001),
        slots: args.slots.unwrap_or(2),
    };
    print!("{}", plan_text::plan(&make_plan(input, args.mode)?));
    Ok(())
}

fn horizon(args: HorizonArgs) -> Result<()> {
    let Some(topic) = args.topic else {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the delivery log from stdin")?;
        let attempts = ops::horizon::parse_log(&text, args.numeric_times)?;
        print!("{}", report(&measure(&attempts, "stdin")?));
        return Ok(());
    };
    let locate = |field: Option<String>, header: Option<String>, default: &str| match header {
        Some(name) => Locator::Header(name),
        None => Locator::Field(field.unwrap_or_else(|| default.to_string())),
    };
    let time = |flag: &str, text: Option<String>| {
        text.map(|t| rfc3339_ms(&t).map_err(|e| anyhow::anyhow!("--{flag}: {e}")))
            .transpose()
    };
    let properties = args
        .kafka
        .iter()
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("--kafka {pair}: KEY=VALUE"))
        })
        .collect::<Result<_>>()?;
    let source = TopicSource {
        brokers: args.brokers.context("--brokers is needed with --topic")?,
        topic,
        properties,
        id: locate(args.id_field, args.id_header, "delivery_id"),
        sender: locate(args.sender_field, args.sender_header, "sender"),
        from_ms: time("from", args.from)?,
        to_ms: time("to", args.to)?,
        quiet: duration("quiet", args.quiet.as_deref().unwrap_or("5s"))?,
    };
    let recording = ops::horizon_topic::read_topic(&source)?;
    eprintln!(
        "read {} records from {} partitions of {} ({} outside --from/--to)",
        recording.records, recording.partitions, source.topic, recording.outside
    );
    print!(
        "{}",
        report(&measure(&recording.attempts, &source.describe())?)
    );
    Ok(())
}
