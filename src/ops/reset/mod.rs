//! `idemgate reset`: the operator's reset and replay of one stream's input
//! offsets (DESIGN.md §4 rules 2 and 7; docs/design.md §4.9). What it does
//! to each partition is decided here, purely, from what the brokers and the
//! store said; `run.rs` asks them and writes the outcome.
//!
//! - A **backward** reset (replay) moves the committed offset down. Its
//!   records are below the partition's delivered watermark: they produce
//!   nothing, audit included, unless `--re-emit` records the replayed range
//!   so that those that held their own claim go to clean again, marked
//!   `idemgate-replay: true`.
//! - A **forward** skip moves it up past records never read: their claims
//!   stay unsettled for ever, and their copies would wait for ever. The
//!   operator says what they were: `--skipped delivered` raises the
//!   watermark over them (their copies become duplicates: loss if they were
//!   never delivered), `--skipped abandoned` records the range so that a
//!   copy may take their claims over (a double if they were delivered).

pub mod csv;
pub mod duration;
pub mod run;
pub mod text;
pub mod time;

use std::collections::BTreeMap;

use crate::ops::reset::csv::CsvError;

/// Where the offsets go: the scenarios of Kafka's `kafka-consumer-groups
/// --reset-offsets`, each computed as that tool computes it, except that an
/// offset named explicitly (`--to-offset`, `--from-file`) must lie inside
/// its log where Kafka's tool moves it to the nearer end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Each partition's log start.
    Earliest,
    /// Each partition's log end.
    Latest,
    /// The first offset at or after this time (milliseconds since the
    /// epoch), or the partition's end where none is: `--to-time`, and
    /// `--by-duration` (that long before now).
    Time(i64),
    /// One offset for every partition.
    Offset(i64),
    /// Per partition; every input partition must be named.
    Offsets(BTreeMap<(String, i32), i64>),
    /// The committed offset moved by this many (negative: back), kept
    /// inside the log as Kafka's tool keeps it; a partition without a
    /// commit is refused, as there.
    ShiftBy(i64),
    /// `--from-file`: Kafka's reset CSV, whose rows name groups or not
    /// (`csv`); the group's rows must name every input partition.
    File(crate::ops::reset::csv::Rows),
}

impl Target {
    /// The flag that asked for it, to name in a refusal.
    pub fn flag(&self) -> &'static str {
        match self {
            Target::Earliest => "--to-earliest",
            Target::Latest => "--to-latest",
            Target::Time(_) => "--to-time/--by-duration",
            Target::Offset(_) | Target::Offsets(_) => "--to-offset",
            Target::ShiftBy(_) => "--shift-by",
            Target::File(_) => "--from-file",
        }
    }
}

/// Whether the reset is applied. As `kafka-consumer-groups
/// --reset-offsets`, only `--execute` changes anything: without it the
/// command prints its plan, commits no offset and writes no store key
/// (Kafka 4 plans by default too, and warns that 5.0 will ask for one of
/// the two flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Neither flag: the plan, then a line saying nothing changed and how
    /// to apply it.
    Plan,
    /// `--dry-run`: the plan, asked for explicitly.
    DryRun,
    /// `--execute`: the store written, then the offsets committed.
    Execute,
}

impl Mode {
    /// The store and the group are written to.
    pub fn writes(self) -> bool {
        self == Mode::Execute
    }
}

/// `--skipped`: what the records a forward skip passes over count as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Skipped {
    /// Their copies become duplicates (loss if they were not delivered).
    Delivered,
    /// Their copies may take their claims over (a double if they were
    /// delivered).
    Abandoned,
}

impl Skipped {
    /// What the choice risks, as the command prints it.
    pub fn risk(self) -> &'static str {
        match self {
            Skipped::Delivered => {
                "--skipped delivered: the skipped records count as decided and delivered; \
                 a copy of one of them is suppressed as a duplicate. Risk: LOSS, for every \
                 skipped record whose output never reached clean."
            }
            Skipped::Abandoned => {
                "--skipped abandoned: a copy of a skipped record whose claim was never \
                 settled takes the claim over and goes to clean. Risk: a DOUBLE, for every \
                 skipped record whose output did reach clean before its claim was settled."
            }
        }
    }
}

