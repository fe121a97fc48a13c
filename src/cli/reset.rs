//! `idemgate reset`'s command line, as `kafka-consumer-groups
//! --reset-offsets` users know it: exactly one scenario (`--to-earliest`,
//! `--to-latest`, `--to-offset`, `--to-time`, `--shift-by`,
//! `--by-duration`, `--from-file`), `--dry-run` or `--execute` (nothing
//! changes without the latter), `--export`; and idemgate's
//! own `--skipped` and `--re-emit`, which say what the store records
//! (docs/design.md §4.9) whichever scenario moved the offsets.

use std::path::PathBuf;

use crate::config::Config;
use crate::ops::reset::csv::{CsvError, Rows};
use crate::ops::reset::duration::{DurationError, KafkaDuration};
use crate::ops::reset::run::{self as reset_run, ResetArgs};
use crate::ops::reset::time::{parse_time, TimeError};
use crate::ops::reset::{parse_offsets, Mode, OffsetsError, Skipped, Target};

/// The scenarios; clap refuses two of them together, naming both.
const SCENARIOS: [&str; 7] = [
    "to_earliest",
    "to_latest",
    "to_offset",
    "to_time",
    "shift_by",
    "by_duration",
    "from_file",
];

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("scenario").required(true).args(SCENARIOS)))]
pub struct ResetCli {
    /// The TOML configuration `run` reads (brokers, group, store).
    #[arg(long, env = crate::config::ENV_CONFIG)]
    pub config: PathBuf,
    /// The stream whose input topics are reset.
    #[arg(long)]
    pub stream: String,
    /// Every partition to its log start.
    #[arg(long)]
    pub to_earliest: bool,
    /// Every partition to its log end (a forward skip: needs --skipped).
    #[arg(long)]
    pub to_latest: bool,
    /// One offset for every partition, or TOPIC:PARTITION=OFFSET,... naming
    /// every input partition; each must lie inside its log.
    #[arg(long)]
    pub to_offset: Option<String>,
    /// The first offset at or after this time (the log's end where none
    /// is): RFC 3339 (2026-03-01T10:00:00+01:00), or Kafka's --to-datetime
    /// format YYYY-MM-DDTHH:mm:SS.sss with an optional zone (Z, +01,
    /// +0100, +01:00). Without a zone it is UTC, as Kafka's tool reads it,
    /// never the machine's local time.
    #[arg(long, value_name = "TIME")]
    pub to_time: Option<String>,
    /// Each committed offset moved by N (negative: back), kept inside the
    /// log as Kafka's tool keeps it; every partition needs a commit.
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub shift_by: Option<i64>,
    /// The first offset at or after this long ago, in Kafka's ISO-8601
    /// syntax (PT1H30M, P1DT12H; Java's Duration.parse).
    #[arg(long, allow_hyphen_values = true, value_name = "PnDTnHnMnS")]
    pub by_duration: Option<String>,
    /// The offsets in a CSV file as `kafka-consumer-groups --reset-offsets
    /// --export` writes it (topic,partition,offset or
    /// group,topic,partition,offset), naming every input partition.
    #[arg(long, value_name = "FILE")]
    pub from_file: Option<PathBuf>,
    /// What the records a forward skip passes over count as: `delivered`
    /// (their copies become duplicates: loss if they were not) or
    /// `abandoned` (their copies may take their claims over: a double if
    /// they were delivered). Required for a forward skip.
    #[arg(long, value_enum)]
    pub skipped: Option<Skipped>,
    /// Records of the replayed range that were delivered before as their
    /// claim's holder go to clean again, marked `idemgate-replay: true`.
    #[arg(long)]
    pub re_emit: bool,
    /// Print the plan and change nothing: what the command does anyway
    /// without --execute, said explicitly (as with kafka-consumer-groups).
    /// Allowed while the group has members (the plan is then a snapshot).
    #[arg(long, conflicts_with = "execute")]
    pub dry_run: bool,
    /// Apply the plan: record it in the store, then commit the new offsets.
    /// Without it nothing is changed, as with kafka-consumer-groups
    /// --reset-offsets. Refused while the group has members.
    #[arg(long)]
    pub execute: bool,
    /// Print the new offsets on stdout as Kafka's reset CSV (what
    /// `--from-file` of either tool reads); the report goes to stderr.
    #[arg(long)]
    pub export: bool,
}

