//! Kafka's reset plan as CSV, the format `kafka-consumer-groups
//! --reset-offsets --export` prints and `--from-file` reads: a line per
//! partition, `topic,partition,offset`, or `group,topic,partition,offset`
//! where the export covered several groups; no header. `idemgate reset
//! --export` prints the first form, and `--from-file` reads both, so a plan
//! exported by either tool is accepted by the other.
//!
//! Kafka writes it with Jackson's CSV writer, which quotes a cell longer
//! than 24 characters (it checks shorter ones for a character below `-`
//! only): `"clean.payments.eu-west-1",0,42`. The export here quotes as it
//! does, so the two tools print the same lines. Split by hand rather than
//! read with a CSV crate: a Kafka topic name holds no comma, quote or line
//! break, so a line is exactly its comma-separated cells, each maybe in
//! quotes.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::ops::reset::Plan;

/// One partition's offset, per partition in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Present in the four-column form.
    pub group: Option<String>,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// A reset plan read from `--from-file`, before the group is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rows {
    /// The file, to name in refusals.
    pub source: String,
    pub rows: Vec<Row>,
}

/// A file's rows for one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForGroup {
    /// Per (topic, partition).
    pub offsets: BTreeMap<(String, i32), i64>,
    /// The other groups the file has rows for, left alone.
    pub other_groups: Vec<String>,
}

/// A `--from-file` refused, naming the file (and the line).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CsvError {
    #[error("--from-file {file}: line {line}: {problem}")]
    Line {
        file: String,
        line: usize,
        problem: LineProblem,
    },
    #[error("--from-file {file}: no offsets in it")]
    Empty { file: String },
    #[error("--from-file {file}: {topic}:{partition} is named twice")]
    NamedTwice {
        file: String,
        topic: String,
        partition: i32,
    },
    #[error("--from-file {file}: no rows for group {group} (it has rows for {})", others.join(", "))]
    NoRowsForGroup {
        file: String,
        group: String,
        others: Vec<String>,
    },
}

/// What is wrong with one line of the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    #[error("`{0}` is not topic,partition,offset (or group,topic,partition,offset on every line)")]
    Columns(String),
    #[error("partition `{0}` is not a partition number")]
    Partition(String),
    #[error("offset `{0}` is not an offset")]
    Offset(String),
    #[error("an empty topic or group")]
    Empty,
}

/// The plan's new offsets as Kafka's tool exports them for one group.
pub fn export(plan: &Plan) -> String {
    let mut out = String::new();
    let mut rows: Vec<(&str, i32, i64)> = plan
        .partitions
        .iter()
        .map(|p| (p.topic.as_str(), p.partition, p.after))
        .collect();
    rows.sort();
    for (topic, partition, offset) in rows {
        let _ = writeln!(out, "{},{partition},{offset}", jackson_cell(topic));
    }
    out
}