/// A `--to-offset` refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OffsetsError {
    #[error("--to-offset: {0} is negative")]
    Negative(i64),
    #[error("--to-offset: `{0}` is not TOPIC:PARTITION=OFFSET")]
    NotTopicPartitionOffset(String),
    #[error("--to-offset: {topic}:{partition} is named twice")]
    NamedTwice { topic: String, partition: i32 },
    #[error("--to-offset: no offsets given")]
    Empty,
}

/// Parses `--to-offset`: a single offset for every partition, or
/// `TOPIC:PARTITION=OFFSET,...`.
pub fn parse_offsets(text: &str) -> Result<Target, OffsetsError> {
    if let Ok(offset) = text.trim().parse::<i64>() {
        if offset < 0 {
            return Err(OffsetsError::Negative(offset));
        }
        return Ok(Target::Offset(offset));
    }
    let mut out = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || OffsetsError::NotTopicPartitionOffset(part.to_string());
        let (tp, offset) = part.split_once('=').ok_or_else(bad)?;
        let (topic, partition) = tp.rsplit_once(':').ok_or_else(bad)?;
        let partition: i32 = partition.parse().map_err(|_| bad())?;
        let offset: i64 = offset.parse().map_err(|_| bad())?;
        if topic.is_empty() || partition < 0 || offset < 0 {
            return Err(bad());
        }
        if out.insert((topic.to_string(), partition), offset).is_some() {
            return Err(OffsetsError::NamedTwice {
                topic: topic.to_string(),
                partition,
            });
        }
    }
    if out.is_empty() {
        return Err(OffsetsError::Empty);
    }
    Ok(Target::Offsets(out))
}

/// One input partition as the brokers and the store see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset, if any.
    pub committed: Option<i64>,
    /// The log's start and end.
    pub low: i64,
    pub high: i64,
    /// For `--to-time`: the first offset at or after the time, if any.
    pub at_time: Option<i64>,
    /// The delivered watermark, if the store has one.
    pub watermark: Option<i64>,
}

/// What the reset does to one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    /// Replay: the new offset is below the one the group resumes at.
    Backward,
    /// Skip: records never decided are passed over.
    Forward,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionPlan {
    pub topic: String,
    pub partition: i32,
    /// Where the group would resume: its committed offset, or where
    /// `auto.offset.reset` sends a group without one.
    pub before: i64,
    pub committed: Option<i64>,
    pub after: i64,
    /// `--shift-by`: the offset asked for, where it lay outside the log
    /// and `after` is the nearer end instead.
    pub clamped_from: Option<i64>,
    pub watermark: Option<i64>,
    pub change: Change,
    /// Written to the store: the watermark raised to (`--skipped
    /// delivered`), the range abandoned, the range to re-emit.
    pub raise_to: Option<i64>,
    pub abandon: Option<(i64, i64)>,
    pub replay: Option<(i64, i64)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub stream: String,
    pub partitions: Vec<PartitionPlan>,
    pub skipped: Option<Skipped>,
    pub re_emit: bool,
    /// `--from-file`: the other groups the file has rows for, left alone.
    pub other_groups: Vec<String>,
}

/// What the operator asked for.
#[derive(Clone, Debug)]
pub struct Request {
    pub stream: String,
    /// The consumer group: `--from-file` takes the rows naming it.
    pub group: String,
    pub target: Target,
    pub skipped: Option<Skipped>,
    pub re_emit: bool,
    /// `auto.offset.reset` is `latest` (or `end`): a group without a
    /// commit resumes at the log's end, not its start.
    pub resume_at_end: bool,
}

/// A reset that cannot be done as asked, naming the flag (`flag`) and the
/// partition (`name`, `topic:partition`).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    File(#[from] CsvError),
    #[error("{flag}: {topic}:{partition} is not an input partition of stream {stream}")]
    NotAnInput {
        flag: &'static str,
        topic: String,
        partition: i32,
        stream: String,
    },
    #[error("{flag}: {name} is not named (every input partition must be)")]
    NotNamed { flag: &'static str, name: String },
    #[error(
        "{flag}: {name} has no committed offset to shift (Kafka's tool refuses it too); name \
         its offset with --to-offset or --from-file"
    )]
    NoCommitToShift { flag: &'static str, name: String },
    #[error(
        "{flag}: {after} for {name} is outside its log [{low}, {high}] (Kafka's tool would \
         move it to the nearer end; name that offset if it is what you want)"
    )]
    OutsideLog {
        flag: &'static str,
        after: i64,
        name: String,
        low: i64,
        high: i64,
    },
    #[error(
        "{name}: {before} -> {after} skips records forward; say what they were with \
         --skipped delivered or --skipped abandoned"
    )]
    SkipUnsaid {
        name: String,
        before: i64,
        after: i64,
    },
}

