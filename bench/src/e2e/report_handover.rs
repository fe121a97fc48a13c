//! The handover runs in `BENCHMARKS.md`: a table per guarantee of how
//! long the partitions a stopping replica gave up were unserved, and what
//! the figures mean.

use std::fmt::Write as _;

use super::report::{opt, Report};

const MEANING: &str = "Two clean replicas in exact mode read a fresh raw topic that the \
harness produces at a steady rate while they run (the same bank-txn generator as the main \
dataset, paced, a slice every 10 ms). Each replica writes its own clean and audit topics (their \
names alone differ), so an output says which replica decided it. A reader in the harness \
(`isolation.level = read_committed`, `fetch.wait.max.ms` 10; outside every replica's path) \
notes every output: its replica, the input partition its `idemgate-input` header names, and \
when the reader got it. Once every partition has flowed from one replica alone for 2 s, both \
replicas serving, replica 0 gets SIGTERM, what a rolling restart sends (`idemgate run`'s own \
graceful stop). The partitions *moved* are those whose latest output before the signal was \
replica 0's. A moved partition's *unserved* time runs from the signal (not from the revoke: \
the stop's drain and commit, the leave and the group's rebalance are all inside it) to the \
first output of replica 1 on that partition that the reader got; the reader's own fetch wait \
(up to 10 ms) is in it, and the stream's spacing (a partition's records are a few ms apart). \
The classic protocol's eager assignor revokes every partition at the rebalance, so replica 1's \
own partitions pause too; they are not in these figures. Under the classic protocol replica 1 \
learns of the rebalance at its next heartbeat (librdkafka's `heartbeat.interval.ms`, 3 s by \
default), so the unserved time moves from run to run by up to about 3 s with where the signal \
falls between two heartbeats. *Stop* is from the signal to replica \
0's report (its worker returned: its outputs committed, the group left). Both replicas run with the \
default `batch.handover_drain` (10 s), which bounds the exactly-once drain. *Visible p50 / p99* \
is the steady stream's latency, both replicas serving, for the inputs sent in its 2 s steady \
window (not a backlog of the rebalance before it) and read within 1 s after the window, when \
the signal goes: from an input's send (its record's create time, which its output keeps) to the reader's poll of the \
output, so the harness producer's linger and 10 ms slices and the reader's fetch wait are in \
it; under exactly once an output is visible only once its transaction commits.";

impl Report {
    /// The handover table, for stdout and the Markdown alike (empty when
    /// no handover ran).
    pub fn handover_table(&self) -> String {
        let mut out = String::new();
        if self.handovers.is_empty() {
            return out;
        }
        out.push_str("| handover | records/s | visible p50 / p99 ms | partitions moved | served | unserved median ms | unserved max ms | leaving replica's stop s | check |\n");
        out.push_str("|---|--:|--:|--:|--:|--:|--:|--:|---|\n");
        for h in &self.handovers {
            let f = &h.figures;
            let _ = writeln!(
                out,
                "| {}, 2 replicas | {} | {} / {} | {} of {} | {} | {} | {} | {:.2} | {} |",
                h.mode.label(),
                h.records_per_s,
                opt(h.visible.p50_ms, 0),
                opt(h.visible.p99_ms, 0),
                f.moved,
                h.partitions,
                f.served,
                opt(f.median_ms, 0),
                opt(f.max_ms, 0),
                h.stop_s,
                h.check,
            );
        }
        out
    }

    pub(crate) fn handover_section(&self, md: &mut String) {
        if self.handovers.is_empty() {
            return;
        }
        md.push_str("### Handover: how long a moved partition is unserved\n\n");
        md.push_str(&self.handover_table());
        md.push('\n');
        md.push_str(
            "Per moved partition (ms from the signal to the new owner's first output):\n\n",
        );
        for h in &self.handovers {
            let each: Vec<String> = h
                .moved
                .iter()
                .map(|m| {
                    format!(
                        "{}: {}",
                        m.partition,
                        m.unserved_ms
                            .map_or("not served".into(), |ms| format!("{ms:.0}"))
                    )
                })
                .collect();
            let _ = writeln!(md, "- {}: {}", h.mode.label(), each.join(", "));
        }
        md.push('\n');
        md.push_str(MEANING);
        md.push_str("\n\n");
    }
}