/// A text cell as Jackson's CSV writer (default features) writes it:
/// quoted when longer than 24 UTF-16 units or holding a character below
/// `-` (the comma, the quote, line breaks among them), a quote doubled.
fn jackson_cell(text: &str) -> String {
    if text.encode_utf16().count() > 24 || text.chars().any(|c| c < '-') {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

impl Rows {
    /// Reads Kafka's reset CSV: every line three cells, or every line
    /// four (the first line decides, as for Kafka's reader); blank lines
    /// and a `\r` before a line's end are ignored.
    pub fn parse(source: &str, text: &str) -> Result<Rows, CsvError> {
        let mut rows = Vec::new();
        let mut columns = None;
        for (number, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            let at = |problem: LineProblem| CsvError::Line {
                file: source.to_string(),
                line: number + 1,
                problem,
            };
            let cells: Vec<&str> = line.split(',').map(cell).collect();
            let expected = *columns.get_or_insert(cells.len());
            if cells.len() != expected || !(3..=4).contains(&cells.len()) {
                return Err(at(LineProblem::Columns(line.to_string())));
            }
            let (group, rest) = if cells.len() == 4 {
                (Some(cells[0].to_string()), &cells[1..])
            } else {
                (None, &cells[..])
            };
            let partition: i32 = rest[1]
                .parse()
                .ok()
                .filter(|p| *p >= 0)
                .ok_or_else(|| at(LineProblem::Partition(rest[1].to_string())))?;
            let offset: i64 = rest[2]
                .parse()
                .ok()
                .filter(|o| *o >= 0)
                .ok_or_else(|| at(LineProblem::Offset(rest[2].to_string())))?;
            if rest[0].is_empty() || group.as_deref() == Some("") {
                return Err(at(LineProblem::Empty));
            }
            rows.push(Row {
                group,
                topic: rest[0].to_string(),
                partition,
                offset,
            });
        }
        if rows.is_empty() {
            return Err(CsvError::Empty {
                file: source.to_string(),
            });
        }
        Ok(Rows {
            source: source.to_string(),
            rows,
        })
    }

    /// The offsets for `group`: every row of a three-column file, or the
    /// rows naming `group`. A partition named twice for it is refused.
    pub fn for_group(&self, group: &str) -> Result<ForGroup, CsvError> {
        let mut named = BTreeMap::new();
        let mut others: Vec<String> = Vec::new();
        for row in &self.rows {
            match &row.group {
                Some(g) if g != group => {
                    if !others.contains(g) {
                        others.push(g.clone());
                    }
                    continue;
                }
                _ => {}
            }
            if named
                .insert((row.topic.clone(), row.partition), row.offset)
                .is_some()
            {
                return Err(CsvError::NamedTwice {
                    file: self.source.clone(),
                    topic: row.topic.clone(),
                    partition: row.partition,
                });
            }
        }
        if named.is_empty() {
            return Err(CsvError::NoRowsForGroup {
                file: self.source.clone(),
                group: group.to_string(),
                others,
            });
        }
        others.sort();
        Ok(ForGroup {
            offsets: named,
            other_groups: others,
        })
    }
}

/// A cell as Kafka's reader takes it: surrounding blanks and one pair of
/// double quotes off (a topic name holds no quote to undouble).
fn cell(text: &str) -> &str {
    let text = text.trim();
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reset::{Change, PartitionPlan};

    fn partition(topic: &str, partition: i32, after: i64) -> PartitionPlan {
        PartitionPlan {
            topic: topic.into(),
            partition,
            before: 0,
            committed: None,
            after,
            clamped_from: None,
            watermark: None,
            change: Change::Unchanged,
            raise_to: None,
            abandon: None,
            replay: None,
        }
    }

    #[test]
    fn cells_are_quoted_as_jacksons_writer_quotes_them() {
        assert_eq!(jackson_cell("raw.payments-eu_1"), "raw.payments-eu_1");
        assert_eq!(jackson_cell("a".repeat(24).as_str()), "a".repeat(24));
        let long = "a".repeat(25);
        assert_eq!(jackson_cell(&long), format!("\"{long}\""));
        assert_eq!(jackson_cell("a b"), "\"a b\"");
        assert_eq!(jackson_cell("say \"x\""), "\"say \"\"x\"\"\"");
    }

    #[test]
    fn the_export_is_kafkas_single_group_csv_sorted_by_partition() {
        let plan = Plan {
            stream: "bank".into(),
            partitions: vec![
                partition("raw.b", 0, 9),
                partition("raw.a", 1, 7),
                partition("raw.a", 0, 12),
                partition("raw.payments.eu-west-1.v2", 0, 3),
            ],
            skipped: None,
            re_emit: false,
            other_groups: Vec::new(),
        };
        assert_eq!(
            export(&plan),
            "raw.a,0,12\nraw.a,1,7\nraw.b,0,9\n\"raw.payments.eu-west-1.v2\",0,3\n"
        );
        let back = Rows::parse("plan.csv", &export(&plan)).unwrap();
        let mine = back.for_group("any").unwrap();
        assert_eq!(mine.offsets.len(), 4);
        assert_eq!(mine.offsets[&("raw.a".into(), 0)], 12);
        assert_eq!(mine.offsets[&("raw.payments.eu-west-1.v2".into(), 0)], 3);
        assert!(mine.other_groups.is_empty());
    }

    #[test]
    fn a_multi_group_file_gives_the_groups_rows_and_names_the_others() {
        let text = "g1,raw,0,5\r\ng2,raw,0,9\n\n\"g1\",raw,1,6\n";
        let rows = Rows::parse("all.csv", text).unwrap();
        let mine = rows.for_group("g1").unwrap();
        assert_eq!(
            mine.offsets.into_iter().collect::<Vec<_>>(),
            vec![(("raw".to_string(), 0), 5), (("raw".to_string(), 1), 6)]
        );
        assert_eq!(mine.other_groups, vec!["g2".to_string()]);
        let error = rows.for_group("g3").unwrap_err().to_string();
        assert!(error.contains("no rows for group g3"), "{error}");
        assert!(error.contains("g1, g2"), "{error}");
    }

    #[test]
    fn bad_files_are_refused_naming_the_file_and_line() {
        for (text, says) in [
            ("", "no offsets"),
            ("raw,0\n", "line 1"),
            ("raw,0,5\ng,raw,1,5\n", "line 2"),
            ("raw,x,5\n", "partition `x`"),
            ("raw,0,-1\n", "offset `-1`"),
            (",0,1\n", "empty topic"),
            ("topic,partition,offset\n", "partition `partition`"),
        ] {
            let error = Rows::parse("p.csv", text).unwrap_err().to_string();
            assert!(error.starts_with("--from-file p.csv"), "{text:?}: {error}");
            assert!(error.contains(says), "{text:?}: {error}");
        }
        let twice = Rows::parse("p.csv", "raw,0,1\nraw,0,2\n").unwrap();
        let error = twice.for_group("g").unwrap_err().to_string();
        assert!(error.contains("named twice"), "{error}");
    }
}
