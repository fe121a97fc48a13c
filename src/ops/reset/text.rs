//! The report of `idemgate reset` (`reset.rs` plans it): first Kafka's
//! own reset table, as `kafka-consumer-groups --reset-offsets` prints it,
//! so that what an operator reads (and any script that reads it) is the
//! same for either tool; then idemgate's table (committed offset,
//! watermark, the change, what the store records), the risk of the choice
//! made, and whether anything was changed.

use std::fmt::Write;

use crate::ops::reset::{Change, Mode, Plan};

/// Kafka's placeholder for a missing value (`MISSING_COLUMN_VALUE`).
const MISSING: &str = "-";

/// The report, up to the line that says what was done (`closing` for a
/// plan; `run` says what it wrote).
pub fn text(plan: &Plan, group: &str, mode: Mode) -> String {
    let mut out = kafka_table(plan, group);
    let _ = writeln!(
        out,
        "\nstream {}: {}",
        plan.stream,
        match mode {
            Mode::Plan => "plan",
            Mode::DryRun => "dry run",
            Mode::Execute => "executing",
        }
    );
    out.push_str(&idemgate_table(plan));
    match (plan.forward(), plan.skipped) {
        (true, Some(skipped)) => {
            let _ = writeln!(out, "{}", skipped.risk());
        }
        (false, Some(_)) => {
            let _ = writeln!(out, "--skipped has no effect: no partition skips forward");
        }
        _ => {}
    }
    if plan.re_emit && !plan.partitions.iter().any(|p| p.replay.is_some()) {
        let _ = writeln!(
            out,
            "--re-emit has no effect: no partition replays backward"
        );
    }
    if !plan.other_groups.is_empty() {
        let _ = writeln!(
            out,
            "--from-file: the rows of other groups were left alone ({})",
            plan.other_groups.join(", ")
        );
    }
    if !plan.re_emit {
        let _ = writeln!(
            out,
            "no re-emission: replayed records produce nothing (any earlier re-emit range of these partitions is cleared)"
        );
    }
    out
}

/// The report's last line when nothing was written (Kafka's tool warns
/// "No action will be performed as the --execute option is missing").
pub fn closing(mode: Mode) -> Option<&'static str> {
    match mode {
        Mode::Plan => Some(
            "nothing was changed: --execute is missing; pass it to record this plan in the \
             store and commit the new offsets\n",
        ),
        Mode::DryRun => Some("dry run: nothing was changed\n"),
        Mode::Execute => None,
    }
}

/// `GROUP TOPIC PARTITION NEW-OFFSET` exactly as Kafka 4's
/// `GroupOffsetsResetter.printOffsetsToReset` prints it: each line
/// preceded by a line break (`%n%-Gs %-Ts %-10s %s`), GROUP and TOPIC
/// left-aligned to the longest of their values and at least 15, PARTITION
/// to 10, then one more line break; so the table opens with a blank line.
fn kafka_table(plan: &Plan, group: &str) -> String {
    let group_width = group.chars().count().max(15);
    let topic_width = topic_width(plan);
    let row = |group: &str, topic: &str, partition: &str, offset: &str| {
        format!("\n{group:<group_width$} {topic:<topic_width$} {partition:<10} {offset}")
    };
    let mut out = String::new();
    if !plan.partitions.is_empty() {
        out.push_str(&row("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"));
    }
    for p in &plan.partitions {
        out.push_str(&row(
            group,
            &p.topic,
            &p.partition.to_string(),
            &p.after.to_string(),
        ));
    }
    out.push('\n');
    out
}

fn topic_width(plan: &Plan) -> usize {
    plan.partitions
        .iter()
        .map(|p| p.topic.chars().count())
        .fold(15, usize::max)
}

