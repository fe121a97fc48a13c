//! How long a fault stopped the decisions: for each input partition, the
//! gaps between consecutive decisions (each output's `idemgate-decided-at`,
//! as a reader of the outputs sees them), and for each fault the longest
//! gap that overlaps its window (from its start to the next fault's, the
//! last one's until the producer finished): a fault that stops decisions at
//! once (a broker crash) ends a gap that began just before it, and a stop
//! that spans several windows counts for each of them. The inputs arrive
//! steadily all through the window, so a long gap is a partition whose
//! records waited: a store freeze on a fail-closed stream, a handover, a
//! broker restart and the transactions it aborts. The figure is what shows
//! such a stop bounded; a stop that never ended shows as a run that did not
//! drain.

use std::collections::BTreeMap;

use serde::Serialize;

/// What the fault table's last column is, for SOAK.md's conditions.
pub(crate) const STOPS: &str = "- Stops: a fault row's last column is the longest gap between two consecutive decisions of one input partition (each output's `idemgate-decided-at`, as the readers see the outputs) that overlaps the fault's window: from its start to the next fault's, the last one's until the producer finished (a stop spanning several windows counts for each). Records arrive on every partition all through the window, so a gap is records waiting (a store freeze on the fail-closed stream, a handover, a broker restart and the transactions it aborts); a stop that never ended would be a run that did not drain.";

/// The longest gap in one fault's window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Pause {
    pub seconds: f64,
    /// The stream's name and the input partition it was seen on.
    pub stream: String,
    pub partition: i32,
}

/// Decision times (ms since the epoch) by stream index and input
/// partition, in any order.
pub(crate) type Decisions = BTreeMap<(usize, i32), Vec<i64>>;

/// For each fault start (ms since the epoch, ascending), the longest gap
/// between two consecutive decisions of one partition that overlaps
/// `[start, next start)` (the last window ends at `end`). `None` where no
/// gap does: no decision before and after the window's start.
pub(crate) fn longest(
    starts: &[i64],
    end: i64,
    decisions: &Decisions,
    names: &[&str],
) -> Vec<Option<Pause>> {
    let mut out: Vec<Option<Pause>> = vec![None; starts.len()];
    for ((stream, partition), times) in decisions {
        let mut times = times.clone();
        times.sort_unstable();
        for pair in times.windows(2) {
            let (from, to) = (pair[0], pair[1]);
            let seconds = (to - from) as f64 / 1000.0;
            for (i, start) in starts.iter().enumerate() {
                let until = starts.get(i + 1).copied().unwrap_or(end);
                let overlaps = from < until && to > *start;
                if overlaps && out[i].as_ref().is_none_or(|p| seconds > p.seconds) {
                    out[i] = Some(Pause {
                        seconds,
                        stream: names.get(*stream).copied().unwrap_or("?").to_string(),
                        partition: *partition,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decisions(rows: &[((usize, i32), &[i64])]) -> Decisions {
        rows.iter().map(|(k, v)| (*k, v.to_vec())).collect()
    }

    fn seconds(pauses: &[Option<Pause>]) -> Vec<Option<f64>> {
        pauses
            .iter()
            .map(|p| p.as_ref().map(|p| p.seconds))
            .collect()
    }

    #[test]
    fn each_fault_gets_the_longest_gap_overlapping_its_window() {
        // Faults at 1,000 and 5,000 ms; the producer ends at 9,000.
        let d = decisions(&[
            // Partition 0 stops from 1,200 to 4,200 (3 s), then flows.
            ((0, 0), &[900, 1_200, 4_200, 4_300, 6_000, 6_100]),
            // Partition 1 of the other stream (given out of order) stops
            // from 5,500 to 8,000.
            ((1, 1), &[8_000, 1_000, 1_100, 5_000, 5_500, 900]),
        ]);
        let pauses = longest(&[1_000, 5_000], 9_000, &d, &["bank", "telemetry"]);
        assert_eq!(
            pauses,
            vec![
                // 1,100 -> 5,000 (3.9 s) beats partition 0's 3 s.
                Some(Pause {
                    seconds: 3.9,
                    stream: "telemetry".into(),
                    partition: 1
                }),
                Some(Pause {
                    seconds: 2.5,
                    stream: "telemetry".into(),
                    partition: 1
                }),
            ]
        );
    }

    #[test]
    fn a_stop_that_began_just_before_a_fault_counts_for_it() {
        // A crash at 1,000 stops decisions at once: the last came at 990,
        // the next at 15,000 (after the restart, before the next fault at
        // 20,000): the crash's row shows that 14.01 s stop.
        let d = decisions(&[((0, 2), &[500, 990, 15_000, 15_010, 21_000, 21_100])]);
        let pauses = longest(&[1_000, 20_000], 30_000, &d, &["bank"]);
        assert_eq!(seconds(&pauses), vec![Some(14.01), Some(5.99)]);
    }

    #[test]
    fn gaps_outside_every_window_count_for_none() {
        // Before the first fault, and after the producer ended.
        let d = decisions(&[((0, 3), &[0, 900, 9_500, 20_000])]);
        assert_eq!(
            seconds(&longest(&[1_000], 9_000, &d, &["bank"])),
            vec![Some(8.6)]
        );
        let d = decisions(&[((0, 3), &[0, 900, 9_500, 20_000])]);
        assert_eq!(
            seconds(&longest(&[10_000], 9_000, &d, &["bank"])),
            vec![None]
        );
        assert_eq!(
            seconds(&longest(
                &[950],
                960,
                &decisions(&[((0, 0), &[0, 900])]),
                &["bank"]
            )),
            vec![None]
        );
    }
}