/// A scenario's value refused before anything is contacted, naming its
/// flag.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    #[error(transparent)]
    ToOffset(#[from] OffsetsError),
    #[error("--to-time: {0}")]
    ToTime(TimeError),
    #[error("--by-duration: {0}")]
    ByDurationSyntax(DurationError),
    #[error("--by-duration {text}: {error}")]
    ByDurationRange { text: String, error: DurationError },
    #[error("--from-file {file}: cannot read it: {error}")]
    FromFileUnreadable { file: String, error: std::io::Error },
    #[error(transparent)]
    FromFile(#[from] CsvError),
    #[error("give one of --{}", SCENARIOS.map(|s| s.replace('_', "-")).join(", --"))]
    NoScenario,
}

impl ResetCli {
    /// Resolves the scenario now, loads the config, and resets.
    pub fn run(self) -> anyhow::Result<()> {
        let now_ms = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_millis(),
        )?;
        let args = self.args(now_ms)?;
        let config = Config::load(&self.config)?;
        let printed = super::runtime()?.block_on(reset_run::reset(&config, args))?;
        print!("{}", printed.stdout);
        eprint!("{}", printed.stderr);
        Ok(())
    }

    /// The run's arguments: the scenario resolved (`--by-duration` against
    /// `now_ms`, `--from-file` read), or a refusal naming the flag.
    pub fn args(&self, now_ms: i64) -> Result<ResetArgs, ArgsError> {
        let target = if self.to_earliest {
            Target::Earliest
        } else if self.to_latest {
            Target::Latest
        } else if let Some(offsets) = &self.to_offset {
            parse_offsets(offsets)?
        } else if let Some(time) = &self.to_time {
            Target::Time(parse_time(time).map_err(ArgsError::ToTime)?)
        } else if let Some(by) = self.shift_by {
            Target::ShiftBy(by)
        } else if let Some(text) = &self.by_duration {
            let duration = KafkaDuration::parse(text).map_err(ArgsError::ByDurationSyntax)?;
            Target::Time(
                duration
                    .before(now_ms)
                    .map_err(|error| ArgsError::ByDurationRange {
                        text: text.clone(),
                        error,
                    })?,
            )
        } else if let Some(path) = &self.from_file {
            let file = path.display().to_string();
            let text =
                std::fs::read_to_string(path).map_err(|error| ArgsError::FromFileUnreadable {
                    file: file.clone(),
                    error,
                })?;
            Target::File(Rows::parse(&file, &text)?)
        } else {
            return Err(ArgsError::NoScenario);
        };
        Ok(ResetArgs {
            stream: self.stream.clone(),
            target,
            skipped: self.skipped,
            re_emit: self.re_emit,
            mode: if self.execute {
                Mode::Execute
            } else if self.dry_run {
                Mode::DryRun
            } else {
                Mode::Plan
            },
            export: self.export,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        reset: ResetCli,
    }

    fn parse(args: &[&str]) -> Result<ResetCli, clap::Error> {
        let mut all = vec!["reset", "--config", "c.toml", "--stream", "bank"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).map(|c| c.reset)
    }

    /// What clap says refusing `args`.
    fn clap_refusal(args: &[&str]) -> String {
        parse(args).expect_err("refused by clap").to_string()
    }

    const NOW: i64 = 1_772_355_600_000;

    #[test]
    fn each_scenario_becomes_its_target() {
        let target = |args: &[&str]| parse(args).unwrap().args(NOW).unwrap().target;
        assert_eq!(
            target(&["--to-latest", "--skipped", "abandoned"]),
            Target::Latest
        );
        assert_eq!(target(&["--shift-by", "-5"]), Target::ShiftBy(-5));
        assert_eq!(target(&["--shift-by", "7"]), Target::ShiftBy(7));
        assert_eq!(
            target(&["--by-duration", "PT1H30M"]),
            Target::Time(NOW - 5_400_000)
        );
        assert_eq!(
            target(&["--by-duration", "-PT1S"]),
            Target::Time(NOW + 1_000)
        );
        let file = std::env::temp_dir().join(format!("reset-args-{}.csv", std::process::id()));
        std::fs::write(&file, "raw,0,5\nraw,1,6\n").unwrap();
        let path = file.to_string_lossy().to_string();
        let Target::File(rows) = target(&["--from-file", &path]) else {
            panic!("a file target");
        };
        assert_eq!(rows.rows.len(), 2);
        let _ = std::fs::remove_file(&file);
        let args = parse(&["--to-earliest", "--dry-run", "--export"]).unwrap();
        let args = args.args(NOW).unwrap();
        assert!(args.mode == Mode::DryRun && args.export);
        assert_eq!(
            target(&["--to-time", "2026-03-01T10:00:00.000+01:00"]),
            Target::Time(NOW)
        );
        assert_eq!(
            target(&["--to-time", "2026-03-01T09:00:00.000"]),
            Target::Time(NOW)
        );
    }

    #[test]
    fn nothing_changes_without_execute_and_dry_run_and_execute_exclude_each_other() {
        let mode = |args: &[&str]| parse(args).unwrap().args(NOW).unwrap().mode;
        assert_eq!(mode(&["--to-earliest"]), Mode::Plan);
        assert_eq!(mode(&["--to-earliest", "--dry-run"]), Mode::DryRun);
        assert_eq!(mode(&["--to-earliest", "--execute"]), Mode::Execute);
        let error = clap_refusal(&["--to-earliest", "--dry-run", "--execute"]);
        assert!(
            error.contains("--dry-run") && error.contains("--execute"),
            "{error}"
        );
        assert!(error.contains("cannot be used with"), "{error}");
    }

    #[test]
    fn scenarios_exclude_each_other_and_one_is_required() {
        for pair in [
            ["--to-earliest", "--to-latest"],
            ["--to-latest", "--shift-by=1"],
            ["--shift-by=-1", "--by-duration=PT1H"],
            ["--from-file=x.csv", "--to-offset=3"],
            ["--to-time=2026-01-01T00:00:00Z", "--by-duration=PT1H"],
        ] {
            let error = clap_refusal(&pair);
            assert!(error.contains("cannot be used with"), "{pair:?}: {error}");
        }
        let error = clap_refusal(&["--dry-run"]);
        assert!(error.contains("--to-earliest"), "{error}");
        assert!(error.contains("--from-file"), "{error}");
    }

    #[test]
    fn bad_values_are_refused_naming_the_flag() {
        let refused = |args: &[&str]| parse(args).unwrap().args(NOW).unwrap_err().to_string();
        assert!(refused(&["--by-duration", "1h"]).starts_with("--by-duration"));
        assert!(refused(&["--by-duration", "P1Y"]).contains("ISO-8601"));
        let missing = refused(&["--from-file", "/nonexistent/plan.csv"]);
        assert!(
            missing.starts_with("--from-file /nonexistent/plan.csv"),
            "{missing}"
        );
        let time = refused(&["--to-time", "yesterday"]);
        assert!(time.starts_with("--to-time: `yesterday`"), "{time}");
        assert!(time.contains("2026-03-01T10:00:00.000+01:00"), "{time}");
        let lost = clap_refusal(&["--to-earliest", "--skipped", "lost"]);
        assert!(
            lost.contains("--skipped") && lost.contains("lost"),
            "{lost}"
        );
        assert!(clap_refusal(&["--shift-by", "one"]).contains("--shift-by"));
    }
}