/// Per partition what Kafka's table does not say: the committed offset
/// (`-` where the group has none), the watermark, the change and its size,
/// and what the store records.
fn idemgate_table(plan: &Plan) -> String {
    let rows: Vec<[String; 6]> = plan
        .partitions
        .iter()
        .map(|p| {
            let (change, effect) = match p.change {
                Change::Unchanged => ("unchanged".to_string(), "none".to_string()),
                Change::Backward => (
                    format!("replay {}", p.before - p.after),
                    match p.replay {
                        Some((from, to)) => format!(
                            "re-emit [{from}, {to}): those delivered before as their claim's \
                             holder go to clean again, marked idemgate-replay"
                        ),
                        None => "decided before: nothing produced again".to_string(),
                    },
                ),
                Change::Forward => (
                    format!("skip {}", p.after - p.before),
                    match (p.raise_to, p.abandon) {
                        (Some(to), _) => {
                            format!("watermark raised to {to}: the skipped count as delivered")
                        }
                        (_, Some((from, to))) => format!(
                            "[{from}, {to}) abandoned: their unsettled claims may be taken over"
                        ),
                        _ => "none".to_string(),
                    },
                ),
            };
            let mut effect = effect;
            if p.committed.is_none() {
                effect = format!("no commit, resumes at {}; {effect}", p.before);
            }
            if let Some(wanted) = p.clamped_from {
                let end = if wanted < p.after { "start" } else { "end" };
                effect.push_str(&format!(" (shifted to {wanted}, kept at the log's {end})"));
            }
            [
                p.topic.clone(),
                p.partition.to_string(),
                p.committed
                    .map_or_else(|| MISSING.into(), |c| c.to_string()),
                p.watermark
                    .map_or_else(|| MISSING.into(), |w| w.to_string()),
                change,
                effect,
            ]
        })
        .collect();
    let header = [
        "TOPIC",
        "PARTITION",
        "COMMITTED",
        "WATERMARK",
        "CHANGE",
        "STORE",
    ]
    .map(String::from);
    // Aligned as Kafka aligns its tables: left, each column as wide as its
    // widest value, the last one unpadded.
    let mut widths = [0; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    widths[0] = widths[0].max(topic_width(plan));
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        for (cell, width) in row.iter().zip(widths) {
            let _ = write!(out, "{cell:<width$} ");
        }
        let _ = writeln!(out, "{}", row[5]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reset::{PartitionPlan, Skipped};

    fn partition(partition: i32, committed: Option<i64>, after: i64) -> PartitionPlan {
        let before = committed.unwrap_or(0);
        PartitionPlan {
            topic: "raw.bank".into(),
            partition,
            before,
            committed,
            after,
            clamped_from: None,
            watermark: committed,
            change: match after.cmp(&before) {
                std::cmp::Ordering::Equal => Change::Unchanged,
                std::cmp::Ordering::Less => Change::Backward,
                std::cmp::Ordering::Greater => Change::Forward,
            },
            raise_to: None,
            abandon: None,
            replay: None,
        }
    }

    fn plan(partitions: Vec<PartitionPlan>) -> Plan {
        Plan {
            stream: "bank".into(),
            partitions,
            skipped: None,
            re_emit: true,
            other_groups: Vec::new(),
        }
    }

    #[test]
    fn the_plan_opens_with_kafkas_table_as_kafka_prints_it_then_idemgates() {
        let mut back = partition(0, Some(120), 0);
        back.replay = Some((0, 120));
        let mut skip = partition(1, Some(40), 90);
        skip.abandon = Some((40, 90));
        let mut plan = plan(vec![back, skip, partition(2, None, 0)]);
        plan.skipped = Some(Skipped::Abandoned);
        let text = text(&plan, "idemgate", Mode::Plan);
        let expected = concat!(
            "\n",
            "GROUP           TOPIC           PARTITION  NEW-OFFSET\n",
            "idemgate        raw.bank        0          0\n",
            "idemgate        raw.bank        1          90\n",
            "idemgate        raw.bank        2          0\n",
            "\n",
            "stream bank: plan\n",
            "TOPIC           PARTITION COMMITTED WATERMARK CHANGE     STORE\n",
            "raw.bank        0         120       120       replay 120 re-emit [0, 120): those \
             delivered before as their claim's holder go to clean again, marked idemgate-replay\n",
            "raw.bank        1         40        40        skip 50    [40, 90) abandoned: their \
             unsettled claims may be taken over\n",
            "raw.bank        2         -         -         unchanged  no commit, resumes at 0; none\n",
        );
        assert!(
            text.starts_with(expected),
            "got:\n{text}\nwanted it to start with:\n{expected}"
        );
        assert!(text.contains("Risk: a DOUBLE"), "{text}");
        assert_eq!(
            closing(Mode::Plan),
            Some(
                "nothing was changed: --execute is missing; pass it to record this plan in the \
                 store and commit the new offsets\n"
            )
        );
        assert_eq!(closing(Mode::Execute), None);
    }

    #[test]
    fn kafkas_columns_widen_to_the_longest_group_and_topic() {
        let mut long = partition(3, Some(7), 7);
        long.topic = "payments.card-authorisations".into();
        let text = text(&plan(vec![long]), "idemgate-payments-eu-west", Mode::DryRun);
        let table: Vec<&str> = text.lines().take(3).collect();
        assert_eq!(
            table,
            [
                "",
                "GROUP                     TOPIC                        PARTITION  NEW-OFFSET",
                "idemgate-payments-eu-west payments.card-authorisations 3          7",
            ]
        );
        assert!(text.contains("stream bank: dry run\n"), "{text}");
        assert!(text.contains("\npayments.card-authorisations 3 "), "{text}");
    }
}