/// Decides every partition's change; refuses what cannot be done, naming
/// the flag.
pub fn plan(request: &Request, seen: &[Seen]) -> Result<Plan, PlanError> {
    let flag = request.target.flag();
    // Offsets named per partition (none for the other targets).
    let (named, other_groups) = match &request.target {
        Target::Offsets(named) => (named.clone(), Vec::new()),
        Target::File(rows) => {
            let mine = rows.for_group(&request.group)?;
            (mine.offsets, mine.other_groups)
        }
        _ => (BTreeMap::new(), Vec::new()),
    };
    for (topic, partition) in named.keys() {
        if !seen
            .iter()
            .any(|s| &s.topic == topic && s.partition == *partition)
        {
            return Err(PlanError::NotAnInput {
                flag,
                topic: topic.clone(),
                partition: *partition,
                stream: request.stream.clone(),
            });
        }
    }
    let mut partitions = Vec::with_capacity(seen.len());
    for s in seen {
        let name = format!("{}:{}", s.topic, s.partition);
        let mut clamped_from = None;
        let after = match &request.target {
            Target::Offsets(_) | Target::File(_) => *named
                .get(&(s.topic.clone(), s.partition))
                .ok_or_else(|| PlanError::NotNamed {
                    flag,
                    name: name.clone(),
                })?,
            Target::Earliest => s.low,
            Target::Latest => s.high,
            Target::Time(_) => s.at_time.unwrap_or(s.high),
            Target::Offset(offset) => *offset,
            Target::ShiftBy(by) => {
                let committed = s.committed.ok_or_else(|| PlanError::NoCommitToShift {
                    flag,
                    name: name.clone(),
                })?;
                let wanted = committed.saturating_add(*by);
                let kept = wanted.clamp(s.low, s.high);
                if kept != wanted {
                    clamped_from = Some(wanted);
                }
                kept
            }
        };
        if after < s.low || after > s.high {
            return Err(PlanError::OutsideLog {
                flag,
                after,
                name,
                low: s.low,
                high: s.high,
            });
        }
        let before = s
            .committed
            .unwrap_or(if request.resume_at_end { s.high } else { s.low });
        let change = match after.cmp(&before) {
            std::cmp::Ordering::Equal => Change::Unchanged,
            std::cmp::Ordering::Less => Change::Backward,
            std::cmp::Ordering::Greater => Change::Forward,
        };
        let (mut raise_to, mut abandon, mut replay) = (None, None, None);
        match change {
            Change::Forward => match request.skipped {
                None => {
                    return Err(PlanError::SkipUnsaid {
                        name,
                        before,
                        after,
                    })
                }
                Some(Skipped::Delivered) => raise_to = Some(after),
                Some(Skipped::Abandoned) => abandon = Some((before, after)),
            },
            // Everything the replay reads that was decided before: up to
            // the watermark where it runs ahead of the last commit.
            Change::Backward if request.re_emit => {
                replay = Some((after, before.max(s.watermark.unwrap_or(before))));
            }
            _ => {}
        }
        partitions.push(PartitionPlan {
            topic: s.topic.clone(),
            partition: s.partition,
            before,
            committed: s.committed,
            after,
            clamped_from,
            watermark: s.watermark,
            change,
            raise_to,
            abandon,
            replay,
        });
    }
    Ok(Plan {
        stream: request.stream.clone(),
        partitions,
        skipped: request.skipped,
        re_emit: request.re_emit,
        other_groups,
    })
}

impl Plan {
    pub fn forward(&self) -> bool {
        self.partitions.iter().any(|p| p.change == Change::Forward)
    }
}

#[cfg(test)]
mod tests;
