//! Where an exactly-once run's transactions spent their time: each step
//! of the commit, from the replicas' own
//! `idemgate_transaction_step_seconds` (scraped once every record is
//! committed, as the decision latency is).

use std::fmt::Write;

use super::report::run_name;
use super::runs::RunResult;

pub(crate) fn steps_section(runs: &[RunResult], md: &mut String) {
    let rows: Vec<&RunResult> = runs
        .iter()
        .filter(|r| r.scraped.as_ref().is_some_and(|s| !s.txn_steps.is_empty()))
        .collect();
    if rows.is_empty() {
        return;
    }
    md.push_str("### Exactly once: where a transaction's time goes (clean runs)\n\n");
    md.push_str("Each replica's `idemgate_transaction_step_seconds`, summed over the replicas: *inserts* its tier-2 inserts, on the loop (a stream without tier 2 has none); *offsets* `send_offsets_to_transaction`; *commit* `commit_transaction`, which first waits for the delivery reports of the outputs the transaction holds. Offsets and commit run off the loop: meanwhile it claims and sends the next transaction's outputs on the replica's other producer. p99 is interpolated within the histogram's buckets.\n\n");
    md.push_str("| run | step | transactions | mean ms | p99 ms |\n");
    md.push_str("|---|---|--:|--:|--:|\n");
    for r in rows {
        let Some(scraped) = &r.scraped else { continue };
        for s in &scraped.txn_steps {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.1} | {} |",
                run_name(r),
                s.step,
                s.count,
                s.mean_ms,
                s.p99_ms.map_or("-".into(), |p| format!("{p:.1}")),
            );
        }
    }
    md.push('\n');
}
