//! The report of `idemgate reset` (`reset.rs` plans it): per partition
//! the offsets before and after and what happens, then the risk of the
//! choice made.

use std::fmt::Write;

use super::reset::{Change, Plan};

/// The report: per partition the offsets before and after and what
/// happens, then the risk of the choice made.
pub fn text(plan: &Plan, dry_run: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "stream {}: {}",
        plan.stream,
        if dry_run {
            "dry run, nothing written"
        } else {
            "reset"
        }
    );
    let names: Vec<String> = plan
        .partitions
        .iter()
        .map(|p| format!("{}/{}", p.topic, p.partition))
        .collect();
    let width = names.iter().map(String::len).max().unwrap_or(0).max(9);
    let _ = writeln!(
        out,
        "  {:<width$} {:>12} {:>12} {:>12}  what",
        "partition", "committed", "new", "watermark"
    );
    for (p, name) in plan.partitions.iter().zip(&names) {
        let committed = p
            .committed
            .map_or_else(|| format!("none ({})", p.before), |c| c.to_string());
        let watermark = p.watermark.map_or_else(|| "none".into(), |w| w.to_string());
        let what = match p.change {
            Change::Unchanged => "unchanged".to_string(),
            Change::Backward => match p.replay {
                Some((from, to)) => format!(
                    "backward replay of {} records; those delivered before as their claim's \
                     holder in [{from}, {to}) go to clean again, marked idemgate-replay",
                    p.before - p.after
                ),
                None => format!(
                    "backward replay of {} records: decided before, nothing produced again",
                    p.before - p.after
                ),
            },
            Change::Forward => match (p.raise_to, p.abandon) {
                (Some(to), _) => format!(
                    "forward skip of {} records, counted delivered: watermark raised to {to}",
                    p.after - p.before
                ),
                (_, Some((from, to))) => format!(
                    "forward skip of {} records, [{from}, {to}) abandoned: their unsettled \
                     claims may be taken over",
                    p.after - p.before
                ),
                _ => "forward skip".to_string(),
            },
        };
        let clamped = p.clamped_from.map_or_else(String::new, |wanted| {
            let end = if wanted < p.after { "start" } else { "end" };
            format!(" (shifted to {wanted}, kept at the log's {end})")
        });
        let _ = writeln!(
            out,
            "  {name:<width$} {committed:>12} {:>12} {watermark:>12}  {what}{clamped}",
            p.after
        );
    }
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
